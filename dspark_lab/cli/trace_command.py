"""`dspark-lab trace FILE [FILE...]`: what each host wait in a trace you already have cost.

Reads Chrome-trace JSON or .json.gz (torch.profiler / Kineto export, one file per rank), streamed,
finds the steps (ProfilerStep#N, a record_function range named by --step, or CUDA graph replays),
and charges every host wait of the steps it can account for with the kit's one rule, as `inspect`
does: the same report, the same record (`dspark-lab diff A.json B.json` compares two), and with
--html the same page. What it cannot attribute is listed with its reason and left out of the
totals. Exit statuses: 0 read and reported; 1 no step of any file could be accounted for (the
reasons are printed, no record written); 2 a file that cannot be read as a trace (one line naming
the file and the problem; the other files are still read); 5 the output cannot be written.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from dspark_lab.cli.exits import EXIT_CANNOT_WRITE, EXIT_FAILED, EXIT_OK, EXIT_USAGE
from dspark_lab.cli.inspect import stem
from dspark_lab.cli.options import HelpFormatter, file_stem
from dspark_lab.cli.terminal import err, say

DEFAULT_OUT = Path("out") / "trace"


def add_trace_parser(sub) -> None:
    p = sub.add_parser(
        "trace", formatter_class=HelpFormatter,
        help="read a trace you already have (torch.profiler/Kineto JSON or .json.gz): what each host wait cost",
        description=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="a Chrome-trace .json or .json.gz, one per rank")
    p.add_argument("--step", default=None, metavar="NAME",
                   help="the record_function range that marks a step (NAME or NAME#N); default: the kit's own "
                        "step ranges, else ProfilerStep#N, else CUDA graph replays")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR", help="folder for <name>.json (and .html)")
    o.add_argument("--name", default=None, metavar="NAME", type=file_stem,
                   help="file name stem (one FILE only; default: the file's name and the time)")
    o.add_argument("--html", action="store_true", help="also write the page (<name>.html)")
    o.add_argument("--json", action="store_true", help="print each record as JSON instead of the report")
    p.set_defaults(func=cmd_trace)


def _one(path: Path, args) -> int:
    from dspark_lab.measure import foreign_read, foreign_record
    from dspark_lab.results.record import inspect_record
    from dspark_lab.results.record.output import OutputError, check_output

    try:
        found, rec = foreign_record.record(foreign_read.read(path), args.step)
    except foreign_read.TraceFileError as e:
        err(str(e))
        return EXIT_USAGE
    name = stem(foreign_record._label(str(path)), args.name)
    json_path, html_path = Path(args.out) / f"{name}.json", Path(args.out) / f"{name}.html"
    if rec is None:
        from dspark_lab.views import trace_page

        say(trace_page.report_text(found, None))
        return EXIT_FAILED
    try:
        for p in (json_path, html_path) if args.html else (json_path,):
            check_output(p)
        inspect_record.save(rec, json_path)
        if args.html:
            from dspark_lab.views import trace_page

            trace_page.write(html_path, found, rec)
    except OutputError as e:
        err(str(e))
        return EXIT_CANNOT_WRITE
    _show(found, rec, args, json_path, html_path)
    return EXIT_OK


def _show(found: dict, rec: dict, args, json_path: Path, html_path: Path) -> None:
    from dspark_lab.results.record import inspect_record

    if args.json:
        print(inspect_record.to_json(rec))
        return
    from dspark_lab.views import trace_page

    say(trace_page.report_text(found, rec))
    say(f"\nrecord: {json_path}" + (f"\npage: {html_path}" if args.html else ""))


def cmd_trace(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.name and len(args.files) > 1:
        parser.error("--name names one file's outputs: give one FILE, or leave --name out")
    statuses = []
    for i, path in enumerate(args.files):
        if i and not args.json:
            say("")
        statuses.append(_one(path, args))
    bad = [s for s in statuses if s not in (EXIT_OK, EXIT_FAILED)]
    if bad:
        return max(bad)
    return EXIT_OK if EXIT_OK in statuses else EXIT_FAILED
