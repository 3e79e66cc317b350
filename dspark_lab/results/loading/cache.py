"""A derived columnar cache of run files (Parquet through pyarrow): loading 500 runs in seconds.

The JSON-lines run files stay the source of truth. Per run file, the cache holds what loading that
file gave (its rows after validation and attempt selection, the disturbed verdicts, its header, the
problems met, each with its line) and, in a second file, its timeline segments, read only when a
view asks for them. The cache is verified, never trusted. An entry is used only when

    its key matches the run file as it is now: resolved path, size, modification time (ns), the
        SHA-256 of the file's bytes (an edit that restores size and time is still seen),
        LOADER_VERSION, the schema versions read, and the disturbed-trial rule's version
        (results.rules.noise.RULE_VERSION: the rows hold its verdict);
    the entry's own bytes match the keyed hash (HMAC-SHA-256) in its sidecar (<entry>.sha256,
        written after it), keyed by a secret of this user kept outside the cache folder
        ($XDG_CONFIG_HOME/dspark-lab/cache-key, else ~/.config/dspark-lab/cache-key, mode 0600): an
        entry rewritten or cut by anything but this module, or planted in a shared $DSPARK_CACHE
        with a hash of its own, is rebuilt;
    and its row count is the one recorded in its metadata (a bundle: the sum over its files).

Otherwise the run file is parsed again and the entry rewritten; a file modified in the last RACY_S
seconds is not cached yet (its timestamp may not show a change to come). An entry that cannot be
read (corrupt, truncated, written by another pyarrow, of another key, a FIFO or a device, larger
than regular_files.CACHE_ENTRY_LIMIT) is ignored and rebuilt. Without a usable secret (the key file
cannot be made or read, or is another user's or readable by others) there is no cache.
Entries are written to a temporary name and renamed, so a reader never sees half an entry.

Loading a set of files also writes a bundle: every kept row of that set in one Parquet file, with
each file's key and what its loading said. A later load of the same paths reads the bundle in one go
when every file's key still matches (500 runs: one read instead of 500), else the per-file entries.

Where: $DSPARK_CACHE (checked once by results.record.paths.cache_setting: a usable folder path, or off),
else $XDG_CACHE_HOME/dspark-lab/runs, else ~/.cache/dspark-lab/runs; never inside or equal to a
folder being loaded, nor the folder of a run file being loaded (ValueError naming DSPARK_CACHE).
DSPARK_CACHE=off (or 0, none, no, false) turns it off. Without pyarrow there is no cache: loading
gives the same rows, parsed every time.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from dspark_lab.results.rules import noise
from dspark_lab.results.record import schema
from dspark_lab.results.record.regular_files import CACHE_ENTRY_LIMIT, SIDECAR_LIMIT, open_regular, read_regular
from dspark_lab.results.record.paths import CACHE_ENV as ENV, OFF, SettingError, cache_setting  # noqa: F401 - OFF: its values

if TYPE_CHECKING:
    import pandas as pd

# Bump when what an entry holds changes meaning (load.py's rules, the columns); a change of the
# disturbed-trial rule is keyed on its own (noise.RULE_VERSION).
LOADER_VERSION = 4
_META = b"dspark_cache"
_JSON_PREFIX = "__json__"  # an extra column of mixed types, stored as JSON text under this prefix
RACY_S = 2.0  # see racy()
_clock = time.time  # the clock racy() reads; tests give it a fake one instead of racing the real one


def available() -> bool:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return secret() is not None


KEY_FILE = Path("dspark-lab") / "cache-key"
_secrets: dict = {}  # key file -> its secret, read once per process


def key_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base).expanduser() / KEY_FILE


def secret() -> Optional[bytes]:
    """This user's cache secret (made on first use), or None when it cannot be made or trusted."""
    path = key_file()
    if path not in _secrets:
        _secrets[path] = _read_or_make_secret(path)
    return _secrets[path]


def _read_or_make_secret(path: Path) -> Optional[bytes]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not os.path.lexists(path):
            _make_secret(path)
        with open_regular(path) as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o077 or os.path.islink(path):
                return None  # another user's, or one others can read: its hashes prove nothing
            text = f.read(SIDECAR_LIMIT).strip()
    except OSError:
        return None
    return text if len(text) >= 32 else None


def _make_secret(path: Path) -> None:
    """Written whole beside it, then linked into place: a process racing this one reads the winner's, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)


def _mac(data: bytes) -> str:
    return hmac.new(secret() or b"", data, hashlib.sha256).hexdigest()


def default_dir() -> Optional[Path]:
    """The cache folder as configured, or None when turned off."""
    setting = cache_setting()
    if setting is not False:
        return setting
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "dspark-lab" / "runs"


def check_outside(cache_dir: Path, folders) -> None:
    """ValueError when the cache folder lies inside a folder being loaded (its files would sit among
    the runs); the loader reads only *.jsonl, but a runs folder holds run files and nothing derived."""
    c = Path(os.path.realpath(cache_dir.expanduser()))  # realpath: a symlink loop is no RuntimeError here
    for given in folders:
        f = Path(os.path.realpath(Path(given).expanduser()))
        if f.is_file():  # one run file: its folder is a runs folder too
            f = f.parent
        if f.is_dir() and (c == f or c.is_relative_to(f)):
            raise SettingError(f"{ENV}={cache_dir} lies inside {f}, a folder of run files being loaded; "
                             f"choose a folder outside it (default ~/.cache/dspark-lab/runs) or {ENV}=off")


def _sha256_of_file(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path) as f:  # a FIFO or a device in place of a run file: OSError, never a hang
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_key(path: Path) -> Optional[dict]:
    """What an entry of `path` must match; None when the file cannot be read now."""
    try:
        st = path.stat()
        digest = _sha256_of_file(path)
    except OSError:
        return None
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest,
            "loader": LOADER_VERSION, "schemas": list(schema.READABLE_SCHEMA_VERSIONS),
            "disturbed_rule": noise.RULE_VERSION}


def racy(key: Optional[dict]) -> bool:
    """A file modified within RACY_S of now may change again without its size or time changing
    (timestamps are coarse); like git's racy-clean rule, such a file is parsed but not cached."""
    return key is not None and _clock() - key["mtime_ns"] / 1e9 < RACY_S


def _stem(cache_dir: Path, key: dict) -> Path:
    # os.fsencode: a file name that is not valid UTF-8 arrives with surrogates, which .encode() refuses.
    digest = hashlib.sha256(os.fsencode(key["path"])).hexdigest()[:24]
    readable = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in Path(key["path"]).stem[:60])
    return cache_dir / f"{readable}-{digest}"


@dataclass
class Entry:
    """What loading one run file gave; `rows` is a pyarrow Table (cache) or a DataFrame (parsed)."""

    key: Optional[dict]
    header: Optional[dict] = None
    header_line: Optional[int] = None
    unreadable: Optional[str] = None
    read_problems: list = field(default_factory=list)  # [line or None, message] from reading
    select_problems: list = field(default_factory=list)  # from choosing attempts (only if the run is kept)
    run_id: str = ""
    rows: object = None
    n_rows: int = 0
    timelines: Optional["pd.DataFrame"] = None  # segments, while in memory


def _meta(entry: Entry) -> dict:
    return {"key": entry.key, "header": entry.header, "header_line": entry.header_line,
            "unreadable": entry.unreadable, "read_problems": entry.read_problems,
            "select_problems": entry.select_problems, "run_id": entry.run_id, "n_rows": entry.n_rows}


def _json_columns(df: "pd.DataFrame") -> list:
    """Object columns holding anything but str or bool (mixed types, lists, dicts): kept as JSON."""
    out = []
    for c in df.columns:
        if isinstance(c, str) and c.startswith(_JSON_PREFIX):
            out.append(c)  # a recorded column with the prefix is encoded too, so decoding is unambiguous
            continue
        if df[c].dtype != object:
            continue
        vals = [v for v in df[c] if v is not None and not (isinstance(v, float) and v != v)]
        if vals and not all(isinstance(v, bool) for v in vals) and not all(isinstance(v, str) for v in vals):
            out.append(c)
    return out


def to_table(df: "pd.DataFrame"):
    """A DataFrame of rows as a pyarrow Table, mixed-type columns as JSON text (decoded by `from_table`)."""
    import pyarrow as pa

    enc = df.copy()
    for c in _json_columns(df):
        enc[c] = [None if v is None or (isinstance(v, float) and v != v) else json.dumps(v) for v in df[c]]
        enc = enc.rename(columns={c: _JSON_PREFIX + c})
    return pa.Table.from_pandas(enc, preserve_index=False)


def from_table(table) -> "pd.DataFrame":
    """Rows back from one Table (or several concatenated): every column named with the prefix is the
    JSON text of the column named without it (to_table encodes every such name), decoded in place;
    where a plain column of that name exists too (files concatenated), the decoded values fill it."""
    df = table.to_pandas()
    encoded = [c for c in df.columns if c.startswith(_JSON_PREFIX)]
    if not encoded:
        return df
    out = df.drop(columns=encoded)
    for c in encoded:
        name = c[len(_JSON_PREFIX):]
        dec = df[c].map(lambda v: json.loads(v) if isinstance(v, str) else None).astype(object)
        out[name] = out[name].astype(object).where(df[c].isna(), dec) if name in out.columns else dec
    return out


def read(cache_dir: Path, path: Path, key: dict) -> Optional[Entry]:
    """The entry of `path` when present, verified and of this key, else None (missing, stale,
    tampered or unreadable)."""
    got = _read_verified(Path(f"{_stem(cache_dir, key)}.rows.parquet"))
    if got is None:
        return None
    table, meta = got
    if meta.get("key") != key or meta.get("n_rows") != table.num_rows:
        return None
    table = table.replace_schema_metadata(None)
    return Entry(key=key, header=meta.get("header"), header_line=meta.get("header_line"),
                 unreadable=meta.get("unreadable"), read_problems=meta.get("read_problems") or [],
                 select_problems=meta.get("select_problems") or [], run_id=meta.get("run_id") or "",
                 rows=table, n_rows=table.num_rows)


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _read_verified(target: Path) -> Optional[tuple]:
    """(table, its metadata) of an entry whose bytes match its sidecar's SHA-256, else None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        want = read_regular(_sidecar(target), SIDECAR_LIMIT).strip().decode("ascii")
        data = read_regular(target, CACHE_ENTRY_LIMIT)
        if secret() is None or not hmac.compare_digest(_mac(data), want):
            return None  # rewritten, cut, half-replaced or planted: rebuilt from the run files
        table = pq.read_table(pa.BufferReader(data))
        meta = json.loads((table.schema.metadata or {})[_META])
    except TimeoutError:  # an OSError, but an alarm's: the caller's, never swallowed
        raise
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):  # unreadable: rebuilt from the run file
        return None
    return (table, meta) if isinstance(meta, dict) else None


def atomic_bytes(target: Path, data: bytes) -> None:
    """`data` as the whole of `target`: written beside it, then renamed over it (views/first_view.py too)."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=target.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _atomic_write(target: Path, table) -> None:
    """The entry, then its sidecar (the keyed hash of the entry's bytes): a reader between the two sees
    a mismatch and rebuilds, never a wrong entry."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    atomic_bytes(target, data)
    atomic_bytes(_sidecar(target), _mac(data).encode())


def _write_failures() -> tuple:
    import pyarrow as pa

    return (OSError, ValueError, TypeError, OverflowError, RecursionError, pa.ArrowException)


def write(cache_dir: Path, entry: Entry, rows_df: Optional["pd.DataFrame"]) -> Optional[object]:
    """Write an entry (timelines first, rows last: the rows file is the commit). Returns the rows
    Table written, or None when the cache could not be written (the load goes on without it)."""
    import pyarrow as pa

    if entry.key is None:
        return None
    stem = _stem(cache_dir, entry.key)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tl = entry.timelines
        tl_table = pa.Table.from_pandas(tl.drop(columns=["run_id"], errors="ignore"), preserve_index=False) \
            if tl is not None else pa.table({})
        _atomic_write(Path(f"{stem}.timelines.parquet"),
                      tl_table.replace_schema_metadata({_META: json.dumps({"key": entry.key})}))
        table = to_table(rows_df) if rows_df is not None else pa.table({})
        entry.n_rows = table.num_rows
        table = table.replace_schema_metadata({_META: json.dumps(_meta(entry), default=str)})
        _atomic_write(Path(f"{stem}.rows.parquet"), table)
        return table.replace_schema_metadata(None)
    except TimeoutError:  # an alarm's, the caller's
        raise
    except _write_failures():  # a read-only or full cache folder, a value pyarrow cannot hold: load without it
        return None


def read_timelines(cache_dir: Path, key: dict) -> Optional["pd.DataFrame"]:
    """The timeline segments of the entry of this key, or None (missing, stale, tampered or unreadable)."""
    got = _read_verified(Path(f"{_stem(cache_dir, key)}.timelines.parquet"))
    if got is None or got[1].get("key") != key:
        return None
    return got[0].replace_schema_metadata(None).to_pandas()


# -- the bundle: one load's rows in one file ----------------------------------------------------

def bundle_path(cache_dir: Path, files) -> Path:
    """The bundle of this list of run files (one per list: a changed list overwrites it)."""
    digest = hashlib.sha256(b"\n".join(os.fsencode(Path(f).resolve()) for f in files)).hexdigest()[:24]
    return cache_dir / f"bundle-{digest}.parquet"


def read_bundle(cache_dir: Path, files, keys: list) -> Optional[tuple]:
    """(entries without rows, the kept rows as one Table) when the bundle of `files` exists and every
    file's key matches; else None."""
    got = _read_verified(bundle_path(cache_dir, files))
    if got is None:
        return None
    table, meta = got
    if meta.get("loader") != LOADER_VERSION or [e.get("key") for e in meta.get("entries", [])] != keys:
        return None
    entries = [Entry(key=e["key"], header=e.get("header"), header_line=e.get("header_line"),
                     unreadable=e.get("unreadable"), read_problems=e.get("read_problems") or [],
                     select_problems=e.get("select_problems") or [], run_id=e.get("run_id") or "",
                     n_rows=e.get("n_rows", 0)) for e in meta["entries"]]
    if sum(e.n_rows for e in entries) != table.num_rows:
        return None  # a bundle with rows added or cut
    return entries, table.replace_schema_metadata(None)


def write_bundle(cache_dir: Path, files, entries: list, table) -> bool:
    """Write the bundle of `files`; False when it cannot be written (loading goes on without it)."""
    if any(e.key is None for e in entries):
        return False
    meta = {"loader": LOADER_VERSION, "entries": [{**_meta(e), "n_rows": e.n_rows} for e in entries]}
    try:
        _atomic_write(bundle_path(cache_dir, files),
                      table.replace_schema_metadata({_META: json.dumps(meta, default=str)}))
    except TimeoutError:
        raise
    except _write_failures():
        return False
    return True
