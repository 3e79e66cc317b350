"""`dspark-lab inspect TARGET`: measure your own step and write its record and page.

With --headroom, each site that reads a value back is served from a warm-up step's value (no
sync) and the step timed again against the real one: the measured headroom beside the charge
(<name>-headroom.json; with --html also its page, <name>-headroom.html). With --races, a fresh step (a factory target) runs under queued GPU work
and is compared with a synchronized reference: each output that differs is a race.

Exit statuses: 0 measured (and, with --guard, no host sync that the allow-list does not name;
with --races, no race); 1 --guard found a host sync not allowed (or, with --strict, nothing could
be checked without CUDA), or --races found a race; 2 a bad target (it does not import, is not callable, needs arguments, raises, returns a
non-callable, or runs past --time-limit): one line naming it, nothing written; 5 the output
cannot be written.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
from pathlib import Path

from dspark_lab.cli.exits import output_status
from dspark_lab.printable import one_line
from dspark_lab.cli.lint import lint_beside
from dspark_lab.cli.options import HelpFormatter, file_stem, float_in, int_in
from dspark_lab.results.analyses import verdict as verdict_line
from dspark_lab.results.record import inspect_record
from dspark_lab.results.record.output import OutputError, check_output, write_text_safely
from dspark_lab.run import worker
from dspark_lab.run.target import TargetError, parse

DEFAULT_OUT = Path("out") / "inspect"
EXIT_OK, EXIT_GUARD, EXIT_BAD_TARGET, EXIT_CANNOT_WRITE = 0, 1, 2, 5
TARGET_HELP = ("package.module:callable or path/to/file.py:callable: a zero-argument step, or a factory "
               "returning one (mark a factory with '()': mod:make_step())")


def add_measure_options(p: argparse.ArgumentParser) -> None:
    """--steps/--trials/--warmup/--time-limit/--allow, shared with `diff`."""
    g = p.add_argument_group("measurement")
    g.add_argument("--steps", type=int_in(1, 100000), default=20, metavar="N", help="steps per trial")
    g.add_argument("--trials", type=int_in(1, 1000), default=5, metavar="N", help="profiler-free trials")
    g.add_argument("--warmup", type=int_in(0, 100000), default=3, metavar="N", help="warm-up steps per trial")
    g.add_argument("--time-limit", type=float_in(0.1, 86400), default=worker.DEFAULT_TIME_LIMIT_S, metavar="S",
                   help="stop the target after S seconds of loading and measuring (exit 2, nothing written)")
    g.add_argument("--allow", action="append", default=[], metavar="'PATTERN: REASON'",
                   help="a by-design sync and why: a function name or a 'path/file.py:LINE' pattern, then "
                        "': ' and the reason, as the no_host_syncs fixture takes (repeatable; a line marked "
                        "'# sync-ok: <reason>' is allowed without it)")


def add_inspect_parser(sub) -> None:
    p = sub.add_parser(
        "inspect", formatter_class=HelpFormatter,
        help="measure your own step: syncs by line, what each costs, step time; a record and an HTML page",
        description="Measure a step of your own with the kit's accounting: host syncs per step by line, "
                    "device-to-host copies, host blocked, the GPU idle each sync caused, and the "
                    "profiler-free step time with its 95% CI. Writes a record (JSON) and a standalone page "
                    "(HTML) that quotes source lines only from files under the target's folder. The target "
                    "runs in a worker process stopped after --time-limit.\n\n" + __doc__.split("\n\n", 1)[1],
    )
    p.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    add_measure_options(p)
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                   help="folder for <name>.json and <name>.html")
    o.add_argument("--name", default=None, metavar="NAME", type=file_stem, help="file name stem (default: the callable and the time)")
    o.add_argument("--guard", action="store_true", help="exit 1 on any host sync that --allow does not name")
    o.add_argument("--strict", action="store_true", help="with --guard: exit 1 without CUDA (nothing could be checked)")
    o.add_argument("--json", action="store_true", help="print the record as JSON instead of the report")
    o.add_argument("--lint", action="store_true", help="also run `dspark-lab lint` over the target's folder and "
                   "show its findings beside the runtime sites: found by static, runtime or both, and why")
    x = p.add_argument_group("before and after a fix")
    x.add_argument("--headroom", action="store_true", help="instead of the record and page: for each read-back "
                   "site, the step timed with that read served from a warm-up value (no sync), paired with the "
                   "real step; the headroom with its 95%% CI beside the charge, and why they differ")
    x.add_argument("--html", action="store_true", help="with --headroom: also write its page (<name>-headroom.html)")
    x.add_argument("--races", action="store_true", help="instead of the record and page: run the step under "
                   "queued GPU work and compare its outputs with a synchronized reference (exit 1 on a race)")
    x.add_argument("--race-steps", type=int_in(2, 100000), default=40, metavar="N", help="steps of each --races run")
    p.set_defaults(func=cmd_inspect)


def err(msg: str) -> None:
    """One line on stderr, as every dspark-lab error (a target's own message escaped: printable.one_line)."""
    print(f"dspark-lab: {one_line(msg)}", file=sys.stderr)


def stem(label: str, name=None) -> str:
    if name:
        return name
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)}-{when}"


def outputs(out_dir: Path, name: str) -> tuple[Path, Path]:
    """The record and page paths, checked before anything is measured (OutputError if refused)."""
    paths = (Path(out_dir) / f"{name}.json", Path(out_dir) / f"{name}.html")
    for p in paths:
        check_output(p)
    return paths


def guard_status(rec: dict, strict: bool) -> tuple[int, str]:
    """The --guard verdict: (exit status, one line)."""
    g = rec["guard"]
    if not g["checked"]:
        return (EXIT_GUARD if strict else EXIT_OK), "guard: " + g.get("note", "nothing was checked")
    if g["violations"]:
        return EXIT_GUARD, f"guard: {len(g['violations'])} host sync line(s) not allowed: " + "; ".join(g["violations"])
    return EXIT_OK, f"guard: no host sync outside the allow-list ({', '.join(g['allow']) or 'empty'})"


def cmd_before_after(args: argparse.Namespace, label: str) -> int:
    """--headroom and/or --races: measured in the worker, printed, the headroom record written."""
    from dspark_lab.measure.races import describe  # torch: only here
    from dspark_lab.results.analyses import headroom

    status = EXIT_OK
    try:
        path = Path(args.out) / f"{stem(label, args.name)}-headroom.json"
        page = path.with_suffix(".html") if args.html else None
        if args.headroom:
            for p in (path, page) if page else (path,):
                check_output(p)  # refused before measuring
        if args.headroom:
            rec = worker.headroom_target(args.target, steps=args.steps, trials=args.trials, warmup=args.warmup,
                                         time_limit_s=args.time_limit)
            write_text_safely(path, json.dumps(rec, indent=1, default=str) + "\n")
            if page:
                from dspark_lab.views import headroom_page
                headroom_page.write(page, rec)
            print(headroom.text(rec) + f"\nrecord: {path}" + (f"\npage: {page}" if page else ""))
        if args.races:
            rep = worker.races_target(args.target, steps=args.race_steps, time_limit_s=args.time_limit)
            print(describe(rep) + ("" if rep.get("fresh_state", True) else
                                   "\n  (a step target: both runs shared its state; give a factory, mod:make_step(), for a fresh one each)"))
            status = EXIT_GUARD if rep["races"] else status
    except TargetError as e:
        err(str(e))
        return EXIT_BAD_TARGET
    except OutputError as e:
        err(str(e))
        return EXIT_CANNOT_WRITE
    return status


def cmd_inspect(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dspark_lab.views import inspect_page  # plotly: only where a page is written

    try:
        label = parse(args.target).label
    except TargetError as e:
        err(str(e))
        return EXIT_BAD_TARGET
    if getattr(args, "html", False) and not getattr(args, "headroom", False):
        err("--html goes with --headroom (without it, inspect always writes its page, <name>.html)")
        return EXIT_BAD_TARGET  # 2: bad arguments, as a bad target
    if getattr(args, "headroom", False) or getattr(args, "races", False):
        return cmd_before_after(args, label)
    try:
        json_path, html_path = outputs(args.out, stem(label, args.name))  # refused before measuring
    except OutputError as e:
        err(str(e))
        return output_status(e)
    try:
        rec = worker.inspect_target(args.target, steps=args.steps, trials=args.trials, warmup=args.warmup,
                                         allow=args.allow, time_limit_s=args.time_limit)
    except TargetError as e:
        err(str(e))
        return EXIT_BAD_TARGET
    beside = lint_beside(rec, parse(args.target).source_root()) if args.lint else []
    try:
        inspect_record.save(rec, json_path)
        inspect_page.write(html_path, rec)
    except OutputError as e:
        err(str(e))
        return output_status(e)
    status, verdict = guard_status(rec, args.strict) if args.guard else (EXIT_OK, "")
    if args.json:
        print(inspect_record.to_json(rec))
    else:
        print(inspect_page.report_text(rec))
        if beside:
            print("\n".join(beside))
        print(f"\nrecord: {json_path}\npage: {html_path}")
    if verdict:
        print(verdict, file=sys.stderr if status or args.json else sys.stdout)  # --json: stdout is the record
    if not args.json:
        print(verdict_line.inspect_line(rec))  # the last line: verdict, why, next step
    return status

