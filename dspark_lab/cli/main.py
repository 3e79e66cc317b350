"""Command line: `dspark-lab sweep | report | doctor | main | ep | inspect | diff` (see `dspark-lab COMMAND --help`):
the parser, the sweep, report and main commands, and the exit statuses."""
from __future__ import annotations

import argparse
import signal
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Sequence

import torch

from dspark_lab.cli.doctor import add_doctor_parser
from dspark_lab.cli.diff import add_diff_parser
from dspark_lab.cli.ep import add_ep_parser
# The exit statuses, also importable from here (tests and scripts name them as main.EXIT_*).
from dspark_lab.cli.exits import (EXIT_BUSY, EXIT_CANNOT_WRITE, EXIT_CODES_HELP, EXIT_FAILED, EXIT_INTERRUPTED,  # noqa: F401
                                  EXIT_OK, EXIT_REFUSED, EXIT_USAGE)
from dspark_lab.cli.terminal import err as _err, say
from dspark_lab.cli.inspect import add_inspect_parser
from dspark_lab.cli.options import OPTION_OF, SPEC_KEYWORDS, HelpFormatter, add_sweep_config_options, float_in
from dspark_lab.cli.summary import summary_table
from dspark_lab.measure import probe
from dspark_lab.results.record import paths
from dspark_lab.results.record import store
from dspark_lab.results.record.output import OutputError, check_output
from dspark_lab.results.query.runs import Runs
from dspark_lab.run import baseline as run_baseline, point
from dspark_lab.run.sweep import PRESETS, ResumeError, SweepSpec, SweepSpecError, check_resume, run_sweep
from dspark_lab.run.sweep import run_kind as sweep_kind

DEFAULT_REPORT = Path("out") / "report.html"
# Per point with --target-ci alone: 24 default points x 8 s of trials stays within a few minutes.
DEFAULT_TIME_CAP_S = 8.0

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
    _add_main_parser(sub)
    add_ep_parser(sub)
    add_inspect_parser(sub)
    add_diff_parser(sub)
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
    p.add_argument("-o", "--out", type=Path, default=DEFAULT_REPORT, metavar="FILE", help="HTML file to write")
    p.add_argument("--summary", action="store_true", help="also print a text summary table of the runs")
    # Which runs the figures compare (every run is listed in the report's tables); as Runs.select.
    g = p.add_argument_group("runs compared in the figures (default: the latest run of each machine, then the newest)")
    g.add_argument("--gpu", metavar="TEXT", help="GPU name contains TEXT (case-insensitive), e.g. H200")
    g.add_argument("--driver", metavar="VERSION", help="driver version or its prefix, e.g. 580")
    g.add_argument("--torch", metavar="VERSION", help="torch version or its prefix, e.g. 2.11")
    g.add_argument("--since", metavar="DATE", help="recorded on or after DATE (2026-11-30, or 2026-11)")
    g.add_argument("--until", metavar="DATE", help="recorded on or before DATE (that day included)")
    g.add_argument("--name", metavar="TEXT", help="run label, recorded name or file name contains TEXT")
    g.add_argument("--compare", type=int, default=None, metavar="N",
                   help="draw at most N runs side by side (default 4)")
    p.set_defaults(func=cmd_report)


def _add_main_parser(sub) -> None:
    p = sub.add_parser(
        "main", formatter_class=HelpFormatter,
        help="without JupyterLab: sweep on CUDA (else show the recorded runs), then report (the main job, `bash lab.sh`, opens the notebooks)",
        description="On a CUDA machine: record the fingerprint and probe, run the sweep (--preset) into "
                    "data/runs/, then build the report from every recorded run. Without CUDA: say so, build "
                    "the report from the runs recorded in the data dir and print the headline (with the rule "
                    "that chose it) and a summary table of them.\n\n" + EXIT_CODES_HELP,
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="default", help="sweep to run on CUDA")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="data dir holding runs/ (default: data/ of the repo, or $DSPARK_DATA)")
    p.add_argument("-o", "--out", type=Path, default=DEFAULT_REPORT, metavar="FILE", help="HTML report to write")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    p.set_defaults(func=cmd_main)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def fingerprint() -> dict:
    """This machine's fingerprint (a seam: tests that run the sweep in a subprocess replace it)."""
    return probe.fingerprint()


def run_probe() -> dict:
    """The pageable-copy probe for a run header; a probe that fails is recorded as such."""
    try:
        return probe.run_probe()
    except Exception as e:  # noqa: BLE001 - the sweep does not depend on it
        return {"available": False, "reason": f"probe failed: {type(e).__name__}: {e}",
                "pageable_nonblocking_blocks": None}


def spec_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[SweepSpec, bool]:
    """The sweep asked for on the command line, and whether any grid/config option was given."""
    spec = PRESETS[args.preset or "default"]
    changes = {kw: getattr(args, dest) for dest, kw in SPEC_KEYWORDS.items() if getattr(args, dest) is not None}
    try:
        spec = spec.with_(**changes)
    except SweepSpecError as e:
        parser.error(f"argument {OPTION_OF.get(e.field, e.field)}: {e}")
    return spec, bool(changes) or args.preset is not None


def _hold_interrupts() -> None:
    """After the first Ctrl-C: a second one while shutting down must not turn exit 130 into a
    traceback or a death by SIGINT (issue 22)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to hold
        pass


def _interrupted(path: Path) -> int:
    _err(f"interrupted; every finished point is saved in {path}; resume with: dspark-lab sweep --resume --out {path}")
    return EXIT_INTERRUPTED


def _run(spec: SweepSpec, writer: store.RunWriter, *, progress: bool, retry_failed: bool = False,
         save_traces: bool = False, measure=None) -> int:
    say(f"run file: {writer.path}", file=sys.stderr)
    print(f"sweep: {spec.describe()}", file=sys.stderr)
    try:
        summary = run_sweep(spec, writer, measure=measure, progress=progress,
                            retry_failed=retry_failed, save_traces=save_traces,
                            log=None if progress else (lambda msg: print(msg, file=sys.stderr, flush=True)))
    except KeyboardInterrupt:
        _hold_interrupts()
        writer.close()
        return _interrupted(writer.path)
    except OSError as e:  # a full disk or file size limit mid-point: the torn block was cut off
        writer.close()
        _err(f"cannot write {writer.path} ({e.strerror or e}); every finished point is saved; "
             f"free space, then resume with: dspark-lab sweep --resume --out {writer.path}")
        return EXIT_CANNOT_WRITE
    writer.close()
    print(f"done: {summary}; run file {writer.path}", file=sys.stderr)
    for label, msg in summary.failures:
        say(f"  failed: {label}: {msg.splitlines()[0] if msg else ''}", file=sys.stderr)
    return 1 if summary.failed else 0


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------
def adaptive_measure(args: argparse.Namespace, parser: argparse.ArgumentParser, measure=None):
    """`measure` (default run.point.measure_point) with --target-ci / --time-cap bound, and the header
    record of them; (measure, {}) when not adaptive."""
    target, cap = getattr(args, "target_ci", None), getattr(args, "time_cap", None)
    if target is None:
        if cap is not None:
            parser.error("argument --time-cap: only with --target-ci")
        return measure, {}
    measure = measure or point.measure_point  # looked up now: tests stand a fake in for it
    cap = DEFAULT_TIME_CAP_S if cap is None else cap
    return partial(measure, target_ci_pct=target, time_cap_s=cap), {"adaptive": {"target_ci_pct": target, "time_cap_s": cap}}


def cmd_sweep(args: argparse.Namespace, parser: argparse.ArgumentParser, measure=None) -> int:
    spec, explicit = spec_from_args(args, parser)
    if args.retry_failed and not args.resume:
        parser.error("argument --retry-failed: only with --resume")
    measure, adaptive = adaptive_measure(args, parser, measure)
    fp = fingerprint()
    if args.resume:
        out = args.out if args.out is not None else paths.runs_dir()
        try:
            path = store.last_modified_run(out) if out.is_dir() else out
            writer = store.RunWriter.open(path)
        except store.RunFileBusy as e:
            _err(f"cannot resume: {e}")
            return EXIT_BUSY
        except ValueError as e:  # not a run file, or one of another schema (the message names it)
            _err(f"cannot resume: {e}")
            return EXIT_USAGE
        except OSError as e:  # missing, a FIFO, a name too long
            _err(f"cannot resume: {out}: {e.strerror or e}")
            return EXIT_USAGE
        try:
            recorded = SweepSpec.from_dict(writer.sweep)
            if not explicit:
                spec = recorded
            check_resume(writer, spec, fp)
        except ResumeError as e:
            writer.close()
            _err(f"cannot resume: {e}")
            return EXIT_USAGE
        except ValueError as e:  # its recorded sweep of the wrong shape (a tampered header)
            writer.close()
            _err(f"cannot resume: {writer.path}: {e}")
            return EXIT_USAGE
        return _run(spec, writer, progress=args.progress, retry_failed=args.retry_failed,
                    save_traces=args.save_traces, measure=measure)
    extra = {"probe": run_probe()} if args.probe else {}
    extra.update(adaptive)
    extra.update(run_baseline.header_fields(fp))  # what this run is judged against when loaded alone
    if args.name:
        extra["name"] = args.name
    writer = _create_run(parser, args.out, fingerprint=fp, sweep=spec.to_dict(),
                         run_kind=sweep_kind(spec, adaptive=bool(adaptive)), **extra)
    if writer is None:
        return EXIT_CANNOT_WRITE
    return _run(spec, writer, progress=args.progress, save_traces=args.save_traces, measure=measure)


def _create_run(parser, out, **header):
    """A new run file at --out; a usage error (exit 2) when something is in the way, None (said on
    stderr, exit 5) when the OS cannot create it."""
    try:
        return store.RunWriter.create(out, **header)
    except store.RunPathError as e:
        parser.error(f"argument --out: {e}")
    except OSError as e:
        _err(f"argument --out: cannot create a run file at {out} ({e.strerror or e})")
        return None


def _load(paths):
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
        runs = _load(inputs)
    except FileNotFoundError as e:
        parser.error(f"argument PATH: {e}")
    if runs.rows.empty:
        _err(f"no recorded rows in {', '.join(map(str, inputs))}")
        return EXIT_FAILED
    options = {}
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
        say(summary_table(runs))
    if out is None:
        return status
    skipped = f"; {len(runs.warnings)} problem(s) skipped, listed above" if runs.warnings else ""
    say(f"report: {out} ({len(runs.headers)} runs, {len(runs.rows)} rows{skipped})")
    return EXIT_OK


def cmd_main(args: argparse.Namespace, parser: argparse.ArgumentParser, measure=None) -> int:
    data = args.data if args.data is not None else paths.default_data_dir()
    status = 0
    if torch.cuda.is_available():
        spec = PRESETS[args.preset]
        fp = fingerprint()
        print(f"CUDA device: {fp.get('gpu')} (driver {fp.get('driver')}, torch {fp.get('torch')}); "
              f"running the {args.preset} sweep", file=sys.stderr)
        writer = _create_run(parser, paths.runs_dir(data), fingerprint=fp, sweep=spec.to_dict(), probe=run_probe(),
                             run_kind=sweep_kind(spec), **run_baseline.header_fields(fp))
        if writer is None:
            return EXIT_CANNOT_WRITE
        status = _run(spec, writer, progress=args.progress, measure=measure)
        if status == EXIT_INTERRUPTED:
            return status
    else:
        print(f"No CUDA device on this machine (torch {torch.__version__}, CUDA "
              f"{torch.version.cuda or 'none'}): nothing is measured here. Showing the runs recorded on "
              f"GPUs under {data} instead.")
    if not data.exists():
        _err(f"no data dir at {data}: nothing recorded to report")
        return EXIT_FAILED
    runs = _load([data])
    if runs.rows.empty:
        _err(f"no recorded runs under {data}")
        return EXIT_FAILED
    out, out_status = write_report(runs, args.out)
    say(summary_table(runs))
    if out is None:
        return out_status
    say(f"\nreport: {out} ({len(runs.headers)} runs, {len(runs.rows)} rows)")
    return status


# ---------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # The subcommand's own parser, so that its errors print its usage.
    sub = next(a for a in parser._subparsers._group_actions if isinstance(a, argparse._SubParsersAction))
    subparser = sub.choices[args.command]
    try:
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
    except KeyboardInterrupt:
        _hold_interrupts()
        _err("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
