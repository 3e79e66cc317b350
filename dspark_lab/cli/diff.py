"""`dspark-lab diff BEFORE AFTER`: two versions of a step compared, as a table and as Markdown.

BEFORE and AFTER are two targets (measured together in one worker, their trials interleaved, so
the step-time change is paired per round) or two recorded inspect records (*.json). Exit
statuses: 0 compared; 2 a bad target or record (one line naming it; nothing written); 5 the
output cannot be written.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dspark_lab.cli.exits import output_status
from dspark_lab.cli.inspect import (EXIT_BAD_TARGET, EXIT_CANNOT_WRITE, EXIT_OK, TARGET_HELP, add_measure_options,
                                    err, outputs, stem)
from dspark_lab.cli.options import HelpFormatter, file_stem
from dspark_lab.results.analyses import step_diff, verdict
from dspark_lab.results.record import inspect_record
from dspark_lab.results.record.output import OutputError, check_output, write_text_safely
from dspark_lab.run import worker
from dspark_lab.run.target import TargetError, parse

DEFAULT_OUT = Path("out") / "diff"


def add_diff_parser(sub) -> None:
    p = sub.add_parser(
        "diff", formatter_class=HelpFormatter,
        help="compare two versions of a step: sync sites added/removed/changed, their cost, the step-time change",
        description="Compare two versions of a step: the sync sites added, removed and changed (per-step counts "
                    "and the GPU idle each caused), the totals, and the step-time change with its 95% CI, "
                    "printed as a table and written as Markdown for a PR description (with both records).\n\n"
                    + __doc__.split("\n\n", 1)[1],
    )
    p.add_argument("before", metavar="BEFORE", help="a recorded inspect record (*.json), or a target: " + TARGET_HELP)
    p.add_argument("after", metavar="AFTER", help="the same kind as BEFORE")
    add_measure_options(p)
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                   help="folder for <name>.md and, for two targets, their records <name>-before/-after.json")
    o.add_argument("--name", default=None, metavar="NAME", type=file_stem, help="file name stem (default: both callables and the time)")
    o.add_argument("--json", action="store_true", help="print the diff as JSON instead of the table")
    p.set_defaults(func=cmd_diff)


def is_record(arg: str) -> bool:
    return arg.endswith(".json")


def as_json(d: dict) -> str:
    out = {k: v for k, v in d.items() if k not in ("sites", "summary")}
    out["sites"] = d["sites"].astype(object).where(d["sites"].notna(), None).to_dict("records")
    out["summary"] = d["summary"].astype(object).where(d["summary"].notna(), None).to_dict("records")
    return json.dumps(out, indent=1)


def _records(args) -> tuple[dict, dict, bool]:
    """Both records, and whether they were measured now (then they are written beside the diff)."""
    kinds = {is_record(args.before), is_record(args.after)}
    if len(kinds) > 1:
        raise TargetError(f"{args.before} {args.after}", "BEFORE and AFTER must both be targets or both records (*.json)")
    if kinds == {True}:
        return inspect_record.load(args.before), inspect_record.load(args.after), False
    a, b = worker.diff_targets(args.before, args.after, steps=args.steps, trials=args.trials, warmup=args.warmup,
                                    allow=args.allow, time_limit_s=args.time_limit)
    return a, b, True


def cmd_diff(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        labels = [Path(x).stem if is_record(x) else parse(x).label for x in (args.before, args.after)]
    except TargetError as e:
        err(str(e))
        return EXIT_BAD_TARGET
    name = stem(f"{labels[0]}-vs-{labels[1]}", args.name)
    md_path = Path(args.out) / f"{name}.md"
    try:
        check_output(md_path)
        rec_paths = [outputs(args.out, f"{name}-{role}")[0] for role in ("before", "after")]
    except OutputError as e:
        err(str(e))
        return output_status(e)
    try:
        before, after, measured = _records(args)
    except (TargetError, inspect_record.RecordError) as e:
        err(str(e))
        return EXIT_BAD_TARGET
    d = step_diff.diff(before, after)
    try:
        write_text_safely(md_path, step_diff.markdown(d) + "\n")
        if measured:
            for rec, p in zip((before, after), rec_paths):
                inspect_record.save(rec, p)
    except OutputError as e:
        err(str(e))
        return output_status(e)
    print(as_json(d) if args.json else step_diff.text(d))
    if not args.json:
        print(f"\nMarkdown: {md_path}" + (f"\nrecords: {rec_paths[0]}, {rec_paths[1]}" if measured else ""))
        print(verdict.diff_line(d))  # the last line: verdict, why, next step
    return EXIT_OK
