"""Recorded runs on disk: append-only JSON-lines files under data/runs/, one file per run.

A run file holds, one JSON object a line:

    {"kind": "header", "schema_version", "run_id", "created_at", "fingerprint": {...}, "sweep": {...}}
    {"kind": "row", "attempt", <schema.ROW_COLUMNS>}                 one per strategy x trial
    {"kind": "timeline", "attempt", "point_id", "strategy", "segments": [...]}
    {"kind": "point", "attempt", "point_id", "status", "n_rows", "n_timelines", "recorded_at"}

A point's records are written together, ending with its `point` record (the commit), in one write
followed by flush + fsync, so a crash, Ctrl-C or kill leaves every finished point readable and at
worst a partial last line. Resuming appends; nothing is ever rewritten. When a point was measured
more than once in one file (an interrupted write, or a failed point retried), loading keeps only
its last committed attempt, so no row is doubled.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import secrets
import signal
import threading
from contextlib import contextmanager
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from . import schema

if TYPE_CHECKING:  # pandas is imported when loading, so that recording needs only the stdlib
    import pandas as pd

RUN_SUFFIX = ".jsonl"
KINDS = ("header", "row", "timeline", "point")
# Fingerprint keys that must agree for a run to be resumed on this machine.
MACHINE_KEYS = ("gpu", "driver", "cuda", "torch")
TIMELINE_COLUMNS = ("run_id", "point_id", "strategy", "lane", "part", "start_ms", "end_ms", "label")


class DataWarning(UserWarning):
    """A recorded file is damaged (truncated or corrupted line); the good records are kept."""


class SchemaVersionError(ValueError):
    """A run file was written with a schema version this code cannot read."""


def default_data_dir() -> Path:
    """The repository's data/ folder (next to the package), or $DSPARK_DATA when set."""
    env = os.environ.get("DSPARK_DATA")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parent.parent / "data"


def runs_dir(data_dir: str | os.PathLike | None = None) -> Path:
    return Path(data_dir) / "runs" if data_dir is not None else default_data_dir() / "runs"


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


def _check_version(header: dict, path: Path) -> None:
    version = header.get("schema_version")
    if version != schema.SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path}: schema_version {version!r} is not supported by this dspark_lab "
            f"(it reads schema_version {schema.SCHEMA_VERSION}); use the dspark_lab release "
            f"that wrote the file, or convert it"
        )


# ---------------------------------------------------------------------------------------------
# Reading one file
# ---------------------------------------------------------------------------------------------
@dataclass
class _FileRecords:
    path: Path
    header: dict | None = None
    rows: list[dict] = field(default_factory=list)
    timelines: list[dict] = field(default_factory=list)
    points: list[dict] = field(default_factory=list)  # commit records in file order
    ends_with_newline: bool = True


def _warn(path: Path, line: int | None, message: str) -> None:
    where = f"{path}:{line}" if line is not None else f"{path}"
    warnings.warn(f"{where}: {message}", DataWarning, stacklevel=3)


def _read_file(path: Path) -> _FileRecords:
    """Parse a run file, warning (naming file and line) on every damaged line, keeping the rest."""
    out = _FileRecords(path)
    data = path.read_bytes()
    out.ends_with_newline = data.endswith(b"\n") or not data
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = lineno == len(lines)
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            why = "truncated record (an interrupted write?)" if last and not out.ends_with_newline else "corrupted record"
            _warn(path, lineno, f"{why}, skipped ({e.__class__.__name__}: {e})")
            continue
        if not isinstance(rec, dict) or rec.get("kind") not in KINDS:
            kind = rec.get("kind") if isinstance(rec, dict) else type(rec).__name__
            _warn(path, lineno, f"record of unknown kind {kind!r}, skipped (known: {', '.join(KINDS)})")
            continue
        kind = rec["kind"]
        if kind == "header":
            if out.header is not None:
                _warn(path, lineno, "a second header record, skipped")
                continue
            _check_version(rec, path)
            out.header = rec
        elif kind == "row":
            missing = [c for c in ("point_id", "strategy") if c not in rec]
            if missing:
                _warn(path, lineno, f"row record without {', '.join(missing)}, skipped")
                continue
            rec["_line"] = lineno
            out.rows.append(rec)
        elif kind == "timeline":
            if "point_id" not in rec or not isinstance(rec.get("segments"), list):
                _warn(path, lineno, "timeline record without point_id or segments, skipped")
                continue
            out.timelines.append(rec)
        else:  # point
            if "point_id" not in rec:
                _warn(path, lineno, "point record without point_id, skipped")
                continue
            out.points.append(rec)
    if out.header is None and (out.rows or out.timelines or out.points or lines):
        _warn(path, 1, "no readable header record; machine fingerprint unknown for its rows")
    return out


def _select_attempts(recs: _FileRecords) -> tuple[list[dict], list[dict]]:
    """Per point, keep the records of its last committed attempt (or its last attempt if none)."""
    committed: dict[str, str | None] = {}
    for p in recs.points:
        committed[p["point_id"]] = p.get("attempt")
    last_seen: dict[str, str | None] = {}
    for r in recs.rows + recs.timelines:
        last_seen[r["point_id"]] = r.get("attempt")

    def keep(r: dict) -> bool:
        pid = r["point_id"]
        chosen = committed[pid] if pid in committed else last_seen.get(pid)
        return r.get("attempt") == chosen

    return [r for r in recs.rows if keep(r)], [t for t in recs.timelines if keep(t)]


# ---------------------------------------------------------------------------------------------
# Loading many files into tidy frames
# ---------------------------------------------------------------------------------------------
def run_files(paths: str | os.PathLike | Iterable[str | os.PathLike] | None = None) -> list[Path]:
    """The run files named by `paths` (files and/or folders, searched recursively), sorted."""
    if paths is None:
        paths = [default_data_dir()]
    elif isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(q for q in p.rglob(f"*{RUN_SUFFIX}") if q.is_file()))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"no run file or folder at {p}")
    seen: set[Path] = set()
    unique = []
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def _fingerprint_values(header: dict | None, path: Path) -> dict:
    fp = (header or {}).get("fingerprint") or {}
    return {
        "gpu": fp.get("gpu", "unknown"),
        "driver": fp.get("driver", "unknown"),
        "cuda": fp.get("cuda", "unknown"),
        "torch": fp.get("torch", "unknown"),
        "run_id": (header or {}).get("run_id", path.stem),
        "recorded_at": (header or {}).get("created_at", ""),
    }


def load_runs(
    paths: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """Load run files (or every run file under folders; default: the data dir).

    Returns (rows, timelines, headers):
      rows      one row per point x strategy x trial: schema.ROW_COLUMNS + schema.FINGERPRINT_COLUMNS
                (recorded_at is when the point was written), plus any extra recorded columns.
      timelines one row per segment: run_id, point_id, strategy, lane, part, start_ms, end_ms, label.
      headers   the header records, each with "path" added.
    Damaged lines give a DataWarning naming file and line; an unknown schema_version raises
    SchemaVersionError naming the file.
    """
    import pandas as pd

    row_dicts: list[dict] = []
    seg_rows: list[tuple] = []
    headers: list[dict] = []
    for path in run_files(paths):
        recs = _read_file(path)
        fpv = _fingerprint_values(recs.header, path)
        if recs.header is not None:
            headers.append({**recs.header, "path": str(path)})
        commit_time = {p["point_id"]: p.get("recorded_at") for p in recs.points}
        rows, timelines = _select_attempts(recs)
        for r in rows:
            d = {k: v for k, v in r.items() if k not in ("kind", "attempt", "_line")}
            for c in schema.ROW_COLUMNS:
                d.setdefault(c, None)
            d.update(fpv)
            d["recorded_at"] = commit_time.get(r["point_id"]) or fpv["recorded_at"]
            row_dicts.append(d)
        for t in timelines:
            for i, seg in enumerate(t["segments"]):
                if not isinstance(seg, (list, tuple)) or len(seg) != 5:
                    _warn(path, None, f"timeline of point {t['point_id']} / {t.get('strategy')}: "
                          f"segment {i} is not [lane, part, start_ms, end_ms, label], skipped")
                    continue
                seg_rows.append((fpv["run_id"], t["point_id"], t.get("strategy"), *seg))
    base_cols = list(schema.ROW_COLUMNS) + list(schema.FINGERPRINT_COLUMNS)
    if row_dicts:
        rows_df = pd.DataFrame.from_records(row_dicts)
        extra = [c for c in rows_df.columns if c not in base_cols]
        rows_df = rows_df[base_cols + extra]
    else:
        rows_df = pd.DataFrame(columns=base_cols)
    timelines_df = pd.DataFrame.from_records(seg_rows, columns=list(TIMELINE_COLUMNS))
    return rows_df, timelines_df, headers


def read_header(path: str | os.PathLike) -> dict:
    """The header of one run file (SchemaVersionError on an unknown version)."""
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        recs = _read_file(path)
    if recs.header is None:
        raise ValueError(f"{path}: no readable header record; not a dspark-lab run file")
    return recs.header


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------
class RunWriter:
    """Appends points to one run file. `RunWriter.create(...)` starts a run; `RunWriter.open(path)`
    reopens one to resume it. Use as a context manager or call close()."""

    def __init__(self, path: Path, header: dict, points: dict[str, str] | None = None):
        self.path = Path(path)
        self.header = header
        # point_id -> status of its last committed attempt ("ok" | "failed")
        self.points: dict[str, str] = dict(points or {})
        self._f = open(self.path, "ab", buffering=0)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        out: str | os.PathLike | None = None,
        *,
        fingerprint: dict,
        sweep: dict,
        run_id: str | None = None,
        **extra: Any,
    ) -> "RunWriter":
        """Start a new run file. `out` is a file path (must not exist) or a folder (default:
        data/runs/), where the file is named <run_id>.jsonl. `extra` goes into the header."""
        run_id = run_id or new_run_id()
        out = Path(out) if out is not None else runs_dir()
        if out.suffix == RUN_SUFFIX and not out.is_dir():
            path = out
        else:
            path = out / f"{run_id}{RUN_SUFFIX}"
        if path.exists():
            raise FileExistsError(f"{path} exists; resume it (--resume) or choose another --out")
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {
            "kind": "header",
            "schema_version": schema.SCHEMA_VERSION,
            "run_id": run_id,
            "created_at": _now(),
            "fingerprint": dict(fingerprint),
            "sweep": dict(sweep),
            **extra,
        }
        # Exclusive create: two writers never share a file.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, (_dumps(header) + "\n").encode())
            os.fsync(fd)
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
        recs = _read_file(path)
        if recs.header is None:
            raise ValueError(f"{path}: no readable header record; cannot resume it")
        points = {p["point_id"]: p.get("status", "ok") for p in recs.points}
        writer = cls(path, recs.header, points)
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
        rows: Sequence[dict],
        timelines: Sequence[dict] = (),
        *,
        status: str | None = None,
    ) -> None:
        """Append one point's rows and timelines and its commit record, then fsync."""
        if status is None:
            status = "ok" if rows and all(r.get("status", "ok") == "ok" for r in rows) else "failed"
        attempt = secrets.token_hex(4)
        lines = []
        for r in rows:
            rec = {"kind": "row", "attempt": attempt}
            rec.update({c: r.get(c) for c in schema.ROW_COLUMNS})
            rec.update({k: v for k, v in r.items() if k not in rec})
            rec["point_id"] = r.get("point_id") or point_id
            rec["status"] = r.get("status") or "ok"
            lines.append(_dumps(_finite(rec)))
        for t in timelines:
            rec = {"kind": "timeline", "attempt": attempt, **t}
            rec["kind"] = "timeline"
            rec.setdefault("point_id", point_id)
            lines.append(_dumps(_finite(rec)))
        lines.append(_dumps({
            "kind": "point", "attempt": attempt, "point_id": point_id, "status": status,
            "n_rows": len(rows), "n_timelines": len(timelines), "recorded_at": _now(),
        }))
        self._append(("\n".join(lines) + "\n").encode())
        self.points[point_id] = status

    def write_traces(self, point_id: str, traces: dict[str, dict]) -> list[Path]:
        """Save chrome traces beside the run file (<run>.traces/<point>-<strategy>.json.gz, which
        chrome://tracing and Perfetto open); they are large, so they are kept out of the run file."""
        folder = self.path.with_suffix(".traces")
        folder.mkdir(exist_ok=True)
        written = []
        for strategy, trace in traces.items():
            p = folder / f"{point_id}-{strategy}.json.gz"
            with gzip.open(p, "wt", encoding="utf-8") as f:
                json.dump(trace, f, default=_json_default)
            written.append(p)
        return written

    def _append(self, data: bytes) -> None:
        # Ctrl-C is held back until the block is on disk, so it never splits a point's records.
        with _sigint_deferred():
            view = memoryview(data)
            while view:
                n = os.write(self._f.fileno(), view)
                view = view[n:]
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            os.fsync(self._f.fileno())
            self._f.close()

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunWriter({str(self.path)!r}, points={len(self.points)})"


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


def latest_run(folder: str | os.PathLike | None = None) -> Path:
    """The most recently written run file in a folder (by modification time, then name)."""
    folder = Path(folder) if folder is not None else runs_dir()
    files = sorted(folder.glob(f"*{RUN_SUFFIX}")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no run files ({RUN_SUFFIX}) in {folder} to resume")
    return max(files, key=lambda p: (p.stat().st_mtime, p.name))


def same_machine(a: dict, b: dict) -> list[str]:
    """The fingerprint keys (gpu, driver, cuda, torch) on which two fingerprints differ."""
    return [k for k in MACHINE_KEYS if str(a.get(k)) != str(b.get(k))]
