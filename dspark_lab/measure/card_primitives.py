"""Measure the card's wait/launch cells (results.analyses.card_primitives.PRIMITIVES) on this device,
each with the GPU queue empty and with calibrated work queued ahead (torch.cuda._sleep through
probe.busy_kernel), over repeats interleaving the queue depths.

    cells = measure_primitives(queued_ms=(0.0, 10.0), reps=21)   # needs CUDA

Per repeat: the device is synchronized, the cell's untimed set-up runs, the queue is filled, the call's
operands are made (an event recorded behind the queued work), then the call alone is timed by wall
clock (perf_counter) and by process CPU time (process_time, every thread of the process). A call that
returns without waiting (stream bookkeeping, a launch) is timed `inner` times in a row and divided. The budget: about
cells x reps x queued ms, since only the queued depth runs the busy kernel (the card records its own wall time,
`primitive_wall_s`).
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import torch

from dspark_lab.measure import probe
from dspark_lab.measure.card_graphs import decode_graph, linear_graph
from dspark_lab.results.analyses import card_primitives as prim_results

GRAPH_NODES = {"graph_linear": (1, 10, 100, 1000), "graph_decode": (10, 100, 1000)}
PIN_SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
_INNER = {"wait_stream": 20, "wait_event": 20, "event_record": 20, "current_stream": 200, "set_stream": 200,
          "kernel_launch": 20}


def _timed_once(call: Callable[[], object], inner: int) -> tuple[float, float]:
    """(wall µs, process CPU µs) per call of `inner` calls in a row."""
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(inner):
        call()
    wall = time.perf_counter() - t0
    return wall * 1e6 / inner, (time.process_time() - c0) * 1e6 / inner


def _repeat(make: Callable[[], Callable[[], object]], queued_ms: Sequence[float], reps: int, inner: int = 1,
            setup: Optional[Callable[[], None]] = None) -> dict:
    """queue depth -> {"host_us": [...], "cpu_us": [...]}: per repeat and depth, `setup` (before the
    queue is filled), then the queue, then `make()` builds the call (after the queued work), then the timing."""
    out = {q: {"host_us": [], "cpu_us": []} for q in queued_ms}
    for _ in range(reps):
        for q in queued_ms:
            torch.cuda.synchronize()
            if setup is not None:
                setup()
            if q > 0:
                probe.busy_kernel(q)
            call = make()
            wall, cpu = _timed_once(call, inner)
            out[q]["host_us"].append(round(wall, 3))
            out[q]["cpu_us"].append(round(cpu, 3))
    torch.cuda.synchronize()
    return out


def _event_sync(blocking: bool) -> Callable[[], Callable[[], object]]:
    def make():
        e = torch.cuda.Event(blocking=blocking)
        e.record()
        return e.synchronize
    return make


def _stream_calls(dev: torch.device) -> dict:
    """name -> (make, inner) for the stream and launch cells (the side stream and operands made once)."""
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    x = torch.zeros(1, device=dev)
    rec = torch.cuda.Event()

    def wait_event():
        e = torch.cuda.Event()
        e.record(main)
        return lambda: side.wait_event(e)

    def set_pair():
        torch.cuda.set_stream(side)
        torch.cuda.set_stream(main)

    return {"wait_stream": (lambda: (lambda: side.wait_stream(main)), _INNER["wait_stream"]),
            "wait_event": (wait_event, _INNER["wait_event"]),
            "event_record": (lambda: rec.record, _INNER["event_record"]),
            "current_stream": (lambda: torch.cuda.current_stream, _INNER["current_stream"]),
            "set_stream": (lambda: set_pair, _INNER["set_stream"]),  # timed as a pair: to the side stream and back
            "kernel_launch": (lambda: (lambda: x.add_(1)), _INNER["kernel_launch"])}


def _handoff_gpu(queued_ms: Sequence[float], reps: int, dev: torch.device) -> dict:
    """queue depth -> {"gpu_us": two kernels handed from the main stream to a side one through an event,
    "gpu_one_stream_us": the same two kernels on one stream}: GPU time, CUDA events, start to end."""
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    x, y = torch.zeros(1, device=dev), torch.zeros(1, device=dev)
    out = {q: {"gpu_us": [], "gpu_one_stream_us": []} for q in queued_ms}
    for _ in range(reps):
        for q in queued_ms:
            for two in (True, False):
                torch.cuda.synchronize()
                if q > 0:
                    probe.busy_kernel(q)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(main)
                x.add_(1)
                if two:
                    e = torch.cuda.Event()
                    e.record(main)
                    side.wait_event(e)
                with torch.cuda.stream(side if two else main):
                    y.add_(1)
                    b.record()
                b.synchronize()
                out[q]["gpu_us" if two else "gpu_one_stream_us"].append(round(a.elapsed_time(b) * 1e3, 2))
    return out


def _pin_cells(size: int) -> dict:
    """name -> (setup, make) for pin_memory() of a fresh `size`-byte tensor: with the caching host
    allocator emptied first (a new pinned block) and with a block of that size just freed (its hit)."""
    empty_cache = getattr(torch._C, "_host_emptyCache", None)
    if empty_cache is None:
        raise RuntimeError("torch._C._host_emptyCache is missing in this torch: the host cache cannot be emptied")
    src = torch.empty(size, dtype=torch.uint8)

    def warm():
        src.pin_memory()  # the pinned result is dropped at once: its block goes back to the cache

    return {"pin_fresh": (empty_cache, lambda: src.pin_memory), "pin_cached": (warm, lambda: src.pin_memory)}


def _cells(name: str, param: int, timed: dict, inner: int, extra: Optional[dict] = None) -> list[dict]:
    return [dict(name=name, param=int(param), queued_ms=float(q), inner=int(inner), **timed[q], **((extra or {}).get(q, {})))
            for q in timed]


def _failed(name: str, param: int, queued_ms: Sequence[float], e: Exception) -> list[dict]:
    return [dict(name=name, param=int(param), queued_ms=float(q), host_us=[], error=f"{type(e).__name__}: {e}")
            for q in queued_ms]


def _warm(make: Callable, inner: int, setup: Optional[Callable] = None) -> None:
    for _ in range(3):  # first-call allocations and lazy initialisation are not the call
        if setup is not None:
            setup()
        _timed_once(make(), inner)
    torch.cuda.synchronize()


def _plan(dev: torch.device) -> list[tuple]:
    """(name, param, setup, make, inner) of every cell, the graphs captured and the operands made here."""
    plan = [("stream_sync", 0, None, lambda: torch.cuda.current_stream().synchronize, 1),
            ("device_sync", 0, None, lambda: torch.cuda.synchronize, 1),
            ("event_sync_spin", 0, None, _event_sync(False), 1),
            ("event_sync_blocking", 0, None, _event_sync(True), 1)]
    plan += [(name, 0, None, make, inner) for name, (make, inner) in _stream_calls(dev).items()]
    builders = {"graph_linear": linear_graph, "graph_decode": decode_graph}
    for shape, counts in GRAPH_NODES.items():
        for n in counts:
            plan.append((shape, n, None, (lambda b=builders[shape], n=n: _graph_make(b, n, dev)), 1))
    for size in PIN_SIZES:
        plan.append(("pin_fresh", size, None, None, 1))
        plan.append(("pin_cached", size, None, None, 1))
    return plan


_GRAPHS: dict = {}


def _graph_make(builder: Callable, nodes: int, dev: torch.device) -> Callable[[], object]:
    """The replay of the graph of this shape and size (captured on first use, kept for the card's run)."""
    key = (builder.__name__, nodes)
    if key not in _GRAPHS:
        _GRAPHS[key] = builder(nodes, dev)
    return _GRAPHS[key][0].replay


def _measure_one(name: str, param: int, setup, make, inner: int, queued_ms, reps: int) -> list[dict]:
    """The cells of one primitive (one per queue depth); a failure gives cells that say why."""
    try:
        if name in ("pin_fresh", "pin_cached"):
            setup, make = _pin_cells(param)[name]
        _warm(make, inner, setup)
        return _cells(name, param, _repeat(make, queued_ms, reps, inner, setup), inner)
    except (RuntimeError, ValueError, TypeError) as e:  # a failed cell is recorded, the card goes on
        return _failed(name, param, queued_ms, e)


def measure_primitives(queued_ms: Sequence[float] = (0.0, 10.0), reps: int = 21,
                       progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """The wait/launch cells of this device (the card's "primitives"). Raises RuntimeError without CUDA."""
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 3:
        raise ValueError(f"reps must be an integer >= 3 (a median and a spread); got {reps!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("the card's wait/launch cells need a CUDA device (none is visible here)")
    dev, t0 = torch.device("cuda"), time.perf_counter()
    probe.calibrate_sleep()
    cells = []
    for name, param, setup, make, inner in _plan(dev):
        cells += _measure_one(name, param, setup, make, inner, queued_ms, reps)
        if name == "wait_event" and not cells[-1].get("error"):
            gpu = _handoff_gpu(queued_ms, reps, dev)
            for c in cells[-len(queued_ms):]:
                c.update(gpu[c["queued_ms"]])
    _GRAPHS.clear()
    progress(f"card: wait/launch cells done ({time.perf_counter() - t0:.1f} s)")
    prim_results.validate({"primitives": cells}, "measured wait/launch cells")
    return cells
