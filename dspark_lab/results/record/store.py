"""Recorded runs on disk: append-only JSON-lines files under data/runs/, one file per run.

A run file holds, one JSON object a line:

    {"kind": "header", "schema_version", "run_id", "created_at", "fingerprint": {...}, "sweep": {...},
     "run_kind" (what the run is: results/record/header.py), "name" (optional: the run's label)}
    {"kind": "row", "attempt", <schema.ROW_COLUMNS>}                 one per strategy x trial
    {"kind": "timeline", "attempt", "point_id", "strategy", "segments": [...]}
    {"kind": "point", "attempt", "point_id", "status", "n_rows", "n_timelines", "recorded_at"}

A point's records are written together, ending with its `point` record (the commit), in one write
followed by flush + fsync, so a crash, Ctrl-C or kill leaves every finished point readable and at
worst a partial last line (a write that fails mid-point, e.g. a full disk, is cut back off).
Resuming appends; nothing is ever rewritten. One process writes a file at a time: RunWriter holds
an advisory lock (flock) until it is closed, and a second writer gets RunFileBusy. When a point
was measured more than once in one file (an interrupted write, or a failed point retried), loading
keeps only its last committed attempt, so no row is doubled; rows with no commit are not loaded.
Rows are written as results/record/row_record.RowRecord, checked when each is made (rows are built
by results/record/rows.py); reading and validation live in results/record/records.py and
results/loading/load.py (stdlib only here: recording needs no pandas).
"""
from __future__ import annotations

import fcntl
import gzip
import json
import math
import os
import secrets
import signal
import threading
from contextlib import contextmanager
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from dspark_lab.results.record import schema
from dspark_lab.results.record.header import RunHeader
from dspark_lab.results.record.row_record import RowRecord
from dspark_lab.results.record.rows import STATUSES
from dspark_lab.results.record.paths import file_name_part, resolved_parent, runs_dir
from dspark_lab.results.record import records
# DataWarning: what reading a damaged run file warns with (tests and the CLI catch it from here).
from dspark_lab.results.record.records import RUN_SUFFIX, DataWarning, SchemaVersionError



class RunFileBusy(RuntimeError):
    """Another process holds the run file's writer lock (one writer per run file)."""


class RunPathError(FileExistsError):
    """--out names no place a new run file may be created: something is in the way (the file, a
    device, FIFO or link of that name, or a file where a folder must be); the message names the
    path and what is there. Other OS failures creating it stay plain OSError."""


def new_run_path(out: str | os.PathLike | None, run_id: str) -> Path:
    """Where a new run file goes: `out` itself when it is a *.jsonl path (it must not exist, in any
    form: a device, a FIFO or a link there is never written through), else <out>/<run_id>.jsonl
    (out a folder, made if missing). RunPathError says why not, ValueError when `run_id` is not one
    file name (paths.file_name_part); nothing is created here."""
    file_name_part(run_id, "run_id")
    out = resolved_parent(out if out is not None else runs_dir())  # where it lands: no folder made through ".."
    if os.path.lexists(out) and not out.is_dir():
        if out.suffix != RUN_SUFFIX:
            raise RunPathError(f"{out} exists and is not a folder; give a folder or a new *{RUN_SUFFIX} path")
        if out.is_file() and not out.is_symlink():
            raise RunPathError(f"{out} exists; resume it (--resume) or choose another --out")
        raise RunPathError(f"{out} exists and is not a regular file (a device, FIFO, socket or link); "
                           f"choose another --out")
    path = out if out.suffix == RUN_SUFFIX and not out.is_dir() else out / f"{run_id}{RUN_SUFFIX}"
    if os.path.lexists(path):
        raise RunPathError(f"{path} exists; resume it (--resume) or choose another --out")
    for p in path.parents:
        if os.path.lexists(p):
            if not p.is_dir():
                raise RunPathError(f"{path}: {p} is a file, not a folder")
            break
    return path


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _json_default(obj: Any) -> Any:
    # numpy scalars / arrays, tensors and paths without importing numpy or torch here.
    if hasattr(obj, "item") and getattr(obj, "ndim", 0) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _dumps(record: dict) -> str:
    return json.dumps(record, default=_json_default, separators=(",", ":"))


def _read_checked(path: Path) -> records.FileRecords:
    """A run file's records for resuming or its header; SchemaVersionError / ValueError if unusable."""
    recs = records.read_file(path)
    if recs.header_line is None and recs.unreadable is not None:  # not read at all (a FIFO, a device, too large)
        raise ValueError(f"{path}: {recs.unreadable}")
    if recs.header_line is not None and recs.header is None:
        # read_file skipped the file: say why, as an error (resume must not append to it).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            raw = records.read_file(path, records.ProblemLog(emit=False))
        if raw.unreadable and "schema_version" in raw.unreadable:
            raise SchemaVersionError(f"{path}: {raw.unreadable}")
        raise ValueError(f"{path}: {raw.unreadable or 'unreadable header'}")
    return recs


def read_header(path: str | os.PathLike) -> dict:
    """The header of one run file (SchemaVersionError on an unknown version)."""
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        recs = _read_checked(path)
    if recs.header is None:
        raise ValueError(f"{path}: no readable header record; not a dspark-lab run file")
    return recs.header


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------
def timeline_problem(t: Any, point_id: str) -> str | None:
    """Why `t` is not a whole timeline record of the point `point_id`, or None: kind "timeline", the
    point's point_id, a strategy and a segments list, each given where it was built."""
    if not isinstance(t, dict):
        return f"a timeline must be a dict (a timeline record); got {type(t).__name__}"
    if t.get("kind") != "timeline":
        return f"kind of a timeline must be 'timeline'; got {t.get('kind')!r:.60}"
    if t.get("point_id") != point_id:
        return f"point_id of a timeline must be the point's {point_id!r}; got {t.get('point_id')!r:.60}"
    if not isinstance(t.get("strategy"), str) or not t["strategy"]:
        return f"strategy of a timeline must be a non-empty string; got {t.get('strategy')!r:.60}"
    if not isinstance(t.get("segments"), list):
        return ("segments of a timeline must be a list of [lane, part, start_ms, end_ms, label]; "
                f"got {type(t.get('segments')).__name__}")
    return None


class RunWriter:
    """Appends points to one run file. `RunWriter.create(...)` starts a run; `RunWriter.open(path)`
    reopens one to resume it. Use as a context manager or call close()."""

    def __init__(self, path: Path, header: dict, points: dict[str, str] | None = None):
        self.path = Path(path)
        self.header = header
        # point_id -> status of its last committed attempt ("ok" | "failed")
        self.points: dict[str, str] = dict(points or {})
        self._f = open(self.path, "a+b", buffering=0)  # readable too: _append reads the last byte
        self._lock()

    def _lock(self) -> None:
        """One writer per run file: an advisory lock (flock) held until close(); released by the
        OS if the process dies, so a crashed sweep never leaves the file locked."""
        try:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._f.close()
            raise RunFileBusy(f"{self.path} is being written by another dspark-lab process (its lock is held); "
                              "wait for it to finish or stop it, then resume") from None

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        out: str | os.PathLike | None = None,
        *,
        fingerprint: dict,
        sweep: dict,
        run_kind: str | None = None,
        run_id: str | None = None,
        **extra: Any,
    ) -> "RunWriter":
        """Start a new run file. `out` is a file path (must not exist) or a folder (default:
        data/runs/), where the file is named <run_id>.jsonl (see new_run_path: RunPathError when
        there is no such place; OSError when the OS refuses). `run_kind` (required: a key of
        results.facts.run_kinds) says what the run is; a ValueError naming it and the allowed kinds
        before anything is created otherwise. `extra` goes into the header."""
        run_id = run_id or new_run_id()
        file_name_part(run_id, "run_id")  # it names the file: never a path out of `out`
        header = RunHeader(run_kind, run_id, _now(), fingerprint, sweep, extra).record()
        path = new_run_path(out, run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Exclusive create: two writers never share a file.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, (_dumps(header) + "\n").encode())
            os.fsync(fd)
        except OSError:  # a full disk: no run file with half a header (or none) is left behind
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        _fsync_dir(path.parent)
        return cls(path, header)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "RunWriter":
        """Reopen a run file to append to it (resume). A partial last line is left in place and
        closed with a newline so that new records start on a line of their own."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no run file at {path}")
        probe = open(path, "a+b", buffering=0)  # take the lock before reading what the file holds
        try:
            fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            probe.close()
            raise RunFileBusy(f"{path} is being written by another dspark-lab process (its lock is held); "
                              "wait for it to finish or stop it, then resume") from None
        try:
            recs = _read_checked(path)
            if recs.header is None:
                raise ValueError(f"{path}: no readable header record; cannot resume it")
        except BaseException:
            probe.close()
            raise
        points = {p["point_id"]: p.get("status", "ok") for p in recs.points}
        writer = cls.__new__(cls)
        writer.path, writer.header, writer.points, writer._f = path, recs.header, points, probe
        if not recs.ends_with_newline:
            writer._append(b"\n")
        return writer

    # -- state -------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.header["run_id"]

    @property
    def fingerprint(self) -> dict:
        return self.header.get("fingerprint", {})

    @property
    def sweep(self) -> dict:
        return self.header.get("sweep", {})

    def is_complete(self, point_id: str, *, retry_failed: bool = False) -> bool:
        status = self.points.get(point_id)
        return status == "ok" or (status is not None and not retry_failed)

    # -- writing -----------------------------------------------------------------------------
    def write_point(
        self,
        point_id: str,
        rows: Sequence[RowRecord | dict],
        timelines: Sequence[dict] = (),
        *,
        status: str | None = None,
    ) -> None:
        """Append one point's rows and timelines and its commit record, then fsync. Each row is a
        RowRecord (a dict is made one by RowRecord.of, which checks it) and each timeline a whole
        timeline record (timeline_problem); both are written as they are, nothing filled in:
        ValueError, naming the field, for a row or timeline that is not valid or not of `point_id`,
        before anything is written. `status` (default: ok when every row is) is the commit's."""
        records = [r if isinstance(r, RowRecord) else RowRecord.of(r) for r in rows]
        for r in records:
            if r.point_id != point_id:
                raise ValueError(f"point_id of a row must be the point's {point_id!r}; got {r.point_id!r}")
        if status is None:
            status = "ok" if records and all(r.status == "ok" for r in records) else "failed"
        elif status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}; got {status!r:.60}")
        attempt = secrets.token_hex(4)
        lines = [_dumps(_finite({"kind": "row", "attempt": attempt, **r.file_row()})) for r in records]
        for t in timelines:
            problem = timeline_problem(t, point_id)
            if problem:
                raise ValueError(problem)
            own = {k: v for k, v in t.items() if k not in ("kind", "attempt", "point_id")}
            lines.append(_dumps(_finite({"kind": "timeline", "attempt": attempt, "point_id": point_id, **own})))
        lines.append(_dumps({
            "kind": "point", "attempt": attempt, "point_id": point_id, "status": status,
            "n_rows": len(records), "n_timelines": len(timelines), "recorded_at": _now(),
        }))
        self._append(("\n".join(lines) + "\n").encode())
        self.points[point_id] = status

    def write_traces(self, point_id: str, traces: dict[str, dict]) -> list[Path]:
        """Save chrome traces beside the run file (<run>.traces/<point>-<strategy>.json.gz, which
        chrome://tracing and Perfetto open); they are large, so they are kept out of the run file."""
        folder = self.traces_folder()
        written = []
        for strategy, trace in traces.items():
            p = folder / f"{file_name_part(f'{point_id}-{strategy}', 'trace name')}.json.gz"
            # O_NOFOLLOW: a link planted in the folder is never written through.
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                with os.fdopen(fd, "wb") as raw, gzip.open(raw, "wt", encoding="utf-8") as f:
                    json.dump(trace, f, default=_json_default)
            except OSError:  # a full disk: no half trace is left to be opened as a whole one
                p.unlink(missing_ok=True)
                raise
            written.append(p)
        return written

    def traces_folder(self) -> Path:
        """<run>.traces, made if missing; RunPathError when something else stands there (a file, a
        symbolic link: it would take the traces out of the runs folder)."""
        folder = self.path.with_suffix(".traces")
        try:
            folder.mkdir()
        except FileExistsError:
            pass
        if folder.is_symlink() or not folder.is_dir():
            raise RunPathError(f"{folder} exists and is not a folder (a file or a symbolic link); move it "
                               "away to save traces beside the run file")
        return folder

    def _append(self, data: bytes) -> None:
        # Ctrl-C is held back until the block is on disk, so it never splits a point's records.
        with _sigint_deferred():
            fd = self._f.fileno()
            start = os.lseek(fd, 0, os.SEEK_END)
            if start and os.pread(fd, 1, start - 1) != b"\n":
                # Another process appended a partial line: end it, so this block starts a record of its own.
                data = b"\n" + data
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except OSError:
                # A full disk (ENOSPC) or I/O error mid-point: cut the torn block off so the file
                # ends on a whole record; the loader would skip it anyway (no commit record).
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass
                raise

    def discard_if_empty(self) -> bool:
        """Close and remove the file when no point was ever committed to it (a run that failed before
        its first point, e.g. a rank that died): a header alone would list as a run of 0 points."""
        if self.points or recorded_points(self.path):
            return False
        self.close()
        try:
            os.unlink(self.path)
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Close the file; OSError when its last fsync fails (the file is closed all the same)."""
        if not self._f.closed:
            try:
                os.fsync(self._f.fileno())
            finally:
                self._f.close()

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunWriter({str(self.path)!r}, points={len(self.points)})"


def recorded_points(path: Path) -> int:
    """How many point commit records a run file holds (0 if it cannot be read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return len(records.read_file(path, records.ProblemLog(emit=False)).points)


def _finite(rec: dict) -> dict:
    """NaN/inf become null so the file is strict JSON (pandas reads null back as NaN)."""
    out = {}
    for k, v in rec.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


@contextmanager
def _sigint_deferred():
    """Delay SIGINT (KeyboardInterrupt) to the end of the block; main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    except (ValueError, OSError):  # not in the main interpreter / signals unavailable
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])
        elif caught and previous == signal.SIG_DFL:
            raise KeyboardInterrupt


def _write_all(fd: int, data: bytes) -> None:
    """All of `data`, however many writes it takes (a nearly full disk takes part of one, then fails)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def last_modified_run(folder: str | os.PathLike | None = None) -> Path:
    """The run file of a folder written to last (by modification time, then name): the one to resume."""
    folder = Path(folder) if folder is not None else runs_dir()
    files = sorted(folder.glob(f"*{RUN_SUFFIX}")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no run files ({RUN_SUFFIX}) in {folder} to resume")
    return max(files, key=lambda p: (p.stat().st_mtime, p.name))


def machine_differences(a: dict, b: dict) -> list[str]:
    """The machine keys (schema.MACHINE_KEYS: gpu, driver, cuda, torch) on which two fingerprints
    differ; a run is resumed only where there are none."""
    return [k for k in schema.MACHINE_KEYS if str(a.get(k)) != str(b.get(k))]
