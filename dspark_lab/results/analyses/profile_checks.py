"""Profiled passes that cannot be read as the step they profile: their parts add up to several times
the profiler-free step. Seen in the recorded EP-2 allreduce runs: rank 0's first rank case
(device_direct on every rank) profiled at 45 ms, 40 ms of it "blocked", against an 8.6 ms step; it is
the first profiled pass of a fresh worker process (the a2a files, profiled later in the same
processes, never show it; neither do later cases), so the profiler's one-time start-up (CUPTI
initialisation) lands inside that pass's first sync. Such a row is flagged, never silently drawn."""
from __future__ import annotations

import pandas as pd

# A profiled step more than this many times the profiler-free one is not this step's breakdown (the
# profiler's own overhead on these steps is 1.0-1.6x: notebook 01's three cost numbers).
PROFILE_OVERRUN_RATIO = 2.0
KEYS = ("run_id", "rank_case", "rank", "strategy")


def overrun_profiles(rows: pd.DataFrame, ratio: float = PROFILE_OVERRUN_RATIO) -> pd.DataFrame:
    """Per run x rank case x rank x strategy (those columns present): the median profiled and
    profiler-free step, where the profiled one is more than `ratio` times the other."""
    need = {"profiled_step_ms", "step_ms"}
    if "device" in rows.columns:  # CPU ranks (gloo): the profiler's own cost is of the step's size there
        rows = rows[rows["device"].astype(str) == "cuda"]
    if rows.empty or not need <= set(rows.columns):
        return pd.DataFrame(columns=[*KEYS, "profiled_step_ms", "step_ms", "ratio"])
    keys = [k for k in KEYS if k in rows.columns]
    med = rows.groupby(keys, sort=False, dropna=False)[["profiled_step_ms", "step_ms"]].median().reset_index()
    med["ratio"] = med["profiled_step_ms"] / med["step_ms"]
    return med[med["ratio"] > ratio].reset_index(drop=True)


def describe(flagged: pd.DataFrame) -> str:
    """One sentence for a figure's note ("" when nothing is flagged)."""
    if flagged.empty:
        return ""
    parts = []
    for r in flagged.itertuples():
        who = f"rank {int(r.rank)} in {r.rank_case}" if hasattr(r, "rank_case") and pd.notna(getattr(r, "rank", None)) \
            else str(getattr(r, "strategy", ""))
        parts.append(f"{who}: profiled {r.profiled_step_ms:.1f} ms against a {r.step_ms:.1f} ms step")
    return ("profiled pass not this step's (" + "; ".join(parts) + "): the first profiled pass of a fresh "
            "process carries the profiler's start-up; its bars are marked ⚠")
