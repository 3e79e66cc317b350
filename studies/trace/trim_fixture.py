"""Trim a Kineto trace to its first N ProfilerStep#N steps, keeping its structure (metadata, every
thread's events in that span, the GPU work those host calls launched, by correlation): how the
committed fixtures under tests/fixtures/foreign_traces/ were cut from larger public traces.

    python -m studies.trace.trim_fixture IN.json.gz OUT.json.gz --steps 2
"""
from __future__ import annotations

import argparse
import gzip
import json
import re

GPU_SIDE = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync")


def trim(trace: dict, keep_steps: int) -> dict:
    evs = trace.get("traceEvents", [])
    steps = sorted(float(e["ts"]) for e in evs if e.get("cat") == "user_annotation"
                   and re.fullmatch(r"ProfilerStep#\d+", str(e.get("name", ""))))
    if len(steps) <= keep_steps:
        return trace
    lo, hi = steps[0], steps[keep_steps]
    on_host = lambda e: lo <= float(e.get("ts", lo)) < hi  # noqa: E731
    launched = {(e.get("args") or {}).get("correlation") for e in evs
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and on_host(e)} - {None}
    kept = [e for e in evs if e.get("ph") == "M"
            or (e.get("cat") in GPU_SIDE and ((e.get("args") or {}).get("correlation") in launched or on_host(e)))
            or (e.get("cat") not in GPU_SIDE and e.get("ph") in ("X", "i") and on_host(e))]
    return {**trace, "traceEvents": kept}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()
    with gzip.open(a.src, "rt") as f:
        trace = json.load(f)
    with gzip.open(a.dst, "wt") as f:
        json.dump(trim(trace, a.steps), f)


if __name__ == "__main__":
    main()
