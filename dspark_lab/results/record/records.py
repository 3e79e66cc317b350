"""Reading one run file: every record parsed and validated, the last committed attempt of each point.

stdlib only (the store reads headers through it to resume a run without pandas). The rules, each
problem a DataWarning naming file:line, are results/loading/load.py's (its docstring lists them).
"""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from dspark_lab.results.record import schema
from dspark_lab.results.record.regular_files import RUN_FILE_LIMIT, read_regular
from dspark_lab.results.record.rows import STATUSES, row_problems

RUN_SUFFIX = ".jsonl"
KINDS = ("header", "row", "timeline", "point")
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


class ProblemLog:
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
    for key in ("fingerprint", "sweep", "host_baseline"):  # host_baseline: results.rules.noise.BASELINE_HEADER
        if rec.get(key) is not None and not isinstance(rec.get(key), dict):
            out.append(f"{key} must be an object")
    for key in ("run_kind", "launcher", "recording_id"):  # labels and recordings are built from these
        if rec.get(key) is not None and not isinstance(rec.get(key), str):
            out.append(f"{key} must be a string")
    dispatch = rec.get("dispatch")
    if dispatch is not None and not isinstance(dispatch, str) \
            and not (isinstance(dispatch, list) and all(isinstance(d, str) for d in dispatch)):
        out.append(f"dispatch must be a string or a list of strings, got {_shown(dispatch)}")
    fp = rec.get("fingerprint") or {}
    if isinstance(fp, dict):
        for k in ("gpu", "driver", "cuda", "torch"):
            v = fp.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (str, int, float))):
                out.append(f"fingerprint.{k} must be a string")
    return out


def _shown(value) -> str:
    """A recorded value as a message shows it: escaped (ascii) and cut to 40 characters."""
    return ascii(value)[:40]


def _segment_ok(seg) -> bool:
    """[lane, part, start_ms, end_ms, label]: three strings and two finite numbers (JSON-decoded, so
    exact types; a bool is not a number)."""
    if type(seg) is not list or len(seg) != 5:
        return False
    lane, part, start, end, label = seg
    return (type(lane) is str and type(part) is str and type(label) is str
            and type(start) in (int, float) and type(end) in (int, float)
            and math.isfinite(start) and math.isfinite(end))


# A JSON escape of a UTF-16 surrogate (\ud800-\udfff): paired ones decode to one character, a lone
# one to a string that is not text (pyarrow, and so pandas' string columns, refuse it).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_only(value):
    """`value` with every lone surrogate in its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_text_only(v) for v in value]
    if isinstance(value, dict):
        return {_text_only(k): _text_only(v) for k, v in value.items()}
    return value


def _parse(raw: bytes, lineno: int, last: bool, out: FileRecords, log: ProblemLog) -> Optional[dict]:
    """One line as a record of a known kind, else None (logged)."""
    path = out.path
    try:
        rec = json.loads(raw.decode("utf-8"))
        if _SURROGATE_ESCAPE.search(raw):
            rec = _text_only(rec)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        why = "truncated record (an interrupted write?)" if last and not out.ends_with_newline else "corrupted record"
        log(path, lineno, f"{why}, skipped ({e.__class__.__name__}: {str(e)[:80]})")
        return None
    if not isinstance(rec, dict) or rec.get("kind") not in KINDS:
        kind = rec.get("kind") if isinstance(rec, dict) else type(rec).__name__
        # ascii(): whatever the line holds reaches a terminal or a report only as \xNN escapes.
        log(path, lineno, f"record of unknown kind {_shown(str(kind)[:20])}, skipped (known: {', '.join(KINDS)})")
        return None
    return rec


def _take_header(out: FileRecords, rec: dict, lineno: int, log: ProblemLog) -> None:
    """Keep the header, or mark the whole file unreadable (wrong schema version or shape)."""
    if out.header is not None or out.header_line is not None:
        log(out.path, lineno, "a second header record, skipped")
        return
    out.header_line = lineno
    try:
        check_version(rec, out.path)
    except SchemaVersionError as e:
        out.unreadable = str(e).split(": ", 1)[1]
        log(out.path, lineno, out.unreadable + "; file skipped")
        return
    problems = header_problems(rec)
    if problems:
        out.unreadable = "header of the wrong shape (" + "; ".join(problems) + ")"
        log(out.path, lineno, out.unreadable + "; file skipped")
        return
    out.header = rec


def _take_row(out: FileRecords, rec: dict, lineno: int, log: ProblemLog, seen: dict) -> None:
    problems = row_problems(rec)
    if not isinstance(rec.get("attempt"), (str, type(None))):
        problems.append("attempt must be a string")
    if problems:
        log(out.path, lineno, "row skipped: " + "; ".join(problems[:3]))
        return
    # A row is one trial of one strategy at one point, on one rank of one rank case.
    key = (rec.get("attempt"), rec["point_id"], rec["strategy"], rec.get("trial"),
           rec.get("rank"), rec.get("rank_case"), rec.get("dispatch"))
    if key in seen:
        log(out.path, lineno, f"duplicate of the row on line {seen[key]}, skipped")
        return
    seen[key] = lineno
    rec["_line"] = lineno
    out.rows.append(rec)


def _take_timeline(out: FileRecords, rec: dict, lineno: int, log: ProblemLog) -> None:
    if not isinstance(rec.get("point_id"), str) or not isinstance(rec.get("segments"), list) \
            or not isinstance(rec.get("strategy"), (str, type(None))):
        log(out.path, lineno, "timeline record without point_id, strategy or segments list, skipped")
        return
    bad = [i for i, s in enumerate(rec["segments"]) if not _segment_ok(s)]
    if bad:
        log(out.path, lineno, f"timeline: {len(bad)} segment(s) not [lane, part, start_ms, end_ms, label], skipped")
        rec = {**rec, "segments": [s for i, s in enumerate(rec["segments"]) if i not in set(bad)]}
    out.timelines.append(rec)


def _take_point(out: FileRecords, rec: dict, lineno: int, log: ProblemLog) -> None:
    n_rows = rec.get("n_rows")
    if not isinstance(rec.get("point_id"), str) or rec.get("status") not in STATUSES \
            or not (n_rows is None or (isinstance(n_rows, int) and not isinstance(n_rows, bool))):
        log(out.path, lineno, "point record without a valid point_id, status or n_rows, skipped")
        return
    rec["_line"] = lineno
    out.points.append(rec)


def _lines(out: FileRecords, log: ProblemLog) -> Optional[list]:
    """The file's lines (BOM stripped), or None when it cannot be read (marked unreadable)."""
    try:
        data = read_regular(out.path, RUN_FILE_LIMIT)
    except OSError as e:
        out.unreadable = f"cannot read it ({e.strerror or e})"
        log(out.path, None, out.unreadable + ", skipped")
        return None
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    out.ends_with_newline = data.endswith(b"\n") or not data
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def read_file(path: Path, log: Optional[ProblemLog] = None) -> FileRecords:
    """Parse and validate one run file's records (see the module's rules)."""
    log = log or ProblemLog()
    out = FileRecords(path)
    lines = _lines(out, log)
    if lines is None:
        return out
    seen_rows: dict[tuple, int] = {}
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        rec = _parse(raw, lineno, lineno == len(lines), out, log)
        if rec is None:
            continue
        kind = rec["kind"]
        if kind == "header":
            _take_header(out, rec, lineno, log)
            if out.unreadable is not None:
                return out
        elif kind == "row":
            _take_row(out, rec, lineno, log, seen_rows)
        elif kind == "timeline":
            _take_timeline(out, rec, lineno, log)
        else:
            _take_point(out, rec, lineno, log)
    if out.header is None and out.unreadable is None and lines:
        log(path, 1, "no readable header record; machine fingerprint unknown for its rows")
    return out


def _say_uncommitted(recs: FileRecords, uncommitted: dict, log) -> None:
    """Rows no commit record names: of an interrupted or torn write, or (their attempt committed
    under another point_id) rows whose point_id was changed after they were written."""
    attempts = {p.get("attempt"): p["point_id"] for p in recs.points if isinstance(p.get("attempt"), str)}
    counts: dict[str, int] = {}
    for (pid, attempt), n in uncommitted.items():
        if attempt in attempts:
            log(recs.path, None, f"point {pid[:40]}: {n} row(s) written in the commit of point "
                                 f"{attempts[attempt][:40]} (attempt {str(attempt)[:20]}) but naming another "
                                 "point_id (edited after it was written?), not loaded")
        else:
            counts[pid] = counts.get(pid, 0) + n
    for pid, n in counts.items():
        log(recs.path, None, f"point {pid[:40]}: {n} row(s) without a commit record (an interrupted or torn "
                             "write), not loaded")


def select_attempts(recs: FileRecords, log: Optional[ProblemLog] = None) -> tuple[list[dict], list[dict]]:
    """Per point, the rows and timelines of its last committed attempt; uncommitted rows are left out."""
    log = log or ProblemLog(emit=False)
    committed: dict[str, dict] = {}
    for p in recs.points:
        committed[p["point_id"]] = p
    uncommitted: dict[tuple, int] = {}
    kept_rows = []
    for r in recs.rows:
        c = committed.get(r["point_id"])
        if c is None:
            key = (r["point_id"], r.get("attempt"))
            uncommitted[key] = uncommitted.get(key, 0) + 1
        elif r.get("attempt") == c.get("attempt"):
            kept_rows.append(r)
    _say_uncommitted(recs, uncommitted, log)
    for pid, c in committed.items():
        n_found = sum(1 for r in kept_rows if r["point_id"] == pid)
        if isinstance(c.get("n_rows"), int) and n_found < c["n_rows"]:
            log(recs.path, c["_line"], f"point {pid[:40]}: {n_found} of its {c['n_rows']} committed rows are "
                                       "readable; the readable ones are loaded")
    tls = [t for t in recs.timelines
           if t["point_id"] in committed and t.get("attempt") == committed[t["point_id"]].get("attempt")]
    return kept_rows, tls
