"""The recorded worked investigation (notebook 06): a decode step inspected, fixed, compared and
guarded on a GPU, for readers without one. Torch-free.

One JSON object under data/investigation/ (or the file in $DSPARK_INVESTIGATION_DATA):
    {"kind": "dspark_investigation", "schema": 1, "recorded_at", "fingerprint",
     "before": inspect record (the slow step), "after": inspect record (the fixed step),
     "guard": {"allow": [...], "before": [line not allowed, ...], "after": [...], "note"}}
`before` and `after` were measured together, their trials interleaved (`pair`): the diff is paired.
Optional (studies/field/record_investigation.py adds them): "races", the race check of the fixed step
(measure.races.check's report), and "owner_forms", the two ways of finding each row's owner timed
alone: {"calls", "rows", "bound", "equal", "slow_ms_per_call", "fixed_ms_per_call"}.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union

from dspark_lab.results.record import inspect_record
from dspark_lab.results.record.output import write_text_safely
from dspark_lab.results.record.paths import default_data_dir

KIND, SCHEMA = "dspark_investigation", 1
DATA_ENV = "DSPARK_INVESTIGATION_DATA"
FOLDER = "investigation"
NO_RECORD = ("no recorded investigation: data/investigation/ holds none (studies/field/record_investigation.py "
             f"records one on a GPU; ${DATA_ENV} may name one)")


OWNER_FORM_KEYS = ("calls", "rows", "bound", "equal", "slow_ms_per_call", "fixed_ms_per_call")


def validate(rec: object, source: str = "investigation") -> dict:
    if not isinstance(rec, dict) or rec.get("kind") != KIND:
        raise ValueError(f"{source}: field 'kind' must be {KIND!r}")
    if rec.get("schema") != SCHEMA:
        raise ValueError(f"{source}: field 'schema' must be {SCHEMA}; got {rec.get('schema')!r}")
    for k in ("before", "after"):
        inspect_record.validate(rec.get(k), f"{source}: {k}")
    g = rec.get("guard")
    if not isinstance(g, dict) or not all(isinstance(g.get(k), list) for k in ("allow", "before", "after")):
        raise ValueError(f"{source}: field 'guard' must hold lists 'allow', 'before' and 'after'")
    if "races" in rec and not (isinstance(rec["races"], dict) and isinstance(rec["races"].get("races"), list)):
        raise ValueError(f"{source}: field 'races' must be a race check's report (a dict with a list 'races')")
    forms = rec.get("owner_forms")
    if forms is not None and not (isinstance(forms, dict) and all(k in forms for k in OWNER_FORM_KEYS)):
        raise ValueError(f"{source}: field 'owner_forms' must hold {', '.join(OWNER_FORM_KEYS)}")
    return rec


def save(rec: dict, path: Union[str, Path]) -> Path:
    return write_text_safely(Path(path), inspect_record.to_json(validate(rec)))


def find(data_dir=None):
    """$DSPARK_INVESTIGATION_DATA, else the newest <data>/investigation/*.json, else None."""
    named = os.environ.get(DATA_ENV)
    if named:
        return Path(named)
    folder = Path(data_dir) / FOLDER if data_dir is not None else default_data_dir() / FOLDER
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return files[-1] if files else None


def load(path: Union[str, Path]) -> dict:
    p = Path(path)
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: not a readable investigation record ({e})") from None
    rec = validate(rec, str(p))
    rec["source"] = str(p)
    return rec


def recorded(data_dir=None):
    """The recorded investigation, or None when there is none."""
    p = find(data_dir)
    return load(p) if p else None


def guard_text(rec: dict) -> str:
    """What the guard with the CI allow-list says of each step."""
    g = rec["guard"]
    if rec["before"]["device"] != "cuda":
        return "guard: " + (g.get("note") or "nothing could be checked without CUDA")
    lines = [f"guard, allow={g['allow']}:"]
    for role in ("before", "after"):
        bad = g[role]
        lines.append(f"  {role} ({rec[role]['label']}): " + (f"FAILS on {'; '.join(bad)}" if bad else "passes"))
    return "\n".join(lines)


def describe(rec, live: bool) -> str:
    """What the notebook shows: measured now on this GPU, or recorded (on which GPU, when, from where)."""
    if rec is None:
        return NO_RECORD
    fp = rec["fingerprint"]
    machine = f"{fp.get('gpu')} (driver {fp.get('driver')}, CUDA {fp.get('cuda')}, torch {fp.get('torch')})"
    if live:
        return f"LIVE: measured now on {machine}"
    return (f"RECORDED: measured on {machine} at {rec.get('recorded_at')}, read from {rec.get('source')}; "
            "nothing below is measured on this machine")


def owner_forms_text(rec) -> str:
    """The two ways of finding each row's owner, timed alone on the recording's GPU, or why not shown."""
    f = (rec or {}).get("owner_forms")
    if not f:
        return "owner forms: not in this record (studies/field/record_investigation.py times them)"
    same = "the same rows" if f["equal"] else "DIFFERENT rows"
    return (f"owner forms, {f['calls']} calls back to back with nothing else queued: repeat_interleave without "
            f"output_size {f['slow_ms_per_call']:.4f} ms per call ({f['rows']} rows, its size read back each call); "
            f"cumsum + searchsorted to the bound {f['fixed_ms_per_call']:.4f} ms per call ({f['bound']} rows); {same} "
            "before the padding")
