"""Sync accounting from a trace: every host wait by kind, host-to-device copies by source memory,
device allocations, and the source line each wait comes from.

A host wait is a wait whatever made it (`host_waits`): a host-blocking CUDA API call (runtime and
driver names: stream, device and event syncs, a `cudaMemcpy` to or from the host), or a copy call
that blocked by itself: a D2H into pageable memory returns only after the copy has run, whatever
its `non_blocking` said (CUDA 11's "API synchronization behavior" documents it, 12.x says only
"might be synchronous"; every H200 trace here shows it), and a pageable H2D that the driver
synchronized with the stream before staging returns only when the queue has drained (the H200's
card shows it for sources from 4 MB up, with no sync call in the trace). The blocking calls of one
framework call (one per innermost ATen op: `.cpu()`'s copy that waited, then its
`cudaStreamSynchronize`; `repeat_interleave` makes two) are one wait, spanning them all, named by
a kind of results.facts.wait_kinds.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator, Optional

import pandas as pd

from dspark_lab.measure.frame_memo import per_frame
from dspark_lab.measure.ranges import PHASE_PREFIX, READBACK_RANGE, STEP_RANGE
from dspark_lab.measure.trace import GPU_CATS, HOST_API_CATS, HOST_RANGE_CAT, python_frame
from dspark_lab.results.facts import wait_kinds

SYNC_KINDS = {
    "cudaStreamSynchronize": "stream", "cuStreamSynchronize": "stream",
    "cudaDeviceSynchronize": "device", "cuCtxSynchronize": "device",
    "cudaEventSynchronize": "event", "cuEventSynchronize": "event",
    "cudaMemcpy": "memcpy", "cudaMemcpy2D": "memcpy", "cudaMemcpyToSymbol": "memcpy",
    "cudaMemcpyFromSymbol": "memcpy", "cuMemcpyHtoD_v2": "memcpy", "cuMemcpyDtoH_v2": "memcpy",
}
# A wait made inside a copy call with no sync call of its own (a pageable D2H, a staged pageable H2D).
COPY_WAIT = "copy"
SYNC_KIND_COLUMNS = {"stream": "stream_syncs_per_step", "device": "device_syncs_per_step",
                     "event": "event_syncs_per_step", "memcpy": "sync_memcpy_per_step",
                     COPY_WAIT: "copy_waits_per_step"}
# Columns that count host-blocking calls: with no CUDA device there is no call to block on, so a
# CPU run records them as NaN with NO_CUDA_NOTE in `sync_note`, never as a measured zero.
SYNC_COUNT_COLUMNS = (*SYNC_KIND_COLUMNS.values(), "syncs_per_step", "readback_syncs_per_step", "debug_syncs_per_step")
NO_CUDA_NOTE = "not measurable without CUDA"
ASYNC_COPY_APIS = ("cudaMemcpyAsync", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyAsync")
# A launched GPU op that starts more than this after its launch call returned waited behind queued
# work: the host was ahead. On the recorded H200 traces an op launched into an idle GPU starts at
# most a few µs after the call returns, a queued one hundreds of µs later (tests check both). The
# same margin says whether a blocking call found work queued and left none (it drained the queue).
HOST_AHEAD_US = 20.0
_TORCH_PATH_PARTS = ("/torch/", "\\torch\\", "<built-in", "contextlib.py", "/dspark_lab/measure/")


def site_path(path: str) -> str:
    """The last two parts of a frame's file, named one way whoever recorded it: traceback gives the
    file's path as it was imported, the profiler gives it relative to the sys.path entry it was found
    under (a target's own folder on sys.path makes "SUB/FILE.py" just "FILE.py"). A relative path is
    first found on disk (the working folder, then sys.path), and both are resolved (the target's
    folder goes on sys.path resolved), so both name the same site."""
    return _site_path(str(path), tuple(sys.path), os.getcwd())


@functools.lru_cache(maxsize=4096)
def _site_path(path: str, roots: tuple, cwd: str) -> str:
    p = Path(path)
    if path.startswith("<"):  # "<string>", "<frozen ...>": no file to find
        return path
    if not p.is_absolute():
        p = next((c for c in (Path(root or cwd) / p for root in (cwd, *roots)) if c.is_file()), p)
    try:
        p = p.resolve() if p.is_absolute() or p.exists() else p
    except (OSError, RuntimeError):
        pass
    return "/".join(p.parts[-2:]) if len(p.parts) >= 2 else p.name


@per_frame
def _step_ranges(ev: pd.DataFrame) -> pd.DataFrame:
    """The kit's step ranges, outermost only: a step already wrapped in the kit's range and then run
    under it again holds two nested ranges, which are one step (counted twice, its syncs and idle
    would be split between them)."""
    s = ev[(ev.name == STEP_RANGE) & (ev.ph == "X") & (ev.cat == HOST_RANGE_CAT)]
    if len(s) < 2:
        return s
    s = s.assign(_neg=-s.dur).sort_values(["pid", "tid", "ts", "_neg"], kind="stable")
    keep, outer = [], {}  # per thread: the end of the outermost range still open
    for i, r in zip(s.index, s.itertuples()):
        key = (r.pid, r.tid)
        if key in outer and r.end <= outer[key]:
            continue
        outer[key] = r.end
        keep.append(i)
    return s.loc[keep].drop(columns="_neg").sort_values("ts", kind="stable")


@per_frame
def host_events(ev: pd.DataFrame) -> pd.DataFrame:
    """Events of the thread that ran the steps (the one holding the step ranges)."""
    steps = _step_ranges(ev)
    if steps.empty:
        raise ValueError(f"the trace has no '{STEP_RANGE}' ranges: was the step run under dspark_lab.measure?")
    pid, tid = steps.pid.iloc[0], steps.tid.iloc[0]
    return ev[(ev.pid == pid) & (ev.tid == tid)]


@per_frame
def step_windows(ev: pd.DataFrame) -> list[tuple[float, float]]:
    s = _step_ranges(ev).sort_values("ts")
    return list(zip(s.ts, s.end))


def _enclosing(ev: pd.DataFrame, t0: float, t1: float) -> pd.DataFrame:
    return ev[(ev.ts <= t0) & (ev.end >= t1)]


def attribute(host: pd.DataFrame, call: pd.Series) -> str:
    """Name the innermost non-torch Python frame enclosing a call, e.g. "dspark_lab/strategies.py(26): device_direct".

    Falls back to the innermost ATen op and the phase when the trace has no Python stacks."""
    around = _enclosing(host, call.ts, call.end)
    frames = around[around.cat == "python_function"].sort_values("ts")
    for name in reversed(frames.name.tolist()):
        f = python_frame(name)
        # The profiler names files relative to site-packages ("torch/cuda/streams.py"): rooted
        # here so that torch's own frames match "/torch/" as absolute paths do.
        if f and not any(p in "/" + f[0].lstrip("/") for p in _TORCH_PATH_PARTS):
            return f"{site_path(f[0])}({f[1]}): {f[2]}"
    ops = around[around.cat == "cpu_op"].sort_values("ts")
    phases = around[(around.cat == HOST_RANGE_CAT) & around.name.str.startswith(PHASE_PREFIX) & (around.name != STEP_RANGE)]
    parts = [ops.name.iloc[0] if not ops.empty else "", phases.name.iloc[-1] if not phases.empty else ""]
    return " in ".join(p for p in parts if p) or call["name"]


WAIT_COLUMNS = ("name", "cat", "ts", "end", "dur", "pid", "tid", "correlation", "kind", "wait", "calls", "op",
                "op_ts", "op_end", "readback", "step", "site")


def _gpu_records(ev: pd.DataFrame) -> pd.DataFrame:
    """GPU work by correlation: its first start, last end, and the copy's name where it is a memcpy."""
    g = ev[ev.cat.isin(GPU_CATS) & ev.correlation.notna()]
    if g.empty:
        return pd.DataFrame(columns=["gpu_start", "gpu_end", "memcpy"])
    copy_name = g.name.where(g.cat == "gpu_memcpy", "")
    return g.assign(memcpy=copy_name).groupby("correlation").agg(
        gpu_start=("ts", "min"), gpu_end=("end", "max"), memcpy=("memcpy", "max"))


def _copy_call_waits(api: pd.DataFrame, work: pd.DataFrame) -> pd.Series:
    """Per copy API call on the thread: did the call itself wait for the GPU? A D2H into pageable
    memory always does (it returns after the copy ran); a pageable H2D did when it drained the queue:
    GPU work (its own copy included) was pending when it began and none when it returned."""
    launch = api.join(work, on="correlation", how="inner").sort_values("ts", kind="stable")
    launch = launch.assign(pending=launch.gpu_end.cummax())  # launches up to each one: the queue's end
    pageable = launch[launch.name.isin(ASYNC_COPY_APIS) & launch.memcpy.astype(str).str.contains("Pageable")]
    d2h = pageable.memcpy.str.contains("DtoH")
    drained = pageable.memcpy.str.contains("HtoD") & (pageable.ts + HOST_AHEAD_US < pageable.pending) \
        & (pageable.pending <= pageable.end + HOST_AHEAD_US)
    out = pd.Series(False, index=api.index)
    out[pageable.index[d2h | drained]] = True
    return out


def _innermost_op(ops: pd.DataFrame, ts: float, end: float) -> Optional[pd.Series]:
    around = ops[(ops.ts <= ts) & (ops.end >= end)]
    return around.sort_values("ts", kind="stable").iloc[-1] if len(around) else None


@per_frame
def host_waits(ev: pd.DataFrame) -> pd.DataFrame:
    """measure.syncs._host_waits of `ev`, found once per frame (a copy each call: callers may add
    columns): the counts, the cost rule, the idle causes and the wait table of one trace all read it,
    and finding the waits walks every API call of the thread."""
    return _host_waits(ev)


def _step_of(t: float, wins: list) -> int:
    """The index of the step window holding host time `t`, or -1 outside them all."""
    return next((i for i, (s, e) in enumerate(wins) if s <= t < e), -1)


def _host_waits(ev: pd.DataFrame) -> pd.DataFrame:
    """Every host wait on the step thread, one row each, in time order (outside the steps too: step
    -1). A wait is the blocking calls of one framework call (the innermost ATen op around them; a
    call outside any op is a wait of its own): its span from the first call's start to the last's
    end; `name` its sync call (the copy call where none), `kind` that call's SYNC_KINDS kind or
    COPY_WAIT, `wait` the kind of wait (results.facts.wait_kinds), `calls` the API calls, `op` the
    framework call's name ("" where none), `op_ts`/`op_end` its span (the calls' own where none),
    `readback` inside the by-design readback, `step`, `site` (attribute)."""
    host = host_events(ev)
    api = host[host.cat.isin(HOST_API_CATS)]
    work = _gpu_records(ev)
    copy_waited = _copy_call_waits(api, work)
    blocking = api[api.name.isin(list(SYNC_KINDS)) | copy_waited].sort_values("ts", kind="stable")
    ops = host[(host.cat == "cpu_op") & (host.ph == "X")]
    groups: dict = {}
    for i, c in blocking.iterrows():
        op = _innermost_op(ops, c.ts, c.end)
        key = ("op", op.ts, op.end) if op is not None else ("call", i)
        groups.setdefault(key, (op, []))[1].append(i)
    rows = [_wait_row(api, ops, work, blocking.loc[idx], op, copy_waited) for op, idx in groups.values()]
    out = pd.DataFrame(rows, columns=[c for c in WAIT_COLUMNS if c not in ("readback", "step", "site")])
    out = out.sort_values("ts", kind="stable").reset_index(drop=True)
    readback = host[(host.name == READBACK_RANGE) & (host.cat == HOST_RANGE_CAT)]
    wins = step_windows(ev)
    out["readback"] = pd.Series([bool(((readback.ts <= r.ts) & (readback.end >= r.end)).any()) for r in out.itertuples()],
                                index=out.index, dtype=bool)
    out["step"] = pd.Series([_step_of(t, wins) for t in out.ts], index=out.index, dtype=int)
    # attribute() looks only at frames, ops and ranges around each wait: cut the thread to those once.
    around = host[host.cat.isin(("python_function", "cpu_op", HOST_RANGE_CAT))]
    out["site"] = pd.Series([attribute(around, r) for _, r in out.iterrows()], index=out.index, dtype=object)
    return out


def _wait_row(api: pd.DataFrame, ops: pd.DataFrame, work: pd.DataFrame, calls: pd.DataFrame,
              op: Optional[pd.Series], copy_waited: pd.Series) -> dict:
    sync = calls[calls.name.isin(list(SYNC_KINDS))]
    named = sync.iloc[0] if len(sync) else calls.iloc[0]
    lo, hi = (float(op.ts), float(op.end)) if op is not None else (float(calls.ts.min()), float(calls.end.max()))
    chain = ops[(ops.ts <= calls.ts.min()) & (ops.end >= calls.end.max())].name.tolist()
    inside = api[(api.ts >= lo) & (api.end <= hi) & api.name.isin(ASYNC_COPY_APIS)]
    names = [str(work.memcpy.get(c, "")) for c in inside.correlation if c in work.index]
    direction = next((d for n in names for d in ("DtoH", "HtoD") if d in n), None)
    kind = SYNC_KINDS.get(named["name"], COPY_WAIT)
    wait = wait_kinds.classify(chain, None if kind == COPY_WAIT else kind, copy_direction=direction,
                               copy_call_waited=bool(copy_waited.loc[calls.index].any()))
    ts, end = float(calls.ts.min()), float(calls.end.max())
    return {"name": named["name"], "cat": named["cat"], "ts": ts, "end": end, "dur": end - ts, "pid": named.pid,
            "tid": named.tid, "correlation": named.correlation, "kind": kind, "wait": wait,
            "calls": "+".join(calls.name), "op": op["name"] if op is not None else "", "op_ts": lo, "op_end": hi}


def sync_calls(ev: pd.DataFrame) -> pd.DataFrame:
    """The host waits inside the steps (host_waits, step >= 0): what the counts, the breakdown and the
    cost rule read."""
    w = host_waits(ev)
    return w[w.step >= 0].reset_index(drop=True)


def other_thread_waits(ev: pd.DataFrame) -> pd.DataFrame:
    """Blocking calls on threads other than the step thread, inside the steps' span: waits the step's
    own thread did not make, so the cost rule cannot charge them (listed with that reason)."""
    wins = step_windows(ev)
    steps = _step_ranges(ev)
    if not wins:
        return ev.iloc[0:0]
    pid, tid = steps.pid.iloc[0], steps.tid.iloc[0]
    lo, hi = wins[0][0], wins[-1][1]
    o = ev[ev.cat.isin(HOST_API_CATS) & ev.name.isin(list(SYNC_KINDS)) & ~((ev.pid == pid) & (ev.tid == tid))
           & (ev.ts >= lo) & (ev.ts < hi)].copy()
    o["kind"] = o.name.map(SYNC_KINDS)
    o["step"] = [_step_of(t, wins) for t in o.ts]
    return o.reset_index(drop=True)


def h2d_copies(ev: pd.DataFrame) -> pd.DataFrame:
    """GPU-side host-to-device copies with their source memory (pageable or pinned)."""
    c = ev[(ev.cat == "gpu_memcpy") & ev.name.str.contains("HtoD")].copy()
    c["source"] = ["pinned" if "Pinned" in n else "pageable" for n in c.name]
    return c


def d2h_copies(ev: pd.DataFrame) -> pd.DataFrame:
    """GPU-side device-to-host copies with their destination memory (pageable or pinned). A copy
    into pageable memory returns only when it has run, whatever `non_blocking` said."""
    c = ev[(ev.cat == "gpu_memcpy") & ev.name.str.contains("DtoH")].copy()
    c["dest"] = ["pinned" if "Pinned" in n else "pageable" for n in c.name]
    return c


def counts_per_step(ev: pd.DataFrame, calls: Optional[pd.DataFrame] = None) -> dict:
    """Syncs by kind, H2D copies by source, and device allocations, averaged over the trace's steps.
    `calls` is `sync_calls(ev)` where the caller already has it."""
    wins = step_windows(ev)
    n = len(wins)
    calls = sync_calls(ev) if calls is None else calls
    step_syncs = calls[~calls.readback]
    out = {col: len(step_syncs[step_syncs.kind == k]) / n for k, col in SYNC_KIND_COLUMNS.items()}
    out["syncs_per_step"] = len(step_syncs) / n
    out["readback_syncs_per_step"] = int(calls.readback.sum()) / n
    # Copies belong to the step whose host thread issued them (correlation -> API call time).
    host = host_events(ev)
    host_api = host[host.cat.isin(HOST_API_CATS)]
    issued = dict(zip(host_api.correlation, host_api.ts))
    copies = h2d_copies(ev)
    in_steps = [any(s <= issued.get(c, -1) < e for s, e in wins) for c in copies.correlation]
    copies = copies[in_steps] if len(copies) else copies
    out["h2d_pageable_per_step"] = int((copies.source == "pageable").sum()) / n
    out["h2d_pinned_per_step"] = int((copies.source == "pinned").sum()) / n
    d2h = d2h_copies(ev)
    d2h = d2h[[any(s <= issued.get(c, -1) < e for s, e in wins) for c in d2h.correlation]] if len(d2h) else d2h
    out["d2h_per_step"] = len(d2h) / n
    out["d2h_pageable_per_step"] = int((d2h.dest == "pageable").sum()) / n
    # Device allocations from the caching allocator: [memory] events on CUDA with positive bytes.
    mem = ev[(ev.name == "[memory]") & (ev.device_type == 1) & (pd.to_numeric(ev.bytes, errors="coerce") > 0)]
    out["allocs_per_step"] = sum(any(s <= t < e for s, e in wins) for t in mem.ts) / n
    first = step_syncs.sort_values("ts").site
    out["sync_site"] = first.iloc[0] if len(first) else ""
    out["steps_in_trace"] = n
    return out


# --- attribution at run time: torch's sync debug mode with a captured stack ------------------
UNATTRIBUTED_SITE = "(no frame outside torch)"


def site_of(stack: traceback.StackSummary) -> str:
    """"path/file.py:LINE function" of the innermost frame outside torch and the warnings machinery
    (the last two path parts), or UNATTRIBUTED_SITE: counted even without a frame to name, so the
    total stays a true count."""
    for fr in reversed(stack):
        if not any(p in fr.filename for p in _TORCH_PATH_PARTS) and not fr.filename.endswith("warnings.py"):
            return f"{site_path(fr.filename)}:{fr.lineno} {fr.name}"
    return UNATTRIBUTED_SITE


@contextlib.contextmanager
def sync_debug_sites(on_sync: Optional[Callable[[str], None]] = None) -> Iterator[Counter]:
    """Count synchronizing CUDA operations by the "file:line function" of the innermost frame
    outside torch, using `torch.cuda.set_sync_debug_mode("warn")`. Yields a Counter filled as they
    fire; `on_sync(site)` is called for each, in firing order (the guard marks each in its trace)."""
    import torch  # here, not at the top: reading a trace needs no torch (measure.analysis_worker)

    sites: Counter = Counter()
    if not torch.cuda.is_available():
        yield sites
        return
    prev_mode = torch.cuda.get_sync_debug_mode()
    prev_show = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):
            return prev_show(message, category, filename, lineno, file, line)
        site = site_of(traceback.extract_stack()[:-1])
        sites[site] += 1
        if on_sync is not None:
            on_sync(site)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="Synchronization debug mode is a prototype feature")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield sites
        finally:
            torch.cuda.set_sync_debug_mode(prev_mode)
            warnings.showwarning = prev_show


def debug_sites_per_step(step: Callable[[], None], steps: int = 5) -> dict[str, float]:
    with sync_debug_sites() as sites:
        for _ in range(steps):
            step()
    return {k: v / steps for k, v in sites.items()}


# --- two independent counts of the same syncs, compared ---------------------------------------
def cross_check(counts: dict, debug_sites: dict[str, float]) -> dict:
    """Compare the trace's count of syncs outside the readback with sync debug mode's count.

    The trace counts blocking CUDA API calls; sync debug mode counts the operations torch itself
    flags as synchronizing. They see syncs through different doors, so a sync that one of them
    misses shows as a disagreement instead of a silent zero. Any difference is flagged (both are
    per-step means of whole counts; a sync in only some steps is worth a look too).
    Returns debug_syncs_per_step, sync_count_mismatch and sync_note (the two counts when they differ)."""
    debug = float(sum(debug_sites.values()))
    traced = float(counts["syncs_per_step"])
    mismatch = abs(debug - traced) > 1e-9
    note = (f"trace counts {traced:.2f} syncs per step, sync debug mode {debug:.2f}" if mismatch else "")
    return {"debug_syncs_per_step": debug, "sync_count_mismatch": mismatch, "sync_note": note}


def without_cuda(counts: dict) -> dict:
    """The counts of a run without CUDA: sync counts NaN, no comparison, and the note saying why."""
    out = dict(counts)
    out.update({c: float("nan") for c in SYNC_COUNT_COLUMNS})
    out.update(sync_count_mismatch=None, sync_note=NO_CUDA_NOTE)
    return out
