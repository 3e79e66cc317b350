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
  - per point, only its last committed attempt is loaded (a retried point replaces its failure);
  - a subfolder that cannot be listed: said (file None), the rest of the folder loads;
  - a file name that is not valid UTF-8: loaded like any other (its cache entry is named safely);
  - a symbolic link met in a folder: not followed, said (a file named itself is read);
  - only regular files are read, each up to regular_files.RUN_FILE_LIMIT bytes (a FIFO or a device
    in place of a run file is said, never waited on);
  - a row value out of its range (a step of 0 ms or less, a negative trial or rank: rows.POSITIVE,
    rows.NONNEGATIVE): the row is skipped, the warning naming the field.
Good records of every other file (and of the same file) still load.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from dspark_lab.printable import one_line
from dspark_lab.results.loading import cache as _cache
from dspark_lab.results.rules import noise
from dspark_lab.results.record import schema
# DataWarning and SchemaVersionError: what `load` warns with and what a file it skips raised.
from dspark_lab.results.record.records import RUN_SUFFIX, DataWarning, SchemaVersionError, ProblemLog, read_file, select_attempts  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd

TIMELINE_COLUMNS = ("run_id", "point_id", "strategy", "lane", "part", "start_ms", "end_ms", "label")


MAX_FOLDER_DEPTH = 64  # folders below a folder given: run files kept deeper than this are not searched


def _files_under(folder: Path, log: ProblemLog) -> list[Path]:
    """The run files under `folder`, sorted; a subfolder that cannot be listed is said (not skipped
    silently), so is one deeper than MAX_FOLDER_DEPTH. The walk is a loop, not a recursion (a folder
    1,100 levels deep is said, not a RecursionError), follows no symbolic link and enters no folder
    twice (a bind mount of a folder inside itself: its (device, inode) is seen again)."""
    found, seen, todo = [], set(), [(folder, 0)]
    while todo:
        here, depth = todo.pop()
        try:
            st = here.stat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(here) as it:
                entries = list(it)
        except OSError as e:
            log(here, None, f"folder cannot be read ({e.strerror or e}); run files under it are not loaded")
            continue
        for e in entries:
            if e.name.endswith(RUN_SUFFIX) and not _is_dir_entry(e):
                found.append(Path(e.path))
            elif _is_dir_entry(e):
                if depth < MAX_FOLDER_DEPTH:
                    todo.append((Path(e.path), depth + 1))
                else:
                    log(Path(e.path), None, f"more than {MAX_FOLDER_DEPTH} folders below {folder}; not searched")
    return [q for q in sorted(found) if _kept(q, log)]


def _is_dir_entry(e: os.DirEntry) -> bool:
    try:
        return e.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _kept(q: Path, log: ProblemLog) -> bool:
    if q.is_symlink():  # it may point anywhere (a secret, a device): loaded only when named itself
        log(q, None, "a symbolic link, not followed; give its target's path to load it")
        return False
    return q.is_file()


def run_files(paths: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
              default: Optional[Path] = None, log: Optional[ProblemLog] = None) -> list[Path]:
    """The run files named by `paths` (files and/or folders, searched recursively), sorted."""
    log = log if log is not None else ProblemLog()
    if paths is None:
        paths = [default] if default is not None else []
    elif isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(_files_under(p, log))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"no run file or folder at {p}{_why_missing(p)}")
    seen: set[str] = set()
    unique = []
    for f in files:
        key = os.path.realpath(f)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def _why_missing(p: Path) -> str:
    """What stands at a path that is neither a folder nor a file: a symbolic link loop, or a
    link to nothing ("" when nothing is there at all)."""
    try:
        os.stat(p)
    except OSError as e:
        if os.path.lexists(p):
            return f" ({e.strerror or e}: a symbolic link {'loop' if e.errno == errno.ELOOP else 'to nothing'})"
        return ""
    return " (neither a file nor a folder)"


def _fingerprint_values(header: Optional[dict], path: Path) -> dict:
    """The machine columns of the file's rows; each as printable.one_line shows it (a GPU named
    "G\\ndspark-lab: ..." would print a forged line in every table and warning that names it)."""
    fp = (header or {}).get("fingerprint") or {}
    return {
        "gpu": one_line(fp.get("gpu", "unknown")),
        "driver": one_line(fp.get("driver", "unknown")),
        "cuda": one_line(fp.get("cuda", "unknown")),
        "torch": one_line(fp.get("torch", "unknown")),
        "run_id": (header or {}).get("run_id", path.stem),
        "recorded_at": (header or {}).get("created_at", ""),
    }


def _shown_header(header: dict, path: Path) -> dict:
    """A loaded header as views show it: its path added, its fingerprint's texts as one_line shows them."""
    fp = header.get("fingerprint")
    if isinstance(fp, dict):
        header = {**header, "fingerprint": {k: one_line(v) if isinstance(v, str) else v for k, v in fp.items()}}
    return {**header, "path": str(path)}


class _Collect(ProblemLog):
    """Collects [line, message] pairs of one file without emitting them (they are replayed, with the
    path as given, by `load`, also when the file's results come from the cache)."""

    def __init__(self):
        super().__init__(emit=False)
        self.items: list = []

    def __call__(self, path: Path, line: Optional[int], message: str) -> None:
        self.items.append([line, message])


def _row_dicts(recs, rows: list, fpv: dict) -> list:
    """The kept row records as flat dicts with the machine fingerprint and the point's commit time."""
    commit_time = {p["point_id"]: p.get("recorded_at") for p in recs.points}
    out = []
    for r in rows:
        d = {k: v for k, v in r.items() if k not in ("kind", "attempt", "_line")}
        d.update(fpv)
        t = commit_time.get(r["point_id"])
        d["recorded_at"] = t if isinstance(t, str) and t else fpv["recorded_at"]
        out.append(d)
    return out


def parse_file(path: Path):
    """One run file read, validated and reduced to its last committed attempts: a cache.Entry with
    its rows and timelines. The rows are judged here, once per run: `disturbed` and
    `disturbed_reason` set together by the current rule (results.rules.noise), replacing what was recorded
    (a run recorded under an older rule must not show a flag and a reason that disagree)."""
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
        df = noise.mark_disturbed(_frame(_row_dicts(recs, rows, fpv)))
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
    """Load run files (or every run file under folders). Never raises for a file's content (nor
    its name, nor a subfolder that cannot be read: each is a warning); FileNotFoundError only for a
    path that does not exist; ValueError (paths.SettingError) for a cache folder that cannot be used or lies inside a
    folder being loaded. `cache`: None (the default folder, results/loading/cache.py), a folder, or False."""

    cache_dir = _cache_dir(cache, paths, default)
    log = ProblemLog()
    files = run_files(paths, default, log)
    bundle = None
    if cache_dir is not None and files:
        keys = [_cache.file_key(p) for p in files]
        bundle = _cache.read_bundle(cache_dir, files, keys) if None not in keys else None
    entries, table = bundle if bundle is not None else (_entries(files, cache_dir), None)
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
            headers.append(_shown_header(entry.header, path))
        parts.append(entry.rows)
        source.add(entry.run_id, _timeline_loader(path, entry, cache_dir))
    if bundle is None:
        table = _concat_tables(parts)
        if table is not None and cache_dir is not None:
            _cache.write_bundle(cache_dir, files, entries, table)
    rows_df = _assemble(parts, table)
    base_cols = list(schema.ROW_COLUMNS) + list(schema.FINGERPRINT_COLUMNS)
    rows_df = rows_df[base_cols + [c for c in rows_df.columns if c not in base_cols]]
    rows_df.attrs[noise.JUDGED_BY] = noise.RULE_VERSION  # every file's rows were judged by it (parse_file)
    return Loaded(rows_df, source, headers, log.messages)
