"""Every GPU idle gap of a step named by its cause, so that the causes sum to the measured idle:

- sync: the part measure.breakdown charges to a step sync that drained the queue (SYNC_COST_RULE);
- host_bound: the rest of a gap that ends with a launch the GPU waited for (its first op started
  right after the call returned), up to the moment the host began that launch call, while the host
  was not blocked in a call: the host had not submitted the work yet (a host loop longer than the
  GPU's work; the by-design readback's wait is followed by such gaps);
- other: what is left: the launch call's own latency, a gap between the ops of one graph or one
  queue, an op that waited on another stream, time the host was blocked without a charge.
AMD TraceLens classifies gaps the same way (drained by a sync / host could not submit fast enough);
HTA splits idle into host wait / kernel wait / other.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from dspark_lab.measure import intervals as iv
from dspark_lab.measure.syncs import host_waits
from dspark_lab.measure.trace import GPU_CATS

CAUSES = ("sync", "host_bound", "other")
# The per-step columns, by cause: the sync part is breakdown's own column (one fact in one place).
CAUSE_COLUMNS = {"sync": "gpu_idle_sync_caused_ms", "host_bound": "gpu_idle_host_bound_ms",
                 "other": "gpu_idle_other_cause_ms"}
COLUMNS = (CAUSE_COLUMNS["host_bound"], CAUSE_COLUMNS["other"])  # the ones this module adds


def spans(ev: pd.DataFrame, lau: pd.DataFrame, caused: pd.DataFrame, gaps: list,
          waits: Optional[pd.DataFrame] = None) -> dict[str, list]:
    """Disjoint intervals per cause covering `gaps` (the GPU's idle intervals) exactly. `lau`:
    breakdown.launches; `caused`: breakdown.sync_caused_gaps of the same trace; `waits`:
    measure.syncs.host_waits of it (every wait, the copy calls that blocked included)."""
    sync = iv.union(zip(caused.start, caused.end))
    waits = host_waits(ev) if waits is None else waits
    blocked = iv.union(zip(waits.ts, waits.end))
    g = ev[ev.cat.isin(GPU_CATS)].sort_values("ts", kind="stable")
    op_ts, op_corr = g.ts.to_numpy(), g.correlation.to_numpy()
    call = {r.correlation: (r.ts, r.gpu_start, r.waited) for r in lau.itertuples()}
    host_bound = []
    for a, b in gaps:
        k = int(np.searchsorted(op_ts, b, side="left"))
        if k == len(op_ts):  # nothing ran after it: the host had not launched more
            host_bound.append((a, b))
            continue
        launch_ts, first, waited = call.get(op_corr[k], (None, None, True))
        if first == op_ts[k] and not waited:  # the GPU waited for this launch
            host_bound.append((a, min(launch_ts, b)))
    host_bound = iv.subtract(iv.subtract(iv.union(host_bound), sync), blocked)
    other = iv.subtract(iv.subtract(gaps, sync), host_bound)
    return {"sync": sync, "host_bound": host_bound, "other": other}  # charged gaps lie inside `gaps`


def per_window(by_cause: dict[str, list], lo: float, hi: float) -> dict:
    """The host-bound and other idle (ms) inside [lo, hi), under COLUMNS' names."""
    return {CAUSE_COLUMNS[c]: iv.length(iv.clip(by_cause[c], lo, hi)) / 1e3 for c in ("host_bound", "other")}
