"""`dspark-lab sweep` and `dspark-lab main`'s runs (their options are cli/main.py's and options.py's):
a sweep measured into a run file, resumable, then (main) the report of the recorded runs."""
from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch

from dspark_lab.cli.exits import EXIT_BUSY, EXIT_CANNOT_WRITE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, hold_interrupts
from dspark_lab.cli.needs_cuda import cuda_available, refuse
from dspark_lab.cli.options import DEFAULT_TIME_CAP_S, spec_from_args
from dspark_lab.cli.report_command import load_runs, write_report
from dspark_lab.cli.summary import summary_table
from dspark_lab.cli.terminal import err as _err, one_line, say
from dspark_lab.measure import probe
from dspark_lab.results.record import paths, store
from dspark_lab.run import baseline as run_baseline, point
from dspark_lab.run.sweep import PRESETS, ResumeError, SweepSpec, check_resume, run_sweep
from dspark_lab.run.sweep import run_kind as sweep_kind
from dspark_lab.run.sweep_spec import REFERENCE_TARGET_CI_PCT, REFERENCE_TIME_CAP_S, reference_spec


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


def _close_after_error(writer: store.RunWriter) -> None:
    """Close the run file after an error already said; a failing last fsync adds nothing to it."""
    try:
        writer.close()
    except OSError:
        pass


def _interrupted(path: Path) -> int:
    _err(f"interrupted; every finished point is saved in {path}; resume with: dspark-lab sweep --resume --out {path}")
    return EXIT_INTERRUPTED


def _run(spec: SweepSpec, writer: store.RunWriter, *, progress: bool, retry_failed: bool = False,
         save_traces: bool = False, measure=None) -> int:
    say(one_line(f"run file: {writer.path}"), file=sys.stderr)
    if save_traces:
        try:
            writer.traces_folder()  # before measuring: a file or a link in its place is said now
        except (store.RunPathError, OSError) as e:
            writer.discard_if_empty()
            writer.close()
            _err(f"--save-traces: {e if isinstance(e, store.RunPathError) else f'cannot make a traces folder ({e.strerror or e})'}")
            return EXIT_CANNOT_WRITE
    print(f"sweep: {spec.describe()}", file=sys.stderr)
    try:
        summary = run_sweep(spec, writer, measure=measure, progress=progress,
                            retry_failed=retry_failed, save_traces=save_traces,
                            log=None if progress else (lambda msg: print(msg, file=sys.stderr, flush=True)))
    except KeyboardInterrupt:
        hold_interrupts()
        _close_after_error(writer)
        return _interrupted(writer.path)
    except OSError as e:  # a full disk or file size limit mid-point: the torn block was cut off
        _close_after_error(writer)
        _err(f"cannot write {e.filename or writer.path} ({e.strerror or e}); every finished point is saved; "
             f"free space, then resume with: dspark-lab sweep --resume --out {writer.path}")
        return EXIT_CANNOT_WRITE
    try:
        writer.close()
    except OSError as e:  # its last fsync: what the OS took may never reach the disk
        _err(f"cannot write {writer.path} ({e.strerror or e}): its last fsync failed, so the points measured may "
             f"not all be on disk; free space, then resume with: dspark-lab sweep --resume --out {writer.path}")
        return EXIT_CANNOT_WRITE
    print(one_line(f"done: {summary}; run file {writer.path}"), file=sys.stderr)
    for label, msg in summary.failures:
        say(f"  failed: {label}: {msg.splitlines()[0] if msg else ''}", file=sys.stderr)
    return 1 if summary.failed else 0


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


CPU_SWEEP = "`--device cpu` measures on the CPU instead (slow; a CPU-only run)"


def _needs_cuda(spec: SweepSpec) -> bool:
    """A sweep whose device is not the CPU, asked for where there is no CUDA (auto would fall back
    to the CPU and measure for minutes what no GPU lesson can use)."""
    return spec.base.device != "cpu" and not cuda_available()


def cmd_sweep(args: argparse.Namespace, parser: argparse.ArgumentParser, measure=None) -> int:
    spec, explicit = spec_from_args(args, parser)
    if args.retry_failed and not args.resume:
        parser.error("argument --retry-failed: only with --resume")
    measure, adaptive = adaptive_measure(args, parser, measure)
    if not args.resume and _needs_cuda(spec):  # a resumed run's device is its recorded one: checked below
        return refuse("sweep", CPU_SWEEP)
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
        if _needs_cuda(spec):
            writer.close()
            return refuse("sweep", CPU_SWEEP)
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


def _main_measurements(args, parser, data: Path, measure=None) -> int:
    """The main job's measurements: the preset's sweep, then the headline's reference point measured
    to the headline's own standard (its CI target after MIN_QUIET_ROUNDS quiet rounds), each into a
    run file of its own; the worst exit status of the two."""
    spec = PRESETS[args.preset]
    fp = fingerprint()
    print(f"CUDA device: {fp.get('gpu')} (driver {fp.get('driver')}, torch {fp.get('torch')}); "
          f"running the {args.preset} sweep, then the reference point to a {REFERENCE_TARGET_CI_PCT:g}% CI", file=sys.stderr)
    writer = _create_run(parser, paths.runs_dir(data), fingerprint=fp, sweep=spec.to_dict(), probe=run_probe(),
                         run_kind=sweep_kind(spec), **run_baseline.header_fields(fp))
    if writer is None:
        return EXIT_CANNOT_WRITE
    status = _run(spec, writer, progress=args.progress, measure=measure)
    if status in (EXIT_INTERRUPTED, EXIT_CANNOT_WRITE):
        return status
    ref = reference_spec(spec)
    adaptive = {"target_ci_pct": REFERENCE_TARGET_CI_PCT, "time_cap_s": REFERENCE_TIME_CAP_S}
    writer = _create_run(parser, paths.runs_dir(data), fingerprint=fp, sweep=ref.to_dict(), adaptive=adaptive,
                         run_kind=sweep_kind(ref, adaptive=True), stage="the main job's reference point",
                         **run_baseline.header_fields(fp))
    if writer is None:
        return EXIT_CANNOT_WRITE
    measure = partial(measure or point.measure_point, **adaptive)
    return max(status, _run(ref, writer, progress=args.progress, measure=measure))


def cmd_main(args: argparse.Namespace, parser: argparse.ArgumentParser, measure=None) -> int:
    data = args.data if args.data is not None else paths.default_data_dir()
    status = 0
    if torch.cuda.is_available():
        status = _main_measurements(args, parser, data, measure)
        if status in (EXIT_INTERRUPTED, EXIT_CANNOT_WRITE):
            return status
    else:
        print(f"No CUDA device on this machine (torch {torch.__version__}, CUDA "
              f"{torch.version.cuda or 'none'}): nothing is measured here. Showing the runs recorded on "
              f"GPUs under {data} instead.")
    if not data.exists():
        _err(f"no data dir at {data}: nothing recorded to report")
        return EXIT_FAILED
    runs = load_runs([data])
    if runs.rows.empty:
        _err(f"no recorded runs under {data}")
        return EXIT_FAILED
    cpu_runs = getattr(args, "cpu_runs", False)
    out, out_status = write_report(runs, args.out, cpu_runs=cpu_runs)
    say(summary_table(runs, cpu_runs=cpu_runs))
    if out is None:
        return out_status
    say(f"\nreport: {out} ({len(runs.headers)} runs, {len(runs.rows)} rows)")
    return status

