"""`dspark-lab lint PATH...`: host syncs found in the source before the step runs (no torch, no GPU).

Exit statuses: 0 no finding (lines marked `# sync-ok: <reason>` are by design and do not count);
1 findings (one line each: file:line:col, the rule, the fix the gallery teaches); 2 bad input: a
path that does not exist, or a file that does not parse (nothing can be checked there, so the
check fails rather than passing it silently); 6 a file was skipped, findings or not (larger than
8 MiB, nested deeper than 200 levels, or not a regular file: a FIFO, a device, a link to one; one
line each names it and the limit; the other files are linted). Runs as the pre-commit hook
`dspark-lab-lint`.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dspark_lab.cli.exits import EXIT_NOT_CHECKED
from dspark_lab.cli.options import HelpFormatter
from dspark_lab.cli.terminal import err, say
from dspark_lab.lint import RULES, LintInputError, lint_paths
from dspark_lab.lint.explain import why_not_found
from dspark_lab.lint.run import files
from dspark_lab.lint.source import read_source
from dspark_lab.results.analyses import lint_join

EXIT_CLEAN, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_SKIPPED = 0, 1, 2, EXIT_NOT_CHECKED


def add_lint_parser(sub) -> None:
    p = sub.add_parser(
        "lint", formatter_class=HelpFormatter,
        help="find host syncs in Python source before they run (.item(), if tensor:, pageable copies...)",
        description="Read Python files (and every *.py under folders) and report each line that makes a host "
                    "sync when it runs, with the one-line fix; a module that never imports torch is not "
                    "checked. `# sync-ok: <reason>` on a line marks it by design (a bare `# sync-ok` is itself "
                    "a finding). Rules: " + "; ".join(f"{r.id} ({r.finds})" for r in RULES.values())
                    + ".\n\n" + __doc__.split("\n\n", 1)[1],
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="Python files or folders")
    p.add_argument("--json", action="store_true", help="print the findings (exempt ones too) as a JSON list")
    p.add_argument("--show-exempt", action="store_true", help="also list the lines marked `# sync-ok: <reason>`")
    p.set_defaults(func=cmd_lint)


def cmd_lint(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    skipped: list[str] = []
    try:
        found = lint_paths(args.paths, skipped)
    except LintInputError as e:
        err(e)
        return EXIT_BAD_INPUT
    for line in skipped:
        err(f"skipped: {line}")
    live = [f for f in found if not f.exempt]
    status = EXIT_SKIPPED if skipped else EXIT_FINDINGS if live else EXIT_CLEAN
    if args.json:  # JSON escapes every control and non-ASCII character itself
        print(json.dumps([f.to_dict() for f in found], indent=1))
        return status
    for f in live:
        say(f.describe())  # a path or a source line from the file: escaped (cli/terminal.py)
    exempt = [f for f in found if f.exempt]
    if args.show_exempt:
        for f in exempt:
            say(f"{f.path}:{f.line}: by design ({f.rule}): {f.exempt_reason}")
    say(f"{len(live)} host sync line(s) found; {len(exempt)} marked by design (# sync-ok: <reason>)"
        + (f"; {len(skipped)} file(s) skipped, not linted" if skipped else ""),
        file=sys.stderr if live or skipped else sys.stdout)
    return status


def lint_beside(rec: dict, root) -> list[str]:
    """`inspect --lint`: lint the target's folder, join the findings with the record's runtime sites
    (results/analyses/lint_join.py), keep the joined rows in the record under "lint", and return the
    lines to print."""
    linted = {lint_join.short(p): p for p in files([Path(root)])}

    def explain(short_path: str, line: int):
        p = linted.get(short_path)
        return why_not_found(read_source(str(p)), line) if p else None
    skipped: list[str] = []
    try:
        found = lint_paths([root], skipped)
    except LintInputError as e:
        rec["lint"] = {"error": str(e)}
        return [f"lint: {e}"]
    rec["lint"] = lint_join.join([f.to_dict() for f in found], rec["sites"], explain=explain)
    return [f"lint: skipped: {line}" for line in skipped] + lint_join.text_lines(rec["lint"])
