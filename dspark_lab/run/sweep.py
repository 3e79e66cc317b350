"""A sweep: a grid over EP size x batch size x gamma x strategy around one base LabConfig.

Each grid point (ep, batch, gamma) is measured by ONE `measure_point` call with all the sweep's
strategies, so their trials are interleaved (A B C A B C ...) and host noise does not pass for a
difference between strategies. Points go to a RunWriter as they finish; a point already complete
in the file is skipped (resume); a point that raises is recorded as failed and the sweep goes on;
Ctrl-C stops the sweep with every finished point on disk.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from dspark_lab.printable import one_line
from dspark_lab.results.record import schema
from dspark_lab.results.record import rows as rowbuild
from dspark_lab.results.record.row_record import RowRecord
from dspark_lab.config import LabConfig
from dspark_lab.results.record.store import machine_differences
from dspark_lab.run import baseline, point

# The spec lives torch-free in run/sweep_spec.py; its names are imported here too, as they were
# always imported from here (the notebooks, the studies and users name them as run.sweep.*).
from dspark_lab.run.sweep_spec import (DEFAULT_SWEEP, GRID_FIELDS, PRESET_KINDS, PRESETS, QUICK_SWEEP,  # noqa: F401
                                       ResumeError, SweepSpec, SweepSpecError, run_kind)


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------
@dataclass
class SweepSummary:
    total: int = 0  # points in the grid
    skipped: int = 0  # already complete in the file (resume)
    measured: int = 0  # measured now, ok
    failed: int = 0  # measured now, recorded as failed
    failures: list[tuple[str, str]] = field(default_factory=list)  # (point label, error)

    def note_failure(self, label: str, error: Exception) -> str:
        """Count a point recorded as failed; the line that says so."""
        msg = f"{type(error).__name__}: {error}"
        self.failed += 1
        self.failures.append((label, msg))
        return f"point {label} failed and was recorded as failed: {msg.splitlines()[0] if msg else ''}"

    def __str__(self) -> str:
        return f"{self.measured} measured, {self.failed} failed, {self.skipped} already recorded, of {self.total} points"


def progress_label(cfg: LabConfig) -> str:
    """The point as the progress bar and the failure lines name it ("ep=1 bs=8 gamma=4")."""
    return f"ep={cfg.ep_size} bs={cfg.batch_size} gamma={cfg.gamma}"


def check_resume(writer, spec: SweepSpec, fingerprint: dict | None) -> None:
    """Refuse to resume a run on another machine or with another sweep (it would mix them)."""
    if fingerprint is not None:
        diff = machine_differences(writer.fingerprint, fingerprint)
        if diff:
            was = ", ".join(f"{k}={writer.fingerprint.get(k)}" for k in diff)
            now = ", ".join(f"{k}={fingerprint.get(k)}" for k in diff)
            raise ResumeError(f"{writer.path} was recorded on {was}; this machine has {now}. "
                              "Resuming would mix machines in one run: start a new run instead")
    recorded = writer.sweep
    if recorded:
        try:
            same = SweepSpec.from_dict(recorded) == spec
            desc = SweepSpec.from_dict(recorded).describe()
        except ValueError as e:
            raise ResumeError(f"{writer.path}: its recorded sweep cannot be read by this version ({e})") from None
        if not same:
            raise ResumeError(f"{writer.path} records another sweep ({desc}); asked for: {spec.describe()}. "
                              "Resume without grid options, or start a new run")


def run_sweep(
    spec: SweepSpec,
    writer,
    measure: Callable | None = None,
    progress: bool = True,
    *,
    retry_failed: bool = False,
    save_traces: bool = False,
    point_id: Callable[[LabConfig], str] | None = None,
    failed_rows: Callable | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepSummary:
    """Measure every point of `spec` not yet complete in `writer`'s file.

    measure(cfg, strategies, on_progress=...) -> PointResult (.rows, .timelines, .traces);
    default run.point.measure_point. A point that raises an Exception (a torch OOM included) is
    written as failed rows and the sweep goes on; KeyboardInterrupt propagates after the bar is
    closed, every finished point being already on disk (each is fsynced as it is written).
    """
    measure = measure or point.measure_point
    failed_rows = failed_rows or point.failed_rows
    tqdm = _progress_class()
    say = _say(log, tqdm if progress else None)
    summary = SweepSummary(total=len(spec))
    todo = _pending(spec, writer, point_id or point.point_id, retry_failed)
    summary.skipped = summary.total - len(todo)
    if summary.skipped:
        say(f"resume: {summary.skipped} of {summary.total} points already recorded in {writer.path}")
    strategies = list(spec.strategies)
    bar = _open_bar(tqdm, len(todo), progress)
    try:
        for i, (cfg, pid) in enumerate(todo):
            label = progress_label(cfg)
            bar.set_postfix_str(label)
            try:
                result = measure(cfg, strategies, on_progress=_on_progress(bar, i, label))
                rows = point_records(result.rows, pid)
                timelines = list(getattr(result, "timelines", None) or [])
            except Exception as e:  # noqa: BLE001 - a failed point (or rows not of it) is recorded, the sweep goes on
                _free_cuda_memory()
                writer.write_point(pid, _failed_point_rows(cfg, pid, strategies, e, failed_rows), [], status="failed")
                say(summary.note_failure(label, e))
            else:
                _write_point(writer, pid, rows, timelines, getattr(result, "traces", None) if save_traces else None)
                summary.measured += 1
            bar.update(max(i + 1 - bar.n, 0.0))
    finally:
        bar.close()
    return summary


def _say(log: Callable[[str], None] | None, tqdm) -> Callable[[str], None]:
    """The sweep's message lines: to `log` where given, else above the bar (none without progress)."""
    def say(msg: str) -> None:
        msg = one_line(msg)  # it names the run file: a newline or an escape in its name is shown, not obeyed
        if log is not None:
            log(msg)
        elif tqdm is not None:
            tqdm.write(msg, file=sys.stderr)

    return say


def _write_point(writer, pid: str, rows: list[RowRecord], timelines: list, traces: dict | None) -> None:
    """A measured point on disk: its rows and timelines, its traces where asked for."""
    writer.write_point(pid, rows, timelines, status="ok")
    baseline.keep(writer.fingerprint, [r.file_row() for r in rows])  # the machine's quietest host work here, for lone runs
    if traces:
        writer.write_traces(pid, traces)


def _progress_class():
    try:
        from tqdm.auto import tqdm  # optional: a bare GPU box has plain lines instead of a bar
    except ImportError:
        return _PlainProgress
    return tqdm


def _open_bar(tqdm, total: int, progress: bool):
    """The sweep's bar, in points (fractions while a point runs); a log gets a line each 15 s."""
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    return tqdm(total=total, unit="point", disable=not progress, dynamic_ncols=True, desc="sweep",
                file=sys.stderr, mininterval=0.5 if tty else 15.0,
                bar_format="{l_bar}{bar}| {n:.1f}/{total:.0f} points [{elapsed}<{remaining}]{postfix}")


def _pending(spec: SweepSpec, writer, point_id: Callable[[LabConfig], str], retry_failed: bool) -> list:
    """(config, point id) of each point not yet complete in the file (resume), in grid order."""
    todo = [(cfg, point_id(cfg)) for cfg in spec.points()]
    return [(cfg, pid) for cfg, pid in todo if not writer.is_complete(pid, retry_failed=retry_failed)]


def _on_progress(bar, done: int, label: str) -> Callable[[str, float], None]:
    """measure's progress callback for the point after `done` finished ones: the bar moves within it."""
    def on_progress(message: str, fraction: float) -> None:
        f = min(max(float(fraction), 0.0), 1.0)
        bar.set_postfix_str(f"{label} {message}", refresh=False)
        bar.update(max(done + f - bar.n, 0.0))  # throttled by mininterval

    return on_progress


def point_records(rows, pid: str) -> list[RowRecord]:
    """The measured rows as the point's records (RowRecord: each checked, none changed); a
    ValueError naming the field when a row is not valid or measured another point than `pid`."""
    records = [RowRecord.of(r) for r in rows]
    other = sorted({r.point_id for r in records} - {pid})
    if other:
        raise ValueError(f"point_id of the measured rows must be the point's {pid!r}; got {', '.join(map(repr, other))}")
    return records


def _failed_point_rows(cfg: LabConfig, pid: str, strategies: list, error: Exception, failed_rows) -> list[RowRecord]:
    """The records of a failed point: the runner's helper's rows where they are failed rows of
    `pid`, else (it failed too, or gave other rows) the same builder on the config as given."""
    try:
        rows = [RowRecord.of(r) for r in failed_rows(cfg, strategies, error)] if failed_rows else None
    except Exception:  # noqa: BLE001
        rows = None
    if not rows or any(r.point_id != pid or r.status != "failed" for r in rows):
        config = {k: v for k, v in cfg.to_dict().items() if k in schema.CONFIG_COLUMNS}
        rows = [RowRecord.of(r) for r in rowbuild.failed_rows({**config, "point_id": pid}, strategies, error)]
    return rows


class _PlainProgress:
    """What run_sweep uses of tqdm, as one line per finished point (when tqdm is not installed)."""

    def __init__(self, total: int, disable: bool = False, **_: Any):
        self.total, self.n, self.disable, self.postfix = total, 0.0, disable, ""

    @staticmethod
    def write(msg: str, file=None) -> None:
        print(msg, file=file or sys.stderr, flush=True)

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        self.postfix = s

    def update(self, n: float = 1) -> None:
        before, self.n = self.n, self.n + n
        if not self.disable and int(self.n) > int(before):
            self.write(f"sweep: {int(self.n)}/{self.total} points done ({self.postfix})")

    def close(self) -> None:
        pass


def _free_cuda_memory() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
