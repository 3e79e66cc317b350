"""`dspark-lab verify`: the kit checks its accounting on this machine against truths it builds (see
dspark_lab.verify), prints a verdict per check with the numbers behind it, and saves the record
beside the platform card."""
from __future__ import annotations

import argparse
from pathlib import Path

from dspark_lab.cli.options import HelpFormatter
from dspark_lab.results.record.verify_record import GROUPS

EXIT_HELP = ("exit status: 0 every check passed; 1 a check failed; 2 bad arguments; 5 the record cannot be "
             "written; 6 nothing could be checked here (no CUDA: one line per group says why; nothing is saved).")


def add_verify_parser(sub) -> None:
    p = sub.add_parser(
        "verify", formatter_class=HelpFormatter,
        help="check the kit's accounting on this GPU against step functions whose answers are known (~2 min)",
        description="Check the kit on this machine against truths it builds: sync counts and lines of step "
                    "functions with known syncs (through measure_step and the guard); the charged GPU idle of "
                    "steps with known caused idle against their profiler-free loss, within a tolerance measured "
                    "here; the platform card's verdicts on cells whose answer is known; the hazards (the race "
                    "reproduces, each fix gives 0); each kata's reference solution; CUDA events against the "
                    "host clock. One line per check; the record goes to data/machines/<gpu>-verify-<date>.json, "
                    "which doctor, the report and notebook 02 read (\"verified on this GPU: N of N\").\n\n"
                    + EXIT_HELP,
    )
    p.add_argument("--only", nargs="+", choices=GROUPS, metavar="GROUP",
                   help=f"check only these groups (of {', '.join(GROUPS)})")
    p.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="where the record goes (default: data/machines/<gpu>-verify-<date>.json of the repo, or "
                        "$DSPARK_DATA/machines)")
    p.add_argument("--no-save", action="store_true", help="print the verdicts, save nothing")
    p.add_argument("--json", action="store_true", help="print the record as JSON instead of the lines")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dspark_lab.cli import verify_command

    return verify_command.cmd_verify(args, parser)
