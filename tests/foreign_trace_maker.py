"""Small synthetic Kineto-shaped traces for the `trace` tests: one host thread launching kernels
(or graph replays), a sync that drains the queue, step markers of the user's kind."""
from __future__ import annotations

import gzip
import json
from pathlib import Path


def _x(name, cat, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def step_events(t0: float, step: int, *, corr0: int, marker: str = "ProfilerStep#{}", graph: bool = False,
                kernels: bool = True, gpu_shift: float = 0.0, tid=1) -> list[dict]:
    """One step at t0 (µs): a 1000 µs kernel (or graph replay) launched at t0+10, a stream sync that
    waits for it (t0+20..t0+1015), then a 5 µs kernel launched at t0+1100 after 80 µs of host work."""
    name = marker.format(step)
    launch = "cudaGraphLaunch" if graph else "cudaLaunchKernel"
    evs = [_x(name, "user_annotation", t0, 1200, tid=tid),
           _x(launch, "cuda_runtime", t0 + 10, 5, tid=tid, correlation=corr0),
           _x("aten::item", "cpu_op", t0 + 18, 1000, tid=tid),
           _x("cudaStreamSynchronize", "cuda_runtime", t0 + 20, 995, tid=tid, correlation=corr0 + 1),
           _x("cudaLaunchKernel", "cuda_runtime", t0 + 1100, 5, tid=tid, correlation=corr0 + 2)]
    if kernels:
        evs += [_x("big_kernel", "kernel", t0 + 16 + gpu_shift, 1000, pid=0, tid=7, correlation=corr0, stream=7),
                _x("small_kernel", "kernel", t0 + 1107 + gpu_shift, 5, pid=0, tid=7, correlation=corr0 + 2, stream=7)]
    return evs


def trace(steps: int = 4, **kw) -> dict:
    evs = []
    for i in range(steps):
        evs += step_events(10_000.0 + 1300.0 * i, i, corr0=10 * i + 1, **kw)
    return {"schemaVersion": 1, "deviceProperties": [{"name": "Synthetic GPU"}], "traceEvents": evs}


def write(path: Path, tr: dict) -> Path:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as f:
        json.dump(tr, f)
    return path
