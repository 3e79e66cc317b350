"""Measure the platform card on this device: every kind of copy in results.analyses.card.SOURCES, at each
size, with the GPU queue empty and with calibrated work queued ahead.

    card = measure_card()                    # needs CUDA; card["wall_s"] is how long it took
    results.analyses.card.save(card, "data/machines/" + results.analyses.card.file_name(card))

Per cell: the host time of each call (perf_counter around the call alone), the copy's GPU time
(CUDA events around it), and, once per source and size with the queue empty, what sync debug
mode flags and which blocking CUDA calls and GPU copies the profiler's trace shows. The verdicts
are derived from these when the card is read (results.analyses.card.frame), never stored.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Callable, Optional, Sequence

import torch

from dspark_lab.measure import card_host, card_primitives, probe, syncs, trace
from dspark_lab.results.analyses import card as card_results
from dspark_lab.results.analyses import card_primitives as prim_results

_RANGE_PREFIX = "dspark-card:"
_INT32 = 4


def _copy_call(source: str, size_bytes: int, dev: torch.device) -> Callable[[], object]:
    """The call that makes one copy of `size_bytes` from `source`; its buffers are made here, before
    any timing, so that a cell times the copy and not the allocation of its operands (except where
    allocating is the form: torch.tensor(..., device=) and the read-backs)."""
    n = max(1, size_bytes // _INT32)
    i32 = torch.int32
    if source == "pageable_to_nb":
        src = torch.ones(n, dtype=i32)
        return lambda: src.to(dev, non_blocking=True)
    if source == "pinned_to_nb":
        src = torch.ones(n, dtype=i32, pin_memory=True)
        return lambda: src.to(dev, non_blocking=True)
    if source == "pinned_strided_to_nb":
        src = torch.ones(2 * n, dtype=i32, pin_memory=True)[::2]  # PyTorch first makes a contiguous (pageable) copy
        return lambda: src.to(dev, non_blocking=True)
    if source in ("pageable_copy", "pinned_copy"):
        src = torch.ones(n, dtype=i32, pin_memory=source == "pinned_copy")
        dst = torch.empty(n, dtype=i32, device=dev)
        return lambda: dst.copy_(src)
    if source == "tensor_device":
        if size_bytes == card_results.SCALAR_BYTES:
            return lambda: torch.tensor(123, dtype=i32, device=dev)  # device_direct's form (PR #34782)
        values = list(range(n))
        return lambda: torch.tensor(values, dtype=i32, device=dev)
    src_dev = torch.ones(n, dtype=i32, device=dev)
    if source in ("into_pageable_nb", "into_pinned_nb"):
        host = torch.empty(n, dtype=i32, pin_memory=source == "into_pinned_nb")
        return lambda: host.copy_(src_dev, non_blocking=True)
    if source == "into_pinned_strided_nb":
        host = torch.empty(2 * n, dtype=i32, pin_memory=True)[::2]
        return lambda: host.copy_(src_dev, non_blocking=True)
    if source == "to_cpu_nb":
        return lambda: src_dev.to("cpu", non_blocking=True)
    if source == "cpu":
        return lambda: src_dev.cpu()
    if source == "readback":
        return (lambda: src_dev[0].item()) if n == 1 else (lambda: src_dev.tolist())
    if source in ("d2d_copy_nb", "d2d_copy"):
        dst = torch.empty(n, dtype=i32, device=dev)
        return lambda: dst.copy_(src_dev, non_blocking=source == "d2d_copy_nb")
    if source == "fill":
        return lambda: src_dev.fill_(7)
    raise ValueError(f"source must be one of {', '.join(card_results.SOURCES)}; got {source!r}")


def _timed(call: Callable[[], object], queued_ms: float) -> tuple[float, float]:
    """(host µs of the call, GPU µs of what it queued) with `queued_ms` of GPU work queued ahead."""
    torch.cuda.synchronize()
    if queued_ms > 0:
        probe.busy_kernel(queued_ms)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    t0 = time.perf_counter()
    call()
    host_us = (time.perf_counter() - t0) * 1e6
    b.record()
    b.synchronize()
    return host_us, a.elapsed_time(b) * 1e3


def _debug_syncs(call: Callable[[], object]) -> int:
    """How many synchronizing operations sync debug mode flags in one call."""
    torch.cuda.synchronize()
    with syncs.sync_debug_sites() as sites:
        call()
    torch.cuda.synchronize()
    return int(sum(sites.values()))


def _seen_in_trace(calls: dict) -> dict:
    """One profiled call per (source, size) in its own range: the blocking CUDA API calls and the
    GPU copies (by the profiler's memcpy names) each range holds."""
    with trace.profiled(profile_memory=False) as out:
        for key, call in calls.items():
            torch.cuda.synchronize()
            with torch.profiler.record_function(f"{_RANGE_PREFIX}{key[0]}:{key[1]}"):
                call()
    ev = trace.events(out["trace"])
    ranges = ev[(ev.cat == trace.HOST_RANGE_CAT) & ev.name.str.startswith(_RANGE_PREFIX)]
    api = ev[ev.cat.isin(trace.HOST_API_CATS)]
    gpu_copies = ev[ev.cat == "gpu_memcpy"]
    seen = {}
    for r in ranges.itertuples():
        source, size = r.name[len(_RANGE_PREFIX):].rsplit(":", 1)
        inside = api[(api.tid == r.tid) & (api.ts >= r.ts) & (api.end <= r.end)]
        blocking = inside[inside.name.isin(list(syncs.SYNC_KINDS))]
        launched = set(inside.correlation.dropna())
        names = gpu_copies[gpu_copies.correlation.isin(launched)].name
        seen[(source, int(size))] = {"trace_syncs": int(len(blocking)), "trace_sync_calls": sorted(set(blocking.name)),
                                     "gpu_copies": sorted(set(names))}
    return seen


def _check_card_args(sizes: Sequence[int], queued_ms: Sequence[float], reps: int, sources: list) -> None:
    """ValueError naming the argument and what it allows."""
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive integer; got {reps!r}")
    if not sizes or any(not isinstance(n, int) or n < 4 or n % 4 for n in sizes):
        raise ValueError(f"sizes must be byte counts, multiples of 4 from 4 up (int32 elements); got {list(sizes)!r}")
    if any(q < 0 for q in queued_ms) or not any(q > 0 for q in queued_ms):
        raise ValueError(f"queued_ms must hold numbers >= 0, one of them > 0; got {list(queued_ms)!r}")
    for s in sources:
        if s not in card_results.SOURCES:
            raise ValueError(f"sources: each must be one of {', '.join(card_results.SOURCES)}; got {s!r}")


def _measure_cells(source: str, size: int, dev, queued_ms: Sequence[float], reps: int, calls: dict) -> list[dict]:
    """The cells of one copy (one per queue depth); a failed copy gives cells that say why."""
    direction = card_results.SOURCES[source][0]
    try:
        call = _copy_call(source, size, dev)
        for _ in range(2):  # warm-up: first-call allocations and lazy init are not the copy
            call()
        torch.cuda.synchronize()
        timed = {q: [] for q in queued_ms}
        for _ in range(reps):  # the queue depths interleaved, so drift hits both alike
            for q in queued_ms:
                timed[q].append(_timed(call, q))
        debug = _debug_syncs(call)
        calls[(source, size)] = call
        cells = []
        for q in queued_ms:
            gpu = sorted(g for _, g in timed[q])
            cells.append(dict(direction=direction, source=source, size_bytes=int(size), queued_ms=float(q),
                              host_us=[round(h, 2) for h, _ in timed[q]], copy_gpu_us=round(gpu[len(gpu) // 2], 2),
                              debug_syncs=debug))
        return cells
    except (RuntimeError, ValueError, TypeError) as e:  # a failed cell is recorded, the card goes on
        return [dict(direction=direction, source=source, size_bytes=int(size), queued_ms=float(q),
                     host_us=[], error=f"{type(e).__name__}: {e}") for q in queued_ms]


def _primitives(queued_ms: Sequence[float], reps: Optional[int], progress: Callable[[str], None]) -> dict:
    """The card's wait/launch fields (measure.card_primitives), {} where `reps` is None."""
    if reps is None:
        return {}
    t0 = time.perf_counter()
    cells = card_primitives.measure_primitives(queued_ms, reps, progress)
    return {"primitives": cells, "primitive_reps": reps, "primitive_rule": prim_results.PRIMITIVE_RULE,
            "primitive_wall_s": round(time.perf_counter() - t0, 1)}


def measure_card(sizes: Sequence[int] = card_results.SIZES, queued_ms: Sequence[float] = (0.0, 10.0), reps: int = 5,
                 sources: Optional[Sequence[str]] = None, progress: Callable[[str], None] = lambda s: None,
                 primitive_reps: Optional[int] = None) -> dict:
    """The card of this device (a dict in the results.analyses.card format), with its host and, with
    `primitive_reps` repeats, the wait/launch cells (measure.card_primitives; doctor --card takes 21).
    Raises RuntimeError without CUDA."""
    sources = list(sources or card_results.SOURCES)
    _check_card_args(sizes, queued_ms, reps, sources)
    if primitive_reps is not None and (isinstance(primitive_reps, bool) or not isinstance(primitive_reps, int)
                                       or primitive_reps < 3):
        raise ValueError(f"primitive_reps must be None or an integer >= 3; got {primitive_reps!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("the platform card needs a CUDA device (none is visible here); "
                           "recorded cards are read with dspark_lab.results.analyses.card.recorded()")
    t_start = time.perf_counter()
    dev = torch.device("cuda")
    # The wait/launch cells first, so no profiler (the trace pass below) has run in this process when they are timed.
    extra = {"host": card_host.host(), **_primitives(queued_ms, primitive_reps, progress)}
    probe.calibrate_sleep()
    cells, calls = [], {}
    for source in sources:
        cap = card_results.SOURCES[source][2]
        for size in sizes:
            if cap is None or size <= cap:
                cells.extend(_measure_cells(source, size, dev, queued_ms, reps, calls))
        progress(f"card: {source} done ({time.perf_counter() - t_start:.1f} s)")
    trace_error = ""
    try:
        seen = _seen_in_trace(calls)
    except Exception as e:  # noqa: BLE001 - the timings stand without the trace; the card says why
        seen, trace_error = {}, f"{type(e).__name__}: {e}"
    for c in cells:
        c.update(seen.get((c["source"], c["size_bytes"]), {}))
    torch.cuda.synchronize()
    return {**extra, "trace_error": trace_error, "kind": card_results.CARD_KIND, "schema": card_results.CARD_SCHEMA, "fingerprint": probe.fingerprint(),
            "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"), "queued_ms": [float(q) for q in queued_ms],
            "reps": reps, "rule": card_results.VERDICT_RULE, "sleep_clock_hz": probe.sleep_clock_hz(),
            "wall_s": round(time.perf_counter() - t_start, 1), "cells": cells}
