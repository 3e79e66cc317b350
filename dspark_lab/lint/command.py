"""`dspark-lab lint PATH...`: host syncs found in the source before the step runs (no torch, no GPU).

Exit statuses: 0 no finding (lines marked `# sync-ok: <reason>` are by design and do not count);
1 findings (one line each: file:line:col, the rule, the fix the gallery teaches); 2 bad input: a
path that does not exist, or a file that does not parse (nothing can be checked there, so the
check fails rather than passing it silently); 6 a file was skipped, findings or not (larger than
8 MiB, nested deeper than 200 levels, or not a regular file: a FIFO, a device, a link to one; one
line each names it and the limit; the other files are linted). Runs as the pre-commit hook `dspark-lab-lint`
(`main`, the console script `dspark-lab-lint`: it imports only this package, so the hook's
environment needs no torch, numpy or pandas).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from dspark_lab.printable import printable
from dspark_lab.lint.findings import LintInputError
from dspark_lab.lint.rules import RULES
from dspark_lab.lint.run import lint_paths

# 6: the kit's "not checked here" status (cli/exits.py EXIT_NOT_CHECKED; a test holds them equal).
EXIT_CLEAN, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_SKIPPED = 0, 1, 2, 6
DESCRIPTION = ("Read Python files (and every *.py under folders) and report each line that makes a host sync when "
               "it runs, with the one-line fix; a module that never imports torch is not checked. "
               "`# sync-ok: <reason>` on a line marks it by design (a bare `# sync-ok` is itself a finding). Rules: "
               + "; ".join(f"{r.id} ({r.finds})" for r in RULES.values()) + ".\n\n" + __doc__.split("\n\n", 1)[1])


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="Python files or folders")
    p.add_argument("--json", action="store_true", help="print the findings (exempt ones too) as a JSON list")
    p.add_argument("--show-exempt", action="store_true", help="also list the lines marked `# sync-ok: <reason>`")


def _say(text: object, file=None) -> None:
    print(printable(text), file=file if file is not None else sys.stdout, flush=True)


def lint_command(paths: Sequence[str], *, as_json: bool = False, show_exempt: bool = False) -> int:
    """Lint `paths`, print the findings (every text from a file escaped), return the exit status."""
    skipped: list[str] = []
    try:
        found = lint_paths(paths, skipped)
    except LintInputError as e:
        _say(f"dspark-lab: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for line in skipped:
        _say(f"dspark-lab: skipped: {line}", file=sys.stderr)
    live = [f for f in found if not f.exempt]
    status = EXIT_SKIPPED if skipped else EXIT_FINDINGS if live else EXIT_CLEAN
    if as_json:  # JSON escapes every control and non-ASCII character itself
        print(json.dumps([f.to_dict() for f in found], indent=1))
        return status
    for f in live:
        _say(f.describe())
    exempt = [f for f in found if f.exempt]
    if show_exempt:
        for f in exempt:
            _say(f"{f.path}:{f.line}: by design ({f.rule}): {f.exempt_reason}")
    _say(f"{len(live)} host sync line(s) found; {len(exempt)} marked by design (# sync-ok: <reason>)"
         + (f"; {len(skipped)} file(s) skipped, not linted" if skipped else ""),
         file=sys.stderr if live or skipped else sys.stdout)
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The pre-commit hook's entry (`dspark-lab-lint`): `dspark-lab lint` without the rest of the kit."""
    p = argparse.ArgumentParser(prog="dspark-lab-lint", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    return lint_command(args.paths, as_json=args.json, show_exempt=args.show_exempt)


if __name__ == "__main__":
    sys.exit(main())
