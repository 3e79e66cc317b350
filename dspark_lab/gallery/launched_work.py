"""The GPU work each step launches: kernel, copy and memset busy time per step, given to the step whose
host call launched it (matched by correlation), wherever on the GPU's timeline it ran.

A step that runs ahead has a profiled window that is the host's, and the GPU busy inside that window
is not the step's work; the work its launches queued is. So "the work the fix removed" is the case's
launched work less the fix's, both read from their profiled traces.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from dspark_lab.measure import intervals as iv
from dspark_lab.measure.syncs import host_events, step_windows
from dspark_lab.measure.trace import GPU_CATS, HOST_API_CATS

LAUNCHED_WORK_RULE = ("the GPU work a step launches: the busy time (kernels, copies, memsets; overlaps counted once) "
                      "of the GPU ops whose launching host call (matched by correlation) lies in the step's range, "
                      "wherever they ran; the mean over the profiled steps, the first left out (the profiler's start)")


def per_step(ev: pd.DataFrame) -> list[float]:
    """The GPU busy ms each step's launches queued, one value per step range, in order."""
    host = host_events(ev)
    api = host[host.cat.isin(HOST_API_CATS) & host.correlation.notna()]
    ops = ev[ev.cat.isin(GPU_CATS) & ev.correlation.notna()]
    launched_at = ops.correlation.map(dict(zip(api.correlation, api.ts))).astype(float)  # NaN: not the step thread's
    out = []
    for lo, hi in step_windows(ev):
        mine = ops[((launched_at >= lo) & (launched_at < hi)).to_numpy(bool)]
        out.append(iv.length(iv.union(zip(mine.ts, mine.end))) / 1e3)
    return out


def mean_ms(ev: pd.DataFrame, skip_first: int = 1) -> Optional[float]:
    """LAUNCHED_WORK_RULE's mean (ms per step); None for a trace without steps. The first step is kept
    where it is the only one."""
    steps = per_step(ev)
    if not steps:
        return None
    kept = steps[skip_first:] if len(steps) > skip_first else steps
    return sum(kept) / len(kept)
