"""The steps of a trace the kit did not make, which of them the kit's rule can account for, and
why not where it cannot.

Steps are found, in this order: the kit's own step ranges (a trace the kit recorded), the ranges a
user names (`record_function` NAME, or NAME#N), torch.profiler's `ProfilerStep#N` ranges, else
each CUDA graph replay (a cudaGraphLaunch; from one replay's launch to the next). A step is
charged on the thread that made most of its launches (the cost rule follows one host thread).

A step is left out of the totals (abstained), with its reason, when: it launched nothing on that
thread; a launch of it has no GPU record (the trace is cut short or its GPU activities were not
recorded; a graph replay without per-kernel records is said as such); or the clocks disagree (a
GPU op starts before the host call that launched it). The accounted steps are marked with the
kit's step range (normalized), so every number after that comes from measure.syncs and
measure.breakdown, the same path as `inspect`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from dspark_lab.measure import intervals as iv
from dspark_lab.measure.ranges import STEP_RANGE
from dspark_lab.measure.trace import GPU_CATS, HOST_API_CATS, HOST_RANGE_CAT

PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
KERNEL_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                   "cudaLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cuMemcpyAsync",
                   "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2")
# Launches whose missing GPU record says the trace is incomplete. Not memsets: a complete trace
# (HolisticTraceAnalysis' tests/data/ns_resolution_trace) holds 235 cudaMemsetAsync calls of 380
# with no GPU record, its kernels and copies all recorded.
RECORDED_LAUNCHES = tuple(n for n in KERNEL_LAUNCHES if n not in ("cudaMemsetAsync",)) + GRAPH_LAUNCHES
# A GPU op cannot start before the host call that queued it. Earlier than this (µs) and the two
# clocks disagree. Kineto rounds both to 1 µs in older exports, so a 1 µs lead is rounding.
CLOCK_TOLERANCE_US = 1.0
SOURCES = {"kit": f"the kit's '{STEP_RANGE}' ranges", "named": "ranges named {name!r}",
           "profiler": "torch.profiler's ProfilerStep#N ranges", "graph": "CUDA graph replays (one per cudaGraphLaunch)"}
NO_STEP = ("no step marker: no ProfilerStep#N range, no range named by --step and no CUDA graph replay "
           "(record the trace under torch.profiler.schedule, or name your step's record_function with --step)")


@dataclass
class Steps:
    source: str = ""  # SOURCES' text, "" where none was found
    thread: Optional[tuple] = None  # (pid, tid) the steps are charged on
    windows: list = field(default_factory=list)  # (lo, hi, label) of every step found, in time order
    accounted: list = field(default_factory=list)  # indices into windows the totals hold
    abstained: list = field(default_factory=list)  # {"what", "step", "reason"} per step left out
    gpu_records: bool = True  # the trace holds GPU activity records at all
    replays_without_kernels: int = 0  # graph replays whose GPU work is not in the trace


def _ranges(ev: pd.DataFrame, step_name: Optional[str]) -> tuple[str, pd.DataFrame]:
    host = ev[(ev.cat == HOST_RANGE_CAT) & (ev.ph == "X")]
    if step_name:
        named = host[(host.name == step_name) | host.name.str.fullmatch(re.escape(step_name) + r"#\d+")]
        return SOURCES["named"].format(name=step_name), named
    own = host[host.name == STEP_RANGE]
    if len(own):
        return SOURCES["kit"], own
    prof = host[host.name.str.match(PROFILER_STEP)]
    if len(prof):
        return SOURCES["profiler"], prof
    return "", host.iloc[0:0]


def _apart(ranges: pd.DataFrame) -> list[tuple[float, float, str, tuple]]:
    """The ranges in time order, one per span: a range starting inside the one before (a nested
    or repeated marker) is not a step of its own."""
    out: list = []
    for r in ranges.sort_values("ts", kind="stable").itertuples():
        if out and r.ts < out[-1][1]:
            continue
        out.append((float(r.ts), float(r.end), str(r.name), (r.pid, r.tid)))
    return out


def launches(ev: pd.DataFrame) -> pd.DataFrame:
    """Every launch call (a kernel, copy, memset or graph launch) on any thread, with its GPU work's
    first start where the trace has it (NaN where not)."""
    api = ev[ev.cat.isin(HOST_API_CATS) & ev.name.isin(KERNEL_LAUNCHES + GRAPH_LAUNCHES) & ev.correlation.notna()]
    g = ev[ev.cat.isin(GPU_CATS) & ev.correlation.notna()]
    first = g.groupby("correlation").ts.min().rename("gpu_start")
    return api[["name", "ts", "end", "pid", "tid", "correlation"]].join(first, on="correlation")


def _graph_windows(lau: pd.DataFrame, ev: pd.DataFrame) -> list[tuple[float, float, str, tuple]]:
    g = lau[lau.name.isin(GRAPH_LAUNCHES)].sort_values("ts", kind="stable")
    if g.empty:
        return []
    thread = g.groupby(["pid", "tid"]).size().idxmax()
    g = g[(g.pid == thread[0]) & (g.tid == thread[1])]
    mine = ev[(ev.pid == thread[0]) & (ev.tid == thread[1])]
    starts = g.ts.tolist()
    last_end = float(max(g.end.max(), mine.end.max()))
    ends = starts[1:] + [last_end]
    return [(float(a), float(b), f"replay {i}", thread) for i, (a, b) in enumerate(zip(starts, ends))]


def window_of(ts, wins: list) -> np.ndarray:
    """Per time in `ts`, the index of the window of `wins` ((lo, hi, ...) in time order, apart) holding it, or -1."""
    ts = np.asarray(ts, dtype=float)
    if not wins:
        return np.full(len(ts), -1)
    starts = np.array([w[0] for w in wins], dtype=float)
    ends = np.array([w[1] for w in wins], dtype=float)
    k = np.searchsorted(starts, ts, side="right") - 1
    return np.where((k >= 0) & (ts < ends[np.maximum(k, 0)]), k, -1)


def _charged_thread(lau: pd.DataFrame, wins: list) -> tuple:
    """The thread with most launches inside the steps (the marker's thread where none launched)."""
    picked = lau[window_of(lau.ts, wins) >= 0]
    return wins[0][3] if picked.empty else picked.groupby(["pid", "tid"]).size().idxmax()


def _why_not(mine: pd.DataFrame) -> Optional[str]:
    """Why a step whose launches on the charged thread are `mine` cannot be accounted for (None: it can)."""
    if mine.empty:
        return "no GPU launch on the charged thread in this step: nothing to tie its waits to the GPU's idle"
    lost = mine[mine.gpu_start.isna() & mine.name.isin(RECORDED_LAUNCHES)]
    graphs = lost[lost.name.isin(GRAPH_LAUNCHES)]
    if len(graphs):
        return (f"{len(graphs)} CUDA graph replay(s) with no per-kernel records in the trace: the replay's GPU work "
                "is not in it, so its idle cannot be told from its work")
    if len(lost):
        return (f"{len(lost)} of {len(mine)} launches have no GPU record (the trace is cut short, or its GPU "
                "activities were not recorded)")
    early = mine[mine.gpu_start < mine.ts - CLOCK_TOLERANCE_US]
    if len(early):
        lead = float((early.ts - early.gpu_start).max())
        return (f"the clocks disagree: {len(early)} GPU op(s) start before the host call that launched them "
                f"(by up to {lead:.1f} µs)")
    return None


def find(ev: pd.DataFrame, step_name: Optional[str] = None) -> Steps:
    """The steps of `ev` (a trace frame), which the totals hold and why the others are left out."""
    source, ranges = _ranges(ev, step_name)
    lau = launches(ev)
    wins = _apart(ranges)
    if not wins and not step_name:
        wins = _graph_windows(lau, ev)
        source = SOURCES["graph"] if wins else ""
    out = Steps(source=source, gpu_records=bool(ev.cat.isin(GPU_CATS).any()))
    out.replays_without_kernels = int((lau.name.isin(GRAPH_LAUNCHES) & lau.gpu_start.isna()).sum())
    if not wins:
        why = f"no range named {step_name!r} (nor {step_name}#N)" if step_name else NO_STEP
        out.abstained.append({"what": "trace", "step": "", "reason": why})
        return out
    out.thread = _charged_thread(lau, wins)
    out.windows = [(lo, hi, label) for lo, hi, label, _ in wins]
    mine = lau[(lau.pid == out.thread[0]) & (lau.tid == out.thread[1])]
    by_step = dict(tuple(mine.groupby(window_of(mine.ts, out.windows))))
    for i, (lo, hi, label) in enumerate(out.windows):
        why = _why_not(by_step.get(i, mine.iloc[0:0]))
        if why is None:
            out.accounted.append(i)
        else:
            out.abstained.append({"what": "step", "step": label, "reason": why})
    return out


def normalized(ev: pd.DataFrame, steps: Steps) -> pd.DataFrame:
    """`ev` with the accounted steps, and only those, marked by the kit's step range on the charged
    thread (any step range of the trace's own removed), in time order: the kit's frame."""
    keep = ev[~((ev.name == STEP_RANGE) & (ev.cat == HOST_RANGE_CAT))]
    if steps.thread is None or not steps.accounted:
        return keep.reset_index(drop=True)
    pid, tid = steps.thread
    rows = [{"name": STEP_RANGE, "cat": HOST_RANGE_CAT, "ph": "X", "ts": lo, "dur": hi - lo, "end": hi, "pid": pid,
             "tid": tid, "correlation": None, "bytes": None, "device_type": None, "args": {}}
            for lo, hi, _ in (steps.windows[i] for i in steps.accounted)]
    out = pd.concat([keep, pd.DataFrame(rows, columns=keep.columns)], ignore_index=True)
    return out.sort_values("ts", kind="stable").reset_index(drop=True)


def gpu_share(ev: pd.DataFrame, steps: Steps) -> Optional[float]:
    """Of the trace's GPU busy time, the share made by launches of the accounted steps on the charged
    thread (None: the trace has no GPU records)."""
    g = ev[ev.cat.isin(GPU_CATS)]
    total = iv.length(iv.union(zip(g.ts, g.end)))
    if total <= 0:
        return None
    if steps.thread is None or not steps.accounted:
        return 0.0
    lau = launches(ev)
    lau = lau[(lau.pid == steps.thread[0]) & (lau.tid == steps.thread[1])]
    inside = np.isin(window_of(lau.ts, steps.windows), steps.accounted)
    mine = g[g.correlation.isin(set(lau[inside].correlation))]
    return iv.length(iv.union(zip(mine.ts, mine.end))) / total
