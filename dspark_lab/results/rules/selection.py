"""Choosing rows: successful or failed, measured in one process, quiet, a point, the nearest
recorded point and THE reference point every view leads with (`REFERENCE`, defined once)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ReferencePoint:
    """The one point every view leads with: the sglang_profile workload at batch 8, gamma 4 and the
    largest recorded EP size above 1 (the scalar is consumed only with EP > 1)."""

    workload: str = "sglang_profile"
    batch_size: int = 8
    gamma: int = 4

    def describe(self) -> str:
        return (f"{self.workload}, batch {self.batch_size}, gamma {self.gamma}, the largest recorded EP > 1, "
                "measured in one process; real-rank and predicted runs are shown apart")


REFERENCE = ReferencePoint()

# Rows of the one-process measurement (EP flips the predicate); "real" rows come from rank processes
# and "predicted" rows from results.analyses.ep_predict: neither stands for the reference point.
SEPARATE_EP_MODES = ("real", "predicted")


def one_process(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows measured in one process (no ep_mode recorded, "single" or "predicate_only")."""
    if "ep_mode" not in rows.columns:
        return rows
    return rows[~rows["ep_mode"].isin(SEPARATE_EP_MODES)]


def ok_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows if "status" not in rows.columns else rows[rows["status"] == "ok"]


def failed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.iloc[0:0] if "status" not in rows.columns else rows[rows["status"] != "ok"]


def _is_true(v) -> bool:
    return isinstance(v, (bool, np.bool_)) and bool(v)


def undisturbed(rows: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The rows not marked disturbed (NaN/None = not disturbed), and how many were left out."""
    if "disturbed" not in rows.columns or rows.empty:
        return rows, 0
    col = rows["disturbed"]
    mask = col.to_numpy(bool) if col.dtype == bool else col.map(_is_true).to_numpy(bool)
    return rows[~mask], int(mask.sum())


def point_distance(points: pd.DataFrame, ep_size=None, batch_size=None, gamma=None) -> pd.Series:
    """Distance of each point to the asked settings: log2 steps in each asked dimension, summed."""
    d = pd.Series(0.0, index=points.index)
    for col, want in (("ep_size", ep_size), ("batch_size", batch_size), ("gamma", gamma)):
        if want is not None:
            d = d + (np.log2(points[col].astype(float)) - np.log2(float(want))).abs()
    return d


def nearest(df: pd.DataFrame, *, ep_size=None, batch_size=None, gamma=None, workload=None, model=None,
            run_id=None) -> pd.DataFrame:
    """The rows of the recorded point nearest to the asked settings, per run; the runs kept are
    those holding the overall-nearest (EP, batch, gamma). Workload, model and run match exactly;
    EP, batch and gamma by log2 distance; ties go to the smaller point."""
    if df.empty:
        raise ValueError("no recorded rows to select from")
    for col, want in (("workload", workload), ("model", model), ("run_id", run_id)):
        if want is not None and col in df.columns:
            hit = df[df[col] == want]
            if hit.empty:
                known = sorted(map(str, df[col].dropna().unique()))
                raise ValueError(f"{col} {want!r} is not in the recorded rows; recorded: {', '.join(known)}")
            df = hit
    pts = df.drop_duplicates(["run_id", "point_id"])[["run_id", "point_id", "ep_size", "batch_size", "gamma"]].copy()
    pts["_d"] = point_distance(pts, ep_size, batch_size, gamma)
    pts = pts.sort_values(["_d", "ep_size", "batch_size", "gamma"], kind="stable")
    key = pts.iloc[0][["ep_size", "batch_size", "gamma"]].tolist()
    best = pts[(pts[["ep_size", "batch_size", "gamma"]].values == key).all(axis=1)].drop_duplicates("run_id")
    keep = set(zip(best["run_id"], best["point_id"]))
    return df[[(r, p) in keep for r, p in zip(df["run_id"], df["point_id"])]]


def reference(ok: pd.DataFrame, run_id: Optional[str] = None, ep_size: Optional[int] = None) -> pd.DataFrame:
    """The reference point (REFERENCE) among successful rows `ok`, in every run holding it or in one
    run. `ep_size=1` gives its EP-1 twin. Falls back to the nearest recorded point when it was not
    recorded."""
    ok = one_process(ok if run_id is None else ok[ok["run_id"] == run_id])
    if ok.empty:
        raise ValueError("no successful recorded rows" + (f" in run {run_id!r}" if run_id else ""))
    wl = REFERENCE.workload if REFERENCE.workload in set(ok["workload"]) else ok["workload"].value_counts().index[0]
    ok = ok[ok["workload"] == wl]
    if ep_size is None:
        eps = ok["ep_size"].astype(int)
        ep_size = int(eps[eps > 1].max()) if (eps > 1).any() else int(eps.max())
    return nearest(ok, ep_size=ep_size, batch_size=REFERENCE.batch_size, gamma=REFERENCE.gamma,
                   workload=wl, run_id=run_id)


def featured_points(reference_of: Callable[..., pd.DataFrame]) -> list[tuple[str, str]]:
    """(run_id, point_id) pairs to present: the reference point and its EP-1 twin, per run
    (`reference_of(ep_size=...)`: the reference rows of the runs at hand)."""
    out = []
    for ep in (None, 1):
        try:
            rows = reference_of(ep_size=ep)
        except ValueError:
            continue
        if ep == 1 and (rows["ep_size"] > 1).any():
            continue
        out += list(dict.fromkeys(zip(rows["run_id"], rows["point_id"])))
    return list(dict.fromkeys(out))
