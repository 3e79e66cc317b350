"""Step-time breakdown from a trace: where each step's wall time went, on the host and on the GPU.

Host side, each instant of a step is given to one part, by precedence:
  blocked (syncs outside the readback) > readback (the by-design result wait) > copy (async
  memcpy calls) > launch (other CUDA API calls) > prep (the step's `*prep*` phases) > other.
GPU side: busy (kernels, copies, memsets) and idle; of the idle time, the part in gaps that
contain the end of a step sync is "idle after sync": the GPU starving while the host does work it
could have done before the sync. Blocked time is not lost time; idle-after-sync is.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from .ranges import PHASE_PREFIX
from . import intervals as iv
from .syncs import ASYNC_COPY_APIS, host_events, step_windows, sync_calls
from .trace import GPU_CATS, HOST_API_CATS, HOST_RANGE_CAT

GPU_MERGE_GAP_US = 2.0  # GPU ops closer than this are drawn as one busy span
PARTS_PRECEDENCE = ("blocked", "readback", "copy", "launch", "prep")


def _host_sets(ev: pd.DataFrame, calls: Optional[pd.DataFrame] = None) -> dict[str, list]:
    host = host_events(ev)
    calls = sync_calls(ev) if calls is None else calls
    api = host[host.cat.isin(HOST_API_CATS)]
    prep = host[(host.cat == HOST_RANGE_CAT) & host.name.str.startswith(PHASE_PREFIX) & host.name.str.contains("prep")]
    pairs = lambda d: list(zip(d.ts, d.end))  # noqa: E731
    return {
        "blocked": pairs(calls[~calls.readback]),
        "readback": pairs(calls[calls.readback]),
        "copy": pairs(api[api.name.isin(ASYNC_COPY_APIS)]),
        "launch": pairs(api[~api.name.isin(ASYNC_COPY_APIS)]),
        "prep": pairs(prep),
    }


def gpu_intervals(ev: pd.DataFrame) -> list[tuple[float, float]]:
    g = ev[ev.cat.isin(GPU_CATS)]
    return iv.union(zip(g.ts, g.end))


def resolve_host(sets: dict[str, list], lo: float, hi: float) -> dict[str, list]:
    """Disjoint host intervals per part inside [lo, hi), by precedence."""
    taken: list = []
    out = {}
    for part in PARTS_PRECEDENCE:
        mine = iv.subtract(iv.clip(sets[part], lo, hi), taken)
        out[part] = mine
        taken = iv.union(taken + mine)
    out["other"] = iv.complement(taken, lo, hi)
    return out


def per_step(ev: pd.DataFrame, calls: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """One row per step: wall_ms, the host parts, the GPU parts (all in ms)."""
    sets = _host_sets(ev, calls)
    gpu = gpu_intervals(ev)
    step_sync_ends = sorted(e for _, e in sets["blocked"])
    rows = []
    for i, (lo, hi) in enumerate(step_windows(ev)):
        host = resolve_host(sets, lo, hi)
        busy = iv.clip(gpu, lo, hi)
        gaps = iv.complement(gpu, lo, hi)
        after_sync = [g for g in gaps if any(g[0] <= t <= g[1] for t in step_sync_ends if lo <= t < hi)]
        row = {"step": i, "wall_ms": (hi - lo) / 1e3}
        row.update({f"host_{p}_ms": iv.length(v) / 1e3 for p, v in host.items()})
        row.update(gpu_busy_ms=iv.length(busy) / 1e3, gpu_idle_ms=iv.length(gaps) / 1e3,
                   gpu_idle_after_sync_ms=iv.length(after_sync) / 1e3)
        rows.append(row)
    return pd.DataFrame(rows)


def summary(ev: pd.DataFrame, skip_first: int = 1, calls: Optional[pd.DataFrame] = None) -> dict:
    """Mean over steps of each part, so the parts still add up to the mean step (medians would
    not). The first step is skipped: it pays the profiler's start."""
    df = per_step(ev, calls)
    if len(df) > skip_first:
        df = df.iloc[skip_first:]
    mean = df.mean(numeric_only=True)
    out = {k: float(mean[k]) for k in df.columns if k.endswith("_ms") and k != "wall_ms"}
    out["profiled_step_ms"] = float(mean["wall_ms"])
    return out


def timeline(ev: pd.DataFrame, first_step: int = 1, n_steps: int = 3, calls: Optional[pd.DataFrame] = None) -> list[list]:
    """Segments [lane, part, start_ms, end_ms, label] for a few steps, times relative to the first
    shown step's start: host parts by precedence, GPU busy spans, and each step sync's span."""
    wins = step_windows(ev)
    if not wins:
        return []
    first_step = min(first_step, max(len(wins) - n_steps, 0))
    shown = wins[first_step:first_step + n_steps]
    lo, hi = shown[0][0], shown[-1][1]
    calls = sync_calls(ev) if calls is None else calls
    sets = _host_sets(ev, calls)
    segs: list[list] = []
    for part, spans in resolve_host(sets, lo, hi).items():
        segs += [["host", part, (s - lo) / 1e3, (e - lo) / 1e3, part] for s, e in spans if e - s > 0.5]
    g = ev[ev.cat.isin(GPU_CATS)]
    g = g[(g.end > lo) & (g.ts < hi)]
    # Host-to-device copies one by one (they are the subject); other GPU work merged into busy spans.
    for r in g[g.name.str.contains("HtoD")].itertuples():
        segs.append(["gpu", "h2d_copy", (max(r.ts, lo) - lo) / 1e3, (min(r.end, hi) - lo) / 1e3, r.name[:60]])
    for s, e in iv.union((max(a, lo), min(b, hi)) for a, b in zip(g.ts, g.end + GPU_MERGE_GAP_US)):
        n = int(((g.ts >= s) & (g.ts < e)).sum())
        segs.append(["gpu", "busy", (s - lo) / 1e3, (e - GPU_MERGE_GAP_US - lo) / 1e3, f"{n} GPU ops"])
    for r in calls[(calls.ts >= lo) & (calls.ts < hi)].itertuples():
        segs.append(["host", "sync" if not r.readback else "readback_sync", (r.ts - lo) / 1e3, (r.end - lo) / 1e3, f"{r.name} at {r.site}"])
    for k, (s, e) in enumerate(shown):
        segs.append(["host", "step", (s - lo) / 1e3, (e - lo) / 1e3, f"step {first_step + k}"])
    return segs
