"""Frame helpers every view shares: run keys and names, machine fingerprints, timeline segments.

Torch-free and plotly-free: figures, the panel's backends and the report read rows through these,
so that one rule names a run or flattens a timeline everywhere.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dspark_lab.results.loading.load import TIMELINE_COLUMNS as LOADED_TIMELINE_COLUMNS
from dspark_lab.results.rules.labels import gpu_name
from dspark_lab.results.facts.strategy_table import default_strategy  # noqa: F401 - the backends and the live run read it here

# One definition of a timeline frame's columns: the loader's (run_id, point_id, strategy, then a
# segment's fields). It lives in load because load cannot import this module (frames -> runs -> load).
TIMELINE_COLUMNS = tuple(c for c in LOADED_TIMELINE_COLUMNS if c != "run_id")  # a run file's own timelines
SEGMENT_FIELDS = TIMELINE_COLUMNS[TIMELINE_COLUMNS.index("strategy") + 1:]  # lane, part, start_ms, end_ms, label


def run_key(rows: pd.DataFrame) -> pd.Series:
    return rows["run_id"].astype(str) if "run_id" in rows.columns else pd.Series("", index=rows.index)


def run_names(rows: pd.DataFrame) -> dict:
    """run_id -> the name drawn for it: the `run_label` column (results.Runs sets it), else the run
    id; a label shared by two runs gets its run id added, so runs are never drawn on one spot."""
    keys = run_key(rows)
    labels = rows["run_label"].astype(str) if "run_label" in rows.columns else keys
    names = dict(zip(keys, labels))
    counts = pd.Series(list(names.values())).value_counts()
    return {k: (v if counts[v] == 1 else f"{v} [{k}]") for k, v in names.items()}


def _date(recorded_at) -> str:
    s = "" if recorded_at is None or (isinstance(recorded_at, float) and np.isnan(recorded_at)) else str(recorded_at)
    return s[:10]


def fingerprints(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct (gpu, driver, torch, date) in `rows`, in first-seen order."""
    cols = [c for c in ("gpu", "driver", "cuda", "torch", "recorded_at", "run_id") if c in rows.columns]
    if rows.empty or "gpu" not in cols:
        return pd.DataFrame(columns=["gpu", "driver", "torch", "date"])
    fp = rows[cols].copy()
    fp["date"] = fp["recorded_at"].map(_date) if "recorded_at" in fp else ""
    for c in ("driver", "torch"):
        if c not in fp:
            fp[c] = ""
    fp["gpu"] = fp["gpu"].map(gpu_name)
    return fp[["gpu", "driver", "torch", "date"]].astype(str).drop_duplicates().reset_index(drop=True)


def fingerprint_label(rows: pd.DataFrame) -> str:
    """"NVIDIA H200 · driver 580.95 · torch 2.11.0+cu130 · 2026-05-01" (joined with "; " for several)."""
    fp = fingerprints(rows)
    if fp.empty:
        return "no recorded machine fingerprint in these rows"
    return "; ".join(f"{r.gpu} · driver {r.driver} · torch {r.torch} · {r.date}" if r.driver.lower() != "none"
                     else f"{r.gpu} · torch {r.torch} · {r.date}" for r in fp.itertuples())


def flatten_timelines(timelines) -> pd.DataFrame:
    """Timeline records or a DataFrame with a nested `segments` column -> one row per segment."""
    df = timelines if isinstance(timelines, pd.DataFrame) else pd.DataFrame(list(timelines or []))
    if df.empty and "segments" not in df.columns:
        return pd.DataFrame(columns=list(TIMELINE_COLUMNS)).astype({"start_ms": float, "end_ms": float})
    if "segments" not in df.columns:
        return df
    keep = [c for c in df.columns if c not in ("segments", "kind")]
    out = []
    for rec in df.to_dict("records"):
        for seg in rec.get("segments") or []:
            lane, part, s, e, label = (list(seg) + [""] * 5)[:5]
            out.append({**{k: rec.get(k) for k in keep}, "lane": lane, "part": part, "start_ms": float(s),
                        "end_ms": float(e), "label": label})
    return pd.DataFrame(out, columns=keep + list(SEGMENT_FIELDS)).astype({"start_ms": float, "end_ms": float})
