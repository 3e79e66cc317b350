"""`dspark-lab report`: recorded runs loaded (each problem said on stderr) and the standalone HTML
report written, with a summary table on request. Torch-free: it reads what GPUs recorded."""
from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

from dspark_lab.cli.exits import EXIT_CANNOT_WRITE, EXIT_FAILED, EXIT_OK, EXIT_REFUSED
from dspark_lab.cli.summary import summary_table
from dspark_lab.cli.terminal import err as _err, say
from dspark_lab.results.query.runs import Runs
from dspark_lab.results.record import paths, store
from dspark_lab.results.record.output import OutputError, check_output


def output_file(text: str) -> Path:
    """-o FILE: a file's path; one ending in "/" (or naming ".", "..") names a folder: a usage error
    saying so (Path() would drop the slash and write the file under the folder's name)."""
    if text.replace(os.sep, "/").rsplit("/", 1)[-1] in ("", ".", ".."):  # Path("x/.") would be "x"
        folder = text.rstrip("/" + os.sep) or text
        raise argparse.ArgumentTypeError(f"{text[:200]!r} names a folder; give a file name such as "
                                         f"{os.path.join(folder[:200], 'report.html')}")
    return Path(text)


def load_runs(paths):
    """Runs from files/folders; each skipped record or file is said on stderr (file:line)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", store.DataWarning)
        runs = Runs.load(paths)
    for w in caught:
        if not issubclass(w.category, store.DataWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for msg in runs.warnings:
        _err(f"skipped: {msg}")
    return runs


def write_report(runs, out: Path, **options) -> tuple[Path | None, int]:
    """Render the HTML report to `out`: (path, 0), or (None, exit status) with a one-line error."""
    try:
        check_output(out)  # before the work: refuse early
        # Here, not at the top: plotly takes ~3 s to import, which sweep, doctor, ep and --help do not need.
        from dspark_lab.views import report
    except OutputError as e:
        _err(str(e))
        return None, EXIT_REFUSED if e.refused else EXIT_CANNOT_WRITE
    except ImportError as e:
        _err(f"the HTML report needs dspark_lab.views.report, which is not available here ({e})")
        return None, EXIT_FAILED
    try:
        return report.write_html(out, runs, **options), EXIT_OK
    except OutputError as e:
        _err(str(e))
        return None, EXIT_REFUSED if e.refused else EXIT_CANNOT_WRITE


def cmd_report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    inputs = args.paths or [paths.default_data_dir()]
    try:
        runs = load_runs(inputs)
    except FileNotFoundError as e:
        parser.error(f"argument PATH: {e}")
    if runs.rows.empty:
        _err(f"no recorded rows in {', '.join(map(str, inputs))}")
        return EXIT_FAILED
    options = {"cpu_runs": args.cpu_runs}
    filters = {k: getattr(args, k) for k in ("gpu", "driver", "torch", "since", "until", "name")
               if getattr(args, k, None) is not None}
    try:
        if filters:
            options["compare"] = runs.select(**filters)
        if args.compare is not None:
            options["max_compared"] = args.compare
            if args.compare < 1:
                raise ValueError(f"--compare must be a positive integer, got {args.compare}")
    except ValueError as e:
        parser.error(str(e))
    out, status = write_report(runs, args.out, **options)
    if args.summary and out is not None:
        say(summary_table(runs, cpu_runs=args.cpu_runs))
    if out is None:
        return status
    skipped = f"; {len(runs.warnings)} problem(s) skipped, listed above" if runs.warnings else ""
    say(f"report: {out} ({len(runs.headers)} runs, {len(runs.rows)} rows{skipped})")
    return EXIT_OK

