"""The record of one inspected step (`dspark-lab inspect`): its format, reading and writing (the
rows and PointView that let the kit's own figures draw it are results.viewmodels.inspect_view).

A record is one JSON object:
    {"kind": "dspark_inspect", "schema": 1, "target", "label", "recorded_at", "device",
     "fingerprint": {...}, "options": {"steps", "trials", "warmup"},
     "counts": {...per step...}, "parts": {...ms per profiled step...},
     "waits": {"charges": JSON per kind of wait, "note": the waits charged nothing and why} (absent in
     records from before the kinds of wait were named),
     "trials": [step_ms, ...] (profiler-free, one per trial), "step_ms", "step_ms_lo", "step_ms_hi",
     "sites": [{"site", "per_step", "exact", "host_blocked_ms", "gpu_idle_ms", "code", "allowed"}],
     "timeline": [[lane, part, start_ms, end_ms, label], ...], "guard": null | {...},
     "pair": null | {"id", "role"}}
`pair` is set when two steps were measured together, their trials interleaved round by round
(`dspark-lab diff` of two targets): only then are their trials paired in a comparison.
Torch-free: recorded steps are read and drawn without it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Union

from dspark_lab.results.record.output import write_text_safely
from dspark_lab.results.record.regular_files import read_regular_text
from dspark_lab.results.record.paths import default_data_dir

KIND, SCHEMA = "dspark_inspect", 1
REQUIRED = ("target", "label", "device", "fingerprint", "options", "counts", "parts", "trials", "sites", "timeline")
SITE_KEYS = ("site", "per_step", "exact", "host_blocked_ms", "gpu_idle_ms", "code")
POINT_ID = "inspect"
NO_EXAMPLE = ("no recorded example yet: data/inspect/ holds no recorded diff of a gallery case and its fix "
              "(studies/inspect/katas_and_diffs.py records them on a GPU)")


class RecordError(ValueError):
    """A file that is not a valid inspect record; the message names the file and the field."""


def validate(rec: object, source: str = "record") -> dict:
    if not isinstance(rec, dict):
        raise RecordError(f"{source}: an inspect record must be a JSON object; got {type(rec).__name__}")
    if rec.get("kind") != KIND:
        raise RecordError(f"{source}: kind must be {KIND!r}; got {rec.get('kind')!r}")
    if rec.get("schema") != SCHEMA:
        raise RecordError(f"{source}: schema must be {SCHEMA}; got {rec.get('schema')!r}")
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise RecordError(f"{source}: missing field(s) {', '.join(missing)}")
    if not isinstance(rec["trials"], list) or not rec["trials"]:
        raise RecordError(f"{source}: trials must be a non-empty list of step times (ms)")
    if not isinstance(rec["parts"], dict):
        raise RecordError(f"{source}: parts must be an object of numbers (ms per profiled step)")
    for k, v in rec["parts"].items():  # numbers only: the waits by kind are text, in "waits"
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise RecordError(f"{source}: parts.{k} must be a number (ms per profiled step) or null; got {type(v).__name__}")
    for i, s in enumerate(rec["sites"]):
        bad = [k for k in SITE_KEYS if k not in s]
        if bad:
            raise RecordError(f"{source}: sites[{i}] lacks {', '.join(bad)}")
    return rec


def to_json(rec: dict) -> str:
    # NaN (a count not measurable without CUDA) is written as null: JSON has no NaN.
    return json.dumps(_nan_to_none(rec), indent=1)


def _nan_to_none(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {k: _nan_to_none(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_nan_to_none(x) for x in v]
    return v


def save(rec: dict, path: Union[str, Path]) -> Path:
    """Write the record (never over a run file; see results.record.output)."""
    return write_text_safely(Path(path), to_json(validate(rec)))


def load(path: Union[str, Path]) -> dict:
    p = Path(path)
    try:
        rec = json.loads(read_regular_text(p))  # a FIFO or a device: refused, never waited on
    except OSError as e:
        raise RecordError(f"{p}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        raise RecordError(f"{p}: not JSON ({str(e)[:200]})") from None
    except RecursionError:
        raise RecordError(f"{p}: not an inspect record (JSON nested too deeply)") from None
    rec = validate(rec, str(p))
    rec["source"] = str(p)
    return rec


def inspect_dir(data_dir=None) -> Path:
    """Recorded inspect records and diffs: data/inspect/ (of $DSPARK_DATA when set)."""
    return Path(data_dir) / "inspect" if data_dir is not None else default_data_dir() / "inspect"


def recorded_pair(case: str = "", data_dir=None):
    """The newest recorded diff pair (before, after) in data/inspect/ (files
    <gpu>-diff-<case>-<date>-before.json and -after.json; `case` narrows it), or None."""
    folder = inspect_dir(data_dir)
    pattern = f"*-diff-{case}-*-before.json" if case else "*-diff-*-before.json"
    pairs = []
    for b in folder.glob(pattern) if folder.is_dir() else []:
        a = b.with_name(b.name[: -len("-before.json")] + "-after.json")
        if a.is_file():
            before = load(b)
            pairs.append((before.get("recorded_at") or "", before, load(a)))
    if not pairs:
        return None
    _, before, after = max(pairs, key=lambda p: p[0])
    return before, after
