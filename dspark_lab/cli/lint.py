"""`dspark-lab lint` in the kit's command line (the command itself, its exit statuses and the
pre-commit hook's torch-free entry: dspark_lab/lint/command.py), and `inspect --lint`'s join of the
findings with a record's runtime sites."""
from __future__ import annotations

import argparse
from pathlib import Path

from dspark_lab.cli.options import HelpFormatter
from dspark_lab.lint import LintInputError, lint_paths
from dspark_lab.lint.command import DESCRIPTION, add_arguments, lint_command
from dspark_lab.lint.explain import why_not_found
from dspark_lab.lint.run import files
from dspark_lab.lint.source import SkippedFile, read_source
from dspark_lab.results.analyses import lint_join


def add_lint_parser(sub) -> None:
    p = sub.add_parser(
        "lint", formatter_class=HelpFormatter,
        help="find host syncs in Python source before they run (.item(), if tensor:, pageable copies...)",
        description=DESCRIPTION,
    )
    add_arguments(p)
    p.set_defaults(func=cmd_lint)


def cmd_lint(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return lint_command(args.paths, as_json=args.json, show_exempt=args.show_exempt)


def lint_beside(rec: dict, root) -> list[str]:
    """`inspect --lint`: lint the target's folder, join the findings with the record's runtime sites
    (results/analyses/lint_join.py; a site whose recorded line moved is joined where its code is
    today), keep the joined rows in the record under "lint", and return the
    lines to print."""
    linted = {lint_join.short(p): p for p in files([Path(root)])}

    def today_lines(short_path: str):
        p = linted.get(short_path)
        try:
            return read_source(str(p)).splitlines() if p else None
        except (SkippedFile, LintInputError):  # over a limit or unreadable: no line to check against
            return None

    def explain(short_path: str, line: int):
        lines = today_lines(short_path)
        return why_not_found("\n".join(lines), line) if lines is not None else None
    skipped: list[str] = []
    try:
        found = lint_paths([root], skipped)
    except LintInputError as e:
        rec["lint"] = {"error": str(e)}
        return [f"lint: {e}"]
    rec["lint"] = lint_join.join([f.to_dict() for f in found], rec["sites"], explain=explain, today_lines=today_lines)
    return [f"lint: skipped: {line}" for line in skipped] + lint_join.text_lines(rec["lint"])
