"""How far ahead of the GPU the host runs: the launch lead at each kernel launch, per step.

At each launch on the step thread (a kernel, graph, copy or memset launch matched to its GPU work by
correlation; measure.breakdown.launches), the lead is the time the GPU still had queued when the call
began: the last end of the work launched before it, minus the call's start. Positive: the GPU was busy
that long ahead of the host (the host runs ahead). Negative: the GPU had been idle that long, waiting
for the host. The run-ahead fraction is the share of launches with a positive lead: launches that found
the GPU still busy (SGLang #31468 reports it going from 0.88 to 0.995 when a per-step sync was removed;
#32219: the host stays off the critical path while its loop is shorter than the GPU step).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dspark_lab.measure.syncs import step_windows

COLUMNS = ("launches", "launch_lead_median_ms", "launch_lead_min_ms", "run_ahead_fraction")


def leads(lau: pd.DataFrame) -> pd.DataFrame:
    """`lau` (breakdown.launches, in host order) with `lead_us`: the GPU work queued when each call
    began (the first launch of the trace has nothing before it to compare with: NaN)."""
    out = lau.copy()
    pending = out.gpu_end.cummax().shift(1)
    out["lead_us"] = pending - out.ts
    return out


def summarize(lead_us) -> dict:
    """The launch lead's median and minimum (ms) and the run-ahead fraction of a set of launches."""
    v = np.asarray([x for x in lead_us if np.isfinite(x)], dtype=float)
    if not len(v):
        return {"launches": 0, "launch_lead_median_ms": float("nan"), "launch_lead_min_ms": float("nan"),
                "run_ahead_fraction": float("nan")}
    return {"launches": int(len(v)), "launch_lead_median_ms": float(np.median(v)) / 1e3,
            "launch_lead_min_ms": float(v.min()) / 1e3, "run_ahead_fraction": float((v > 0).mean())}


def per_step(ev: pd.DataFrame, lau: pd.DataFrame) -> list[dict]:
    """summarize() of the launches made inside each step window, one dict per step."""
    with_lead = leads(lau)
    ts = with_lead.ts.to_numpy()
    return [summarize(with_lead.lead_us.to_numpy()[(ts >= lo) & (ts < hi)]) for lo, hi in step_windows(ev)]


def over_steps(ev: pd.DataFrame, lau: pd.DataFrame, skip_first: int = 1) -> dict:
    """summarize() of every launch in the steps after the first `skip_first` (they pay the profiler's
    start): pooled over launches, so the median is a launch's, not a mean of medians."""
    wins = step_windows(ev)[skip_first:] or step_windows(ev)
    if not wins:
        return summarize([])
    with_lead = leads(lau)
    inside = (with_lead.ts >= wins[0][0]) & (with_lead.ts < wins[-1][1])
    return summarize(with_lead.lead_us[inside].to_numpy())


def after_first_sync(ev: pd.DataFrame, lau: pd.DataFrame, calls: pd.DataFrame, skip_first: int = 1) -> dict:
    """summarize() of the launches made after each step's first sync outside the readback (`calls`:
    measure.syncs.sync_calls), steps after the first `skip_first`: how far ahead the host gets
    again once a sync has drained the queue (with the largest lead: never positive means the host
    never got ahead after the sync). Steps without such a sync contribute nothing."""
    with_lead = leads(lau)
    step_calls = calls[~calls.readback.astype(bool)]
    picked = []
    for i, (lo, hi) in enumerate(step_windows(ev)):
        mine = step_calls[(step_calls.ts >= lo) & (step_calls.ts < hi)]
        if i < skip_first or mine.empty:
            continue
        t = float(mine.end.min())
        picked += list(with_lead.lead_us[(with_lead.ts >= t) & (with_lead.ts < hi)])
    finite = [x for x in picked if np.isfinite(x)]
    return summarize(picked) | {"launch_lead_max_ms": max(finite) / 1e3 if finite else float("nan")}
