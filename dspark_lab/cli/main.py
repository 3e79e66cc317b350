"""Command line: `dspark-lab sweep | report | doctor | main | ep | inspect | diff | verify | lint | trace` (see `dspark-lab COMMAND --help`):
the parser, the dispatch to each command, and the exit statuses. Building the parser loads no torch:
`report` (report_command.py) and `--help` run without it; sweep and main (sweep_command.py),
doctor, ep, inspect and diff import their measuring bodies when they run."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from dspark_lab.cli.diff import add_diff_parser
from dspark_lab.cli.doctor import add_doctor_parser
from dspark_lab.cli.ep import add_ep_parser
# The exit statuses, also importable from here (tests and scripts name them as main.EXIT_*).
from dspark_lab.cli.exits import (EXIT_BUSY, EXIT_CANNOT_WRITE, EXIT_CODES_HELP, EXIT_FAILED, EXIT_INTERRUPTED,  # noqa: F401
                                  EXIT_OK, EXIT_REFUSED, EXIT_TERMINATED, EXIT_USAGE, Terminated, hold_interrupts)
from dspark_lab.cli.inspect import add_inspect_parser
from dspark_lab.cli.lint import add_lint_parser
from dspark_lab.cli.options import DEFAULT_TIME_CAP_S, HelpFormatter, add_sweep_config_options, float_in
from dspark_lab.cli.report_command import cmd_report, output_file
from dspark_lab.cli.terminal import err as _err
from dspark_lab.cli.trace_command import add_trace_parser
from dspark_lab.cli.verify import add_verify_parser
from dspark_lab.results.query.catalog import MAX_COMPARED
from dspark_lab.results.record import paths, store
from dspark_lab.startup import finished, started
from dspark_lab.run.sweep_spec import PRESETS

DEFAULT_REPORT = Path("out") / "report.html"
CPU_RUNS_HELP = ("headline CPU-only runs too (a CPU's step times say nothing of a GPU's syncs: by default they are "
                 "left out of the headline and named; as Runs.headline(cpu_runs=True))")

# ---------------------------------------------------------------------------------------------
# The parser
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dspark-lab",
        description="Host-to-device sync pitfalls around SGLang's DSpark draft forward: sweep, record, report.",
        epilog=EXIT_CODES_HELP,
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_sweep_parser(sub)
    _add_report_parser(sub)
    add_doctor_parser(sub)
    sub.choices["doctor"].set_defaults(func=cmd_doctor)
    _add_main_parser(sub)
    add_ep_parser(sub)
    sub.choices["ep"].set_defaults(func=cmd_ep)
    add_inspect_parser(sub)
    add_diff_parser(sub)
    add_verify_parser(sub)
    add_lint_parser(sub)
    add_trace_parser(sub)
    return parser


def _add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep", formatter_class=HelpFormatter,
        help="measure a grid of EP x batch x gamma x strategy into a run file",
        description="Measure a grid of config points; each point measures all strategies with interleaved "
                    "trials and is written (fsynced) to the run file as soon as it finishes. A failed point "
                    "is recorded as failed and the sweep goes on. Ctrl-C stops it with every finished point "
                    "saved; rerun with --resume to finish it. One process writes a run file at a time (a "
                    "lock): a second --resume of a file being written is refused.\n\n" + EXIT_CODES_HELP,
    )
    add_sweep_config_options(p)
    a = p.add_argument_group("adaptive trials (each point until its headline ratio is steady)")
    a.add_argument("--target-ci", type=float_in(0.1, 100), default=None, metavar="PCT",
                   help="measure each point in interleaved rounds until the 95%% CI half-width of its headline "
                        "ratio (device_direct / non_blocking, else the baseline over the best fix; disturbed "
                        "trials left out) is at most PCT %% of it, or --time-cap is reached; --trials is then "
                        "the minimum. Rows record which (stop_reason)")
    a.add_argument("--time-cap", type=float_in(1, 3600), default=None, metavar="S",
                   help=f"with --target-ci: seconds of trials per point at most (default: {DEFAULT_TIME_CAP_S:g})")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=None, metavar="PATH",
                   help="run file (*.jsonl) or folder for a new run file named <run_id>.jsonl "
                        "(default: data/runs/ of the repo, or $DSPARK_DATA/runs)")
    o.add_argument("--name", default=None, metavar="TEXT",
                   help="a short name for this run, used as its label in reports, legends and dropdowns "
                        "(default: the GPU with the date and time)")
    o.add_argument("--resume", action="store_true",
                   help="continue the run file at --out (a folder: its most recent run file), skipping the "
                        "points already recorded; grid options, if given, must match the recorded sweep")
    o.add_argument("--retry-failed", action="store_true",
                   help="with --resume, measure again the points recorded as failed")
    o.add_argument("--save-traces", action="store_true",
                   help="also save each point's chrome traces beside the run file (<run>.traces/; large)")
    o.add_argument("--probe", action="store_true",
                   help="run the pageable-copy probe first and record it in the run's header (CUDA only)")
    o.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(func=cmd_sweep)


def _add_report_parser(sub) -> None:
    p = sub.add_parser(
        "report", formatter_class=HelpFormatter,
        help="build a standalone HTML report from recorded runs",
        description="Load run files (and every *.jsonl under folders) and write one standalone HTML file. "
                    "Damaged records or files are skipped with a warning naming file and line (the report "
                    "lists them too). The output is never a run file nor inside a runs folder; missing "
                    "parent folders are created.\n\n" + EXIT_CODES_HELP,
    )
    p.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                   help="run files or folders (default: the data dir, data/ or $DSPARK_DATA)")
    p.add_argument("-o", "--out", type=output_file, default=DEFAULT_REPORT, metavar="FILE", help="HTML file to write")
    p.add_argument("--summary", action="store_true", help="also print a text summary table of the runs")
    p.add_argument("--cpu-runs", action="store_true", help=CPU_RUNS_HELP)
    # Which runs the figures compare (every run is listed in the report's tables); as Runs.select.
    g = p.add_argument_group("runs compared in the figures (default: the latest run of each machine, then the newest)")
    g.add_argument("--gpu", metavar="TEXT", help="GPU name contains TEXT (case-insensitive), e.g. H200")
    g.add_argument("--driver", metavar="VERSION", help="driver version or its prefix, e.g. 580")
    g.add_argument("--torch", metavar="VERSION", help="torch version or its prefix, e.g. 2.11")
    g.add_argument("--since", metavar="DATE", help="recorded on or after DATE (2026-11-30, or 2026-11)")
    g.add_argument("--until", metavar="DATE", help="recorded on or before DATE (that day included)")
    g.add_argument("--name", metavar="TEXT", help="run label, recorded name or file name contains TEXT")
    g.add_argument("--compare", type=int, default=None, metavar="N",
                   help=f"draw at most N runs side by side (default {MAX_COMPARED})")
    p.set_defaults(func=cmd_report)


def _add_main_parser(sub) -> None:
    p = sub.add_parser(
        "main", formatter_class=HelpFormatter,
        help="without JupyterLab: sweep on CUDA (else show the recorded runs), then report (the main job, `bash lab.sh`, opens the notebooks)",
        description="On a CUDA machine: record the fingerprint and probe, run the sweep (--preset) into "
                    "data/runs/, then measure the headline's reference point to its CI target (after the quiet "
                    "rounds a CI needs) into a run of its own, then build the report from every recorded run. Without CUDA: say so, build "
                    "the report from the runs recorded in the data dir and print the headline (with the rule "
                    "that chose it) and a summary table of them.\n\n" + EXIT_CODES_HELP,
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="default", help="sweep to run on CUDA")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="data dir holding runs/ (default: data/ of the repo, or $DSPARK_DATA)")
    p.add_argument("-o", "--out", type=output_file, default=DEFAULT_REPORT, metavar="FILE", help="HTML report to write")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.add_argument("--cpu-runs", action="store_true", help=CPU_RUNS_HELP)
    p.set_defaults(func=cmd_main)


# ---------------------------------------------------------------------------------------------
# The commands that measure (sweep, main, doctor, ep): their bodies are imported when they run. Every command's parser is
# built for every command (`report` and `--help` among them); only these need torch.
# ---------------------------------------------------------------------------------------------
def cmd_sweep(args: argparse.Namespace, parser: argparse.ArgumentParser, measure=None) -> int:
    from dspark_lab.cli import sweep_command

    return sweep_command.cmd_sweep(args, parser, measure)


def cmd_main(args: argparse.Namespace, parser: argparse.ArgumentParser, measure=None) -> int:
    from dspark_lab.cli import sweep_command

    return sweep_command.cmd_main(args, parser, measure)


def cmd_doctor(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dspark_lab.cli import doctor_command

    return doctor_command.cmd_doctor(args, parser)


def cmd_ep(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dspark_lab.cli import ep_command

    return ep_command.cmd_ep(args, parser)


# ---------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    try:
        started()  # Ctrl-C is a KeyboardInterrupt again (dspark_lab/startup.py), handled below
        parser = build_parser()
        args = parser.parse_args(argv)
        # The subcommand's own parser, so that its errors print its usage.
        sub = next(a for a in parser._subparsers._group_actions if isinstance(a, argparse._SubParsersAction))
        subparser = sub.choices[args.command]
        return int(args.func(args, subparser) or 0)
    except store.SchemaVersionError as e:
        _err(str(e))
        return EXIT_USAGE
    except store.RunFileBusy as e:
        _err(str(e))
        return EXIT_BUSY
    except paths.SettingError as e:  # DSPARK_DATA or DSPARK_CACHE unusable (also a cache inside the runs)
        _err(str(e))
        return EXIT_USAGE
    except Terminated:
        hold_interrupts()
        _err("terminated (SIGTERM)")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        hold_interrupts()
        _err("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, and let exit not flush into it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    finally:
        finished()  # the status is said: a Ctrl-C while exiting (a --help's SystemExit too) lets it stand


if __name__ == "__main__":
    sys.exit(main())
