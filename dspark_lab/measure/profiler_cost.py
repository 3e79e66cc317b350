"""The profiler's own host time per event it records, measured on this machine.

A charge is read from a profiled step, so the GPU idle gap after a wait can hold the profiler's own
host time for the events the host records before its next launch. `calibrate` times a loop of small
launches with the GPU busy ahead (the host never waits) with and without the profiler, counts the
host events the profiler recorded per iteration, and fits one cost per event over two loop bodies of
different event mixes (each repeat's profiled loop paired with an unprofiled one just before it). It
is a model: one cost per recorded event, whatever its kind; the record keeps each body's own figure.
The kit does not take it off the charge: on an H200, this cost times the host events recorded in each
charged gap came to more than the step's whole profiled-over-profiler-free time in 9 of the 15 gallery
cases measured (data/machines/h200-headroom-profiler-taken-off-20261204.json, parts'
gpu_idle_profiler_ms against profiled_step_ms less step_ms); the study records the cost itself under
data/machines/<gpu>-profiler-cost-<stamp>.json.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from typing import Callable

import numpy as np

# Host events the profiler records per framework call: ops, runtime/driver calls, ranges, Python
# frames (with stacks), allocator instants (memory profiling).
HOST_EVENT_CATS = ("cpu_op", "cuda_runtime", "cuda_driver", "user_annotation", "python_function",
                   "cpu_instant_event")
CALIBRATION_RANGE = "dspark:profiler-calibration"
GPU_AHEAD_CYCLES = 200_000_000  # about 0.1 s of GPU spin queued ahead: the loop never waits for the GPU
ITERS = 100
REPEATS = 5
PYTHON_DEPTH = 8  # nested Python calls per iteration of the Python-heavy body (frames under stacks)


def _bodies(torch) -> dict[str, Callable[[], None]]:
    x = torch.ones(256, device="cuda")
    y = torch.ones(256, device="cuda")

    def nest(k: int) -> None:
        if k:
            nest(k - 1)

    def launch() -> None:  # two ops, two launches, an allocation and its free
        x.add_(y * 2.0)

    def python() -> None:  # the same launches under PYTHON_DEPTH Python frames
        nest(PYTHON_DEPTH)
        x.add_(y * 2.0)
    return {"launch": launch, "python": python}


def _timed_loop(torch, body: Callable[[], None], iters: int, marked: bool = False) -> float:
    """Host µs per iteration of `body`, the GPU busy ahead so no launch waits; `marked`: the loop
    alone inside a CALIBRATION_RANGE (for counting its events)."""
    torch.cuda._sleep(GPU_AHEAD_CYCLES)
    mark = torch.profiler.record_function(CALIBRATION_RANGE) if marked else contextlib.nullcontext()
    with mark:
        t0 = time.perf_counter()
        for _ in range(iters):
            body()
        dt = (time.perf_counter() - t0) * 1e6 / iters
    torch.cuda.synchronize()
    return dt


def events_in_ranges(trace: dict, range_name: str) -> list[int]:
    """Per host range called `range_name`: the host events inside it on its thread (not the range)."""
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") in ("X", "i")]
    ranges = [e for e in evs if e.get("name") == range_name and e.get("cat") == "user_annotation"
              and e.get("ph") == "X"]
    counts = []
    for r in sorted(ranges, key=lambda e: float(e["ts"])):
        lo, hi = float(r["ts"]), float(r["ts"]) + float(r.get("dur", 0.0))
        counts.append(sum(1 for e in evs if e is not r and e.get("cat") in HOST_EVENT_CATS
                          and e.get("tid") == r.get("tid") and lo < float(e.get("ts", lo)) < hi))
    return counts


def fit(pairs: dict[str, list[tuple[float, float, float]]]) -> dict:
    """One cost per event from (unprofiled µs/iteration, profiled µs/iteration, events/iteration) per
    repeat and body: the least-squares slope through the origin of excess on events, and per body the
    median of excess/events (how far one cost per event holds)."""
    rows = [(p - f, k) for reps in pairs.values() for f, p, k in reps if k > 0]
    if not rows:
        raise ValueError("the profiled loops recorded no host events: nothing to calibrate")
    excess, events = np.array(rows, float).T
    out = {"us_per_event": float((excess * events).sum() / (events ** 2).sum()), "bodies": {}}
    for name, reps in pairs.items():
        per = [(p - f) / k for f, p, k in reps if k > 0]
        out["bodies"][name] = {"us_per_event": statistics.median(per), "min": min(per), "max": max(per),
                               "events_per_iter": statistics.median(k for _, _, k in reps),
                               "host_us_per_iter_free": statistics.median(f for f, _, _ in reps),
                               "host_us_per_iter_profiled": statistics.median(p for _, p, _ in reps)}
    return out


def calibrate(with_stack: bool = False, profile_memory: bool = True, iters: int = ITERS,
              repeats: int = REPEATS) -> dict:
    """On CUDA: the profiler's host cost per recorded event under the kit's profiler settings
    (measure.trace.profiled), fitted over both bodies, each repeat's profiled loop paired with an
    unprofiled one just before it."""
    import torch

    from dspark_lab.measure import trace

    if not torch.cuda.is_available():
        raise RuntimeError("calibrating the profiler's cost needs CUDA")
    t0 = time.perf_counter()
    pairs: dict = {}
    for name, body in _bodies(torch).items():
        _timed_loop(torch, body, iters)  # warm: the first launches and the allocator's first blocks
        for _ in range(repeats):
            free = _timed_loop(torch, body, iters)
            with trace.profiled(with_stack=with_stack, profile_memory=profile_memory) as got:
                prof = _timed_loop(torch, body, iters, marked=True)
            k = events_in_ranges(got["trace"], CALIBRATION_RANGE)
            pairs.setdefault(name, []).append((free, prof, (k[0] if k else 0) / iters))
    out = fit(pairs)
    out.update(with_stack=with_stack, profile_memory=profile_memory, iters=iters, repeats=repeats,
               seconds=time.perf_counter() - t0)
    return out
