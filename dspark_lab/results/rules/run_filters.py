"""The filters of `Runs.select`: which runs match a GPU, versions, dates, a name or run ids.

Each filter no run matches raises ValueError naming it and the recorded values, so a typo in a
notebook or on the command line says what there is to choose from.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Optional

import pandas as pd

from dspark_lab.results.rules.labels import gpu_name
from dspark_lab.results.record.schema import MACHINE_KEYS

_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2}([T ]\d{2}(:\d{2}(:\d{2})?)?)?)?)?$")


def date_text(field: str, value) -> str:
    """A date filter as the ISO prefix it compares with: "2026-11-30", "2026-11", a date or datetime."""
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    text = text.replace(" ", "T")[:19]
    if not _DATE.match(text) or not _on_calendar(text):
        raise ValueError(f"{field} must be a date like 2026-11-30 (or 2026-11, or a datetime), got {value!r:.60}")
    return text


def _on_calendar(text: str) -> bool:
    """A date prefix names a real day and time ("2026-13-45" has the shape, not a month or a day)."""
    try:
        datetime.fromisoformat(text + "0000-01-01T00:00:00"[len(text):])
    except ValueError:
        return False
    return True


def _fail(field, want, values):
    vals = sorted({str(v) for v in values})
    shown = ", ".join(vals[:20]) + (f" … ({len(vals)} in all)" if len(vals) > 20 else "")
    raise ValueError(f"{field}={want!r} matches no recorded run; recorded {field}: {shown}")


def _contains(col_values: pd.Series, want) -> pd.Series:
    return col_values.str.lower().str.contains(str(want).lower(), regex=False)


def _version(col_values: pd.Series, want) -> pd.Series:
    """A version or its prefix at a boundary: "2.11" matches "2.11.0+cu130", not "2.110"."""
    w = str(want)
    return col_values.map(lambda v: v == w or (v.startswith(w) and v[len(w):len(w) + 1] in ".+-_ "))


def _machine_hits(info: pd.DataFrame, wants: dict) -> pd.Series:
    keep = pd.Series(True, index=info.index)
    for col in MACHINE_KEYS:
        want = wants.get(col)
        if want is None:
            continue
        how = _contains if col == "gpu" else _version
        values = info[col].map(gpu_name) if col == "gpu" else info[col]
        hit = how(values, want) | (how(info[col], want) if col == "gpu" else False)
        if not hit.any():
            _fail(col, want, values)
        keep &= hit
    return keep


def _other_hits(info: pd.DataFrame, name, run_id, since, until) -> pd.Series:
    keep = pd.Series(True, index=info.index)
    if name is not None:
        hit = _contains(info["label"], name) | _contains(info["name"], name) | _contains(info["file"], name)
        if not hit.any():
            _fail("name", name, info["label"])
        keep &= hit
    if run_id is not None:
        ids = [run_id] if isinstance(run_id, str) else [str(r) for r in run_id]
        unknown = [r for r in ids if r not in set(info["run_id"])]
        if unknown:
            _fail("run_id", unknown[0], info["run_id"])
        keep &= info["run_id"].isin(ids)
    for field, want in (("since", since), ("until", until)):
        if want is None:
            continue
        w = date_text(field, want)
        day = info["created"].str.slice(0, len(w))
        hit = day >= w if field == "since" else day <= w
        if not hit.any():
            _fail(field, w, info["created"].str.slice(0, 10))
        keep &= hit
    return keep


def choose(info: pd.DataFrame, ranked: list, *, gpu=None, driver=None, cuda=None, torch=None, since=None,
           until=None, name=None, run_id=None, latest_per_machine: bool = False,
           limit: Optional[int] = None) -> list:
    """The run ids (in `ranked` order) of `info` (catalog.run_info) matching every filter given."""
    keep = _machine_hits(info, {"gpu": gpu, "driver": driver, "cuda": cuda, "torch": torch})
    keep &= _other_hits(info, name, run_id, since, until)
    chosen = info[keep]
    if chosen.empty:
        asked = {k: v for k, v in dict(gpu=gpu, driver=driver, cuda=cuda, torch=torch, since=since, until=until,
                                        name=name, run_id=run_id).items() if v is not None}
        raise ValueError("no recorded run matches " + ", ".join(f"{k}={v!r}" for k, v in asked.items())
                         + " together")
    ids = set(chosen["run_id"])
    out = [r for r in ranked if r in ids]
    if latest_per_machine:
        per = set(chosen.iloc[::-1].drop_duplicates(list(MACHINE_KEYS))["run_id"])
        out = [r for r in out if r in per]
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        out = out[:limit]
    return out
