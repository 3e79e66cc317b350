"""Reading run files: every record validated, no file able to break a load.

Rules (each case warns with a DataWarning naming file:line, and is listed in `Loaded.warnings`):
  - a line that does not parse (truncated, corrupted, too deeply nested) or is not a known record
    kind, or a record whose fields have the wrong type or shape: that record is skipped;
  - a header of the wrong shape, or of a schema version this code does not read: the whole file is
    skipped (its rows cannot be interpreted), never an exception for the whole load;
  - no readable header (e.g. a damaged first line): the rows load with an unknown machine;
  - a UTF-8 byte-order mark is accepted;
  - a row line repeated within an attempt: the copy is skipped;
  - a file whose run_id was already loaded from another file (a copied run file): skipped;
  - rows of a point with no commit (`point`) record (an interrupted or torn write, e.g. a full
    disk): not loaded; a committed point with fewer readable rows than it committed is loaded
    with a warning saying how many are missing;
  - per point, only its last committed attempt is loaded (a retried point replaces its failure).
Good records of every other file (and of the same file) still load.
"""
from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from dspark_lab.results import cache as _cache
from dspark_lab.results import noise, schema
from dspark_lab.results.rows import STATUSES, row_problems

if TYPE_CHECKING:
    import pandas as pd

RUN_SUFFIX = ".jsonl"
KINDS = ("header", "row", "timeline", "point")
TIMELINE_COLUMNS = ("run_id", "point_id", "strategy", "lane", "part", "start_ms", "end_ms", "label")
_BOM = b"\xef\xbb\xbf"


class DataWarning(UserWarning):
    """A recorded file or record is damaged or not readable; the good records are kept."""


class SchemaVersionError(ValueError):
    """A run file was written with a schema version this code cannot read."""


@dataclass
class FileRecords:
    path: Path
    header: Optional[dict] = None
    header_line: Optional[int] = None
    rows: list = field(default_factory=list)
    timelines: list = field(default_factory=list)
    points: list = field(default_factory=list)  # commit records in file order
    ends_with_newline: bool = True
    unreadable: Optional[str] = None  # why the whole file is skipped, if it is


class _Log:
    """Collects problems and emits each as a DataWarning."""

    def __init__(self, emit: bool = True):
        self.messages: list[str] = []
        self.emit = emit

    def __call__(self, path: Path, line: Optional[int], message: str) -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        text = f"{where}: {message}"
        self.messages.append(text)
        if self.emit:
            warnings.warn(text, DataWarning, stacklevel=3)


def check_version(header: dict, path: Path) -> None:
    version = header.get("schema_version")
    if isinstance(version, bool) or version not in schema.READABLE_SCHEMA_VERSIONS:
        raise SchemaVersionError(
            f"{path}: schema_version {version!r:.40} is not supported by this dspark_lab (it reads "
            f"schema_version {', '.join(map(str, schema.READABLE_SCHEMA_VERSIONS))}); use the dspark_lab "
            f"release that wrote the file, or convert it")


def header_problems(rec: dict) -> list[str]:
    out = []
    if not isinstance(rec.get("run_id"), str) or not rec.get("run_id"):
        out.append("run_id must be a non-empty string")
    for key in ("created_at", "name"):
        if rec.get(key) is not None and not isinstance(rec.get(key), str):
            out.append(f"{key} must be a string")
    for key in ("fingerprint", "sweep"):
        if rec.get(key) is not None and not isinstance(rec.get(key), dict):
            out.append(f"{key} must be an object")
    fp = rec.get("fingerprint") or {}
    if isinstance(fp, dict):
        for k in ("gpu", "driver", "cuda", "torch"):
            v = fp.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (str, int, float))):
                out.append(f"fingerprint.{k} must be a string")
    return out


def _segment_ok(seg) -> bool:
    return (isinstance(seg, list) and len(seg) == 5 and all(isinstance(seg[i], str) for i in (0, 1, 4))
            and all(isinstance(seg[i], (int, float)) and not isinstance(seg[i], bool) and math.isfinite(seg[i])
                    for i in (2, 3)))


def read_file(path: Path, log: Optional[_Log] = None) -> FileRecords:
    """Parse and validate one run file's records (see the module's rules)."""
    log = log or _Log()
    out = FileRecords(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        out.unreadable = f"cannot read it ({e.strerror or e})"
        log(path, None, out.unreadable + ", skipped")
        return out
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    out.ends_with_newline = data.endswith(b"\n") or not data
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    seen_rows: dict[tuple, int] = {}
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = lineno == len(lines)
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            why = "truncated record (an interrupted write?)" if last and not out.ends_with_newline else "corrupted record"
            log(path, lineno, f"{why}, skipped ({e.__class__.__name__}: {str(e)[:80]})")
            continue
        if not isinstance(rec, dict) or rec.get("kind") not in KINDS:
            kind = rec.get("kind") if isinstance(rec, dict) else type(rec).__name__
            log(path, lineno, f"record of unknown kind {str(kind)[:40]!r}, skipped (known: {', '.join(KINDS)})")
            continue
        kind = rec["kind"]
        if kind == "header":
            if out.header is not None or out.header_line is not None:
                log(path, lineno, "a second header record, skipped")
                continue
            out.header_line = lineno
            try:
                check_version(rec, path)
            except SchemaVersionError as e:
                out.unreadable = str(e).split(": ", 1)[1]
                log(path, lineno, out.unreadable + "; file skipped")
                return out
            problems = header_problems(rec)
            if problems:
                out.unreadable = "header of the wrong shape (" + "; ".join(problems) + ")"
                log(path, lineno, out.unreadable + "; file skipped")
                return out
            out.header = rec
        elif kind == "row":
            problems = row_problems(rec)
            if not isinstance(rec.get("attempt"), (str, type(None))):
                problems.append("attempt must be a string")
            if problems:
                log(path, lineno, "row skipped: " + "; ".join(problems[:3]))
                continue
            # A row is one trial of one strategy at one point, on one rank of one rank case.
            key = (rec.get("attempt"), rec["point_id"], rec["strategy"], rec.get("trial"),
                   rec.get("rank"), rec.get("rank_case"), rec.get("dispatch"))
            if key in seen_rows:
                log(path, lineno, f"duplicate of the row on line {seen_rows[key]}, skipped")
                continue
            seen_rows[key] = lineno
            rec["_line"] = lineno
            out.rows.append(rec)
        elif kind == "timeline":
            if not isinstance(rec.get("point_id"), str) or not isinstance(rec.get("segments"), list) \
                    or not isinstance(rec.get("strategy"), (str, type(None))):
                log(path, lineno, "timeline record without point_id, strategy or segments list, skipped")
                continue
            bad = [i for i, s in enumerate(rec["segments"]) if not _segment_ok(s)]
            if bad:
                log(path, lineno, f"timeline: {len(bad)} segment(s) not [lane, part, start_ms, end_ms, label], skipped")
                rec = {**rec, "segments": [s for i, s in enumerate(rec["segments"]) if i not in set(bad)]}
            out.timelines.append(rec)
        else:  # point
            n_rows = rec.get("n_rows")
            if not isinstance(rec.get("point_id"), str) or rec.get("status") not in STATUSES \
                    or not (n_rows is None or (isinstance(n_rows, int) and not isinstance(n_rows, bool))):
                log(path, lineno, "point record without a valid point_id, status or n_rows, skipped")
                continue
            rec["_line"] = lineno
            out.points.append(rec)
    if out.header is None and out.unreadable is None and lines:
        log(path, 1, "no readable header record; machine fingerprint unknown for its rows")
    return out


def select_attempts(recs: FileRecords, log: Optional[_Log] = None) -> tuple[list[dict], list[dict]]:
    """Per point, the rows and timelines of its last committed attempt; uncommitted rows are left out."""
    log = log or _Log(emit=False)
    committed: dict[str, dict] = {}
    for p in recs.points:
        committed[p["point_id"]] = p
    uncommitted: dict[str, int] = {}
    kept_rows = []
    for r in recs.rows:
        c = committed.get(r["point_id"])
        if c is None:
            uncommitted[r["point_id"]] = uncommitted.get(r["point_id"], 0) + 1
        elif r.get("attempt") == c.get("attempt"):
            kept_rows.append(r)
    for pid, n in uncommitted.items():
        log(recs.path, None, f"point {pid[:40]}: {n} row(s) without a commit record (an interrupted or torn "
                             "write), not loaded")
    for pid, c in committed.items():
        n_found = sum(1 for r in kept_rows if r["point_id"] == pid)
        if isinstance(c.get("n_rows"), int) and n_found < c["n_rows"]:
            log(recs.path, c["_line"], f"point {pid[:40]}: {n_found} of its {c['n_rows']} committed rows are "
                                       "readable; the readable ones are loaded")
    tls = [t for t in recs.timelines
           if t["point_id"] in committed and t.get("attempt") == committed[t["point_id"]].get("attempt")]
    return kept_rows, tls


def run_files(paths: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
              default: Optional[Path] = None) -> list[Path]:
    """The run files named by `paths` (files and/or folders, searched recursively), sorted."""
    if paths is None:
        paths = [default] if default is not None else []
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


def _fingerprint_values(header: Optional[dict], path: Path) -> dict:
    fp = (header or {}).get("fingerprint") or {}
    return {
        "gpu": str(fp.get("gpu", "unknown")),
        "driver": str(fp.get("driver", "unknown")),
        "cuda": str(fp.get("cuda", "unknown")),
        "torch": str(fp.get("torch", "unknown")),
        "run_id": (header or {}).get("run_id", path.stem),
        "recorded_at": (header or {}).get("created_at", ""),
    }


class _Collect(_Log):
    """Collects [line, message] pairs of one file without emitting them (they are replayed, with the
    path as given, by `load`, also when the file's results come from the cache)."""

    def __init__(self):
        super().__init__(emit=False)
        self.items: list = []

    def __call__(self, path: Path, line: Optional[int], message: str) -> None:
        self.items.append([line, message])


def parse_file(path: Path):
    """One run file read, validated and reduced to its last committed attempts: a cache.Entry with
    its rows (a DataFrame with the disturbed verdict in cache.DISTURBED_COLUMN) and timelines."""
    import pandas as pd

    key = _cache.file_key(path)
    col = _Collect()
    recs = read_file(path, col)
    entry = _cache.Entry(key=key, header=recs.header, header_line=recs.header_line, unreadable=recs.unreadable,
                         read_problems=col.items)
    if recs.unreadable is None:
        fpv = _fingerprint_values(recs.header, path)
        entry.run_id = str(fpv["run_id"])
        sel = _Collect()
        rows, timelines = select_attempts(recs, sel)
        entry.select_problems = sel.items
        commit_time = {p["point_id"]: p.get("recorded_at") for p in recs.points}
        row_dicts = []
        for r in rows:
            d = {k: v for k, v in r.items() if k not in ("kind", "attempt", "_line")}
            d.update(fpv)
            t = commit_time.get(r["point_id"])
            d["recorded_at"] = t if isinstance(t, str) and t else fpv["recorded_at"]
            row_dicts.append(d)
        df = _frame(row_dicts)
        df[_cache.DISTURBED_COLUMN] = noise.disturbed_flags(df).to_numpy(bool) if len(df) else []
        entry.rows, entry.n_rows = df, len(df)
        seg_rows = [(fpv["run_id"], t["point_id"], t.get("strategy"), *seg) for t in timelines for seg in t["segments"]]
        entry.timelines = pd.DataFrame.from_records(seg_rows, columns=list(TIMELINE_COLUMNS))
    if _cache.file_key(path) != key or _cache.racy(key):  # written to while read, or may still be
        entry.key = None  # changed within its timestamp's tick: never cached
    return entry


def _frame(row_dicts: list) -> "pd.DataFrame":
    import pandas as pd

    base_cols = list(schema.ROW_COLUMNS) + list(schema.FINGERPRINT_COLUMNS)
    if not row_dicts:
        return pd.DataFrame(columns=base_cols)
    df = pd.DataFrame.from_records(row_dicts)
    for c in base_cols:
        if c not in df.columns:
            df[c] = None
    return df[base_cols + [c for c in df.columns if c not in base_cols]]


class TimelineSource:
    """Timeline segments per run, read only when a view asks for them (from the cache, else the run
    file), then kept. `get(run_id, point_id)` reads one run's; `all()` every run's."""

    def __init__(self, loaders: Optional[dict] = None):
        self._loaders = dict(loaders or {})  # run_id -> callable returning that run's segments
        self._memo: dict = {}

    def add(self, run_id: str, loader) -> None:
        self._loaders[run_id] = loader

    def run_ids(self) -> list:
        return list(self._loaders)

    def read_runs(self) -> list:
        """The runs whose segments have been read so far."""
        return [r for r in self._loaders if r in self._memo]

    def subset(self, run_ids) -> "TimelineSource":
        out = TimelineSource({r: self._loaders[r] for r in run_ids if r in self._loaders})
        out._memo = self._memo  # shared: a run read through one view is not read again
        return out

    def _run(self, run_id: str) -> "pd.DataFrame":
        import pandas as pd

        if run_id not in self._memo:
            f = self._loaders.get(run_id)
            self._memo[run_id] = f() if f is not None else pd.DataFrame(columns=list(TIMELINE_COLUMNS))
        return self._memo[run_id]

    def get(self, run_id: str, point_id: Optional[str] = None) -> "pd.DataFrame":
        tl = self._run(str(run_id))
        return tl[tl["point_id"] == point_id].reset_index(drop=True) if point_id is not None else tl

    def all(self, run_ids: Optional[Iterable[str]] = None) -> "pd.DataFrame":
        import pandas as pd

        parts = [self._run(r) for r in (run_ids if run_ids is not None else self._loaders)]
        parts = [p for p in parts if len(p)]
        if not parts:
            return pd.DataFrame(columns=list(TIMELINE_COLUMNS))
        return pd.concat(parts, ignore_index=True)


def _timeline_loader(path: Path, entry, cache_dir: Optional[Path]):

    kept = entry.timelines
    key, run_id = entry.key, entry.run_id

    def load():
        if kept is not None:
            return kept
        if cache_dir is not None and key is not None:
            tl = _cache.read_timelines(cache_dir, key)
            if tl is not None and list(tl.columns) == list(TIMELINE_COLUMNS[1:]):
                tl.insert(0, "run_id", run_id)
                return tl
        return parse_file(path).timelines  # no cache entry: the run file, as it is now

    return load


@dataclass
class Loaded:
    rows: "pd.DataFrame"
    timeline_source: TimelineSource
    headers: list  # header records, each with "path" added
    warnings: list  # every problem, "file:line: what was skipped"
    disturbed: Optional["pd.Series"] = None  # per row: the recorded verdict, else results.noise's rule

    @property
    def timelines(self) -> "pd.DataFrame":
        """Every run's timeline segments (read now; views that need one run use timeline_source)."""
        return self.timeline_source.all()


def _cache_dir(cache, paths, default) -> Optional[Path]:

    if cache is False or not _cache.available():
        return None
    cdir = Path(cache).expanduser() if isinstance(cache, (str, os.PathLike)) else _cache.default_dir()
    if cdir is None:
        return None
    given = [default] if paths is None else ([paths] if isinstance(paths, (str, os.PathLike)) else list(paths))
    _cache.check_outside(cdir, [p for p in given if p is not None])
    return cdir


def _concat_tables(parts: list):
    """Per-file rows as one pyarrow Table, or None when some are DataFrames or their types clash."""
    if not parts or not all(hasattr(p, "num_rows") for p in parts):
        return None
    import pyarrow as pa

    parts = [p for p in parts if p.num_rows]
    if not parts:
        return None
    try:
        return pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, NotImplementedError):
        return None  # a column typed differently across files: join them as frames


def _assemble(parts: list, table=None) -> "pd.DataFrame":
    """Per-file rows (pyarrow Tables from the cache, or DataFrames) -> one DataFrame, in file order."""
    import pandas as pd

    if table is not None:
        return _cache.from_table(table)
    parts = [p for p in parts if (p.num_rows if hasattr(p, "num_rows") else len(p))]
    if not parts:
        return _frame([])
    frames = [_cache.from_table(p) if hasattr(p, "num_rows") else p for p in parts]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _entries(files: list, cache_dir: Optional[Path]) -> list:
    """Per run file its cache.Entry: from the cache when its key matches, else parsed (and cached)."""

    out = []
    for path in files:
        entry = None
        if cache_dir is not None:
            key = _cache.file_key(path)
            entry = _cache.read(cache_dir, path, key) if key is not None else None
        if entry is None:
            entry = parse_file(path)
            if cache_dir is not None and entry.key is not None:
                written = _cache.write(cache_dir, entry, entry.rows)
                if written is not None:  # read back lazily from the cache, not kept in memory
                    entry.rows, entry.timelines = written, None
        out.append(entry)
    return out


def load(paths=None, *, default: Optional[Path] = None, cache=None) -> Loaded:
    """Load run files (or every run file under folders). Never raises for a file's content;
    FileNotFoundError only for a path that does not exist; ValueError for a cache folder inside a
    folder being loaded. `cache`: None (the default folder, results/cache.py), a folder, or False."""

    cache_dir = _cache_dir(cache, paths, default)
    files = run_files(paths, default)
    bundle = None
    if cache_dir is not None and files:
        keys = [_cache.file_key(p) for p in files]
        bundle = _cache.read_bundle(cache_dir, files, keys) if None not in keys else None
    entries, table = bundle if bundle is not None else (_entries(files, cache_dir), None)
    log = _Log()
    parts: list = []
    headers: list[dict] = []
    run_ids: dict[str, Path] = {}
    source = TimelineSource()
    for path, entry in zip(files, entries):
        for line, msg in entry.read_problems:
            log(path, line, msg)
        if entry.unreadable is not None:
            continue
        if entry.run_id in run_ids:
            log(path, entry.header_line, f"run_id {entry.run_id!r} was already loaded from {run_ids[entry.run_id]} "
                                         "(a copied run file?); this copy is skipped")
            continue
        run_ids[entry.run_id] = path
        for line, msg in entry.select_problems:
            log(path, line, msg)
        if entry.header is not None:
            headers.append({**entry.header, "path": str(path)})
        parts.append(entry.rows)
        source.add(entry.run_id, _timeline_loader(path, entry, cache_dir))
    if bundle is None:
        table = _concat_tables(parts)
        if table is not None and cache_dir is not None:
            _cache.write_bundle(cache_dir, files, entries, table)
    rows_df = _assemble(parts, table)
    disturbed = rows_df.pop(_cache.DISTURBED_COLUMN).astype(bool) if _cache.DISTURBED_COLUMN in rows_df else None
    base_cols = list(schema.ROW_COLUMNS) + list(schema.FINGERPRINT_COLUMNS)
    rows_df = rows_df[base_cols + [c for c in rows_df.columns if c not in base_cols]]
    return Loaded(rows_df, source, headers, log.messages, disturbed)
