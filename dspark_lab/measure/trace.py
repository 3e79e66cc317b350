"""torch.profiler traces as tidy DataFrames, captured live or loaded from recorded Chrome-trace JSON.

Parsing works on the Chrome-trace JSON that torch.profiler exports (never on the profiler object),
so a live capture and a trace recorded on a GPU and committed as a test fixture take the same path.
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import pandas as pd

from dspark_lab.measure.native_noise import native_stderr_filtered

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# record_function ranges on the host. A range that launched GPU work is mirrored on the GPU
# timeline as a `gpu_user_annotation` of the same name, which must not count as a second range.
HOST_RANGE_CAT = "user_annotation"
HOST_API_CATS = ("cuda_runtime", "cuda_driver")
_PY_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<func>.*)$")


def _experimental_config():
    """Ask for CUDA sync events where this torch has the option (2.4+)."""
    try:  # a private module of torch's: absent or different on some versions
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except (ImportError, TypeError):
        return None


def _default_sync() -> None:
    import torch  # torch is imported where a trace is made, not where one is read (the analysis worker)

    if torch.cuda.is_available():
        torch.cuda.synchronize()


@contextlib.contextmanager
def profiled(*, with_stack: bool = False, profile_memory: bool = True,
             sync: Optional[Callable[[], None]] = None, keep_file: bool = False) -> Iterator[dict]:
    """One profiler session around the block: CPU, plus CUDA and its sync events where there is a
    GPU; Python stacks on request. `sync` (default: the device's) runs inside the session at the
    block's end, so the GPU's records are complete. Yields a dict that holds the Chrome-trace JSON
    under "trace" after exit (the one capture the lab's measurement and the guard share), or with
    `keep_file` the path of the exported JSON file under "path" (the caller removes it)."""
    import torch
    from torch.autograd import profiler as autograd_profiler

    cuda = torch.cuda.is_available()
    # torch.autograd.profiler.profile with Kineto is the session torch.profiler.profile wraps. Used
    # directly because torch.profiler.profile's start probes hasattr(torch, "_inductor"), which
    # imports the compiler stack on first use (2.5 s of imports on this CPU machine; the first live
    # update waited for it); its only use there is the inductor cudagraphs setting, which
    # the lab never turns on (its graphs are torch.cuda.CUDAGraph, not torch.compile's).
    kwargs = dict(use_kineto=True, use_cpu=True, use_device="cuda" if cuda else None,
                  record_shapes=False, profile_memory=profile_memory, with_stack=with_stack)
    cfg = _experimental_config() if cuda else None
    if cfg is not None:
        kwargs["experimental_config"] = cfg
    out: dict = {}
    prof = autograd_profiler.profile(**kwargs)
    with native_stderr_filtered():  # the profiler's own start-up messages (measure/native_noise.py)
        prof.__enter__()
    try:
        yield out
        (sync or _default_sync)()
    finally:
        with native_stderr_filtered():
            prof.__exit__(*sys.exc_info())
    fd, path = tempfile.mkstemp(prefix="dspark-trace-", suffix=".json")
    os.close(fd)
    kept = False
    try:
        prof.export_chrome_trace(path)
        if keep_file:
            out["path"], kept = path, True
        else:
            out["trace"] = read_exported(path)
    finally:
        if not kept:
            os.unlink(path)


def read_exported(path: str) -> dict:
    """The trace the profiler exported to `path`. A file cut short is the disk's fault, not the
    trace's: OSError saying so (a JSONDecodeError there once read as a broken measurement)."""
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as e:
        size = os.path.getsize(path)
        raise OSError(f"the profiler's trace at {path} is incomplete ({size} bytes, {type(e).__name__}): "
                      "the disk is full or a file size limit (ulimit -f) was reached") from None


def capture(step: Callable[[], None], steps: int, *, warmup: int = 2, with_stack: bool = False,
            sync: Optional[Callable[[], None]] = None, keep_file: bool = False):
    """Profile `steps` calls of `step` after `warmup` unprofiled ones (CPU + CUDA activities,
    memory; Python stacks on request) and return the Chrome-trace JSON as a dict (with
    `keep_file`: the exported file's path, which the caller removes)."""
    sync = sync or _default_sync
    for _ in range(warmup):
        step()
    sync()
    with profiled(with_stack=with_stack, sync=sync, keep_file=keep_file) as out:
        for _ in range(steps):
            step()
    return out["path"] if keep_file else out["trace"]


def load_json(src: Union[str, Path, dict]) -> dict:
    if isinstance(src, dict):
        return src
    p = Path(src)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as f:
        return json.load(f)


def events(trace: Union[str, Path, dict]) -> pd.DataFrame:
    """One row per complete ("X") or instant ("i") event: name, cat, ts/dur/end (µs), pid, tid,
    correlation, bytes, device_type, and the raw args."""
    rows = []
    for e in load_json(trace).get("traceEvents", []):
        ph = e.get("ph")
        if ph not in ("X", "i"):
            continue
        args = e.get("args") or {}
        ts = float(e.get("ts", 0.0))
        dur = float(e.get("dur", 0.0)) if ph == "X" else 0.0
        rows.append(
            dict(
                name=e.get("name", ""), cat=e.get("cat", ""), ph=ph, ts=ts, dur=dur, end=ts + dur,
                pid=e.get("pid"), tid=e.get("tid"),
                correlation=args.get("correlation"), bytes=args.get("Bytes", args.get("bytes")),
                device_type=args.get("Device Type"), args=args,
            )
        )
    df = pd.DataFrame(rows, columns=["name", "cat", "ph", "ts", "dur", "end", "pid", "tid", "correlation", "bytes", "device_type", "args"])
    return df.sort_values("ts", kind="stable").reset_index(drop=True)


def python_frame(name: str) -> Optional[tuple[str, int, str]]:
    """Parse a python_function event name "path/file.py(27): func" into (path, line, func)."""
    m = _PY_FRAME.match(name)
    if not m:
        return None
    return m["file"], int(m["line"]), m["func"]


def with_distributed_info(trace: dict, rank: int = 0, world_size: int = 1) -> dict:
    """Holistic Trace Analysis needs a rank in the trace's `distributedInfo`."""
    out = dict(trace)
    info = dict(out.get("distributedInfo") or {})
    info.setdefault("backend", "nccl")
    info.setdefault("rank", rank)
    info.setdefault("world_size", world_size)
    out["distributedInfo"] = info
    return out


def export(trace: dict, path: Union[str, Path], rank: int = 0) -> Path:
    """Write a Chrome-trace JSON that Perfetto opens and HTA loads (`rank<rank>` in its name)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "wt") as f:
        json.dump(with_distributed_info(trace, rank), f)
    return p


def is_host_range(e: dict, name: str) -> bool:
    return e.get("name") == name and e.get("ph") == "X" and e.get("cat") == HOST_RANGE_CAT


def window(trace: dict, range_name: str) -> dict:
    """The metadata and the events inside the (first) host range called `range_name`."""
    evs = trace.get("traceEvents", [])
    r = next((e for e in evs if is_host_range(e, range_name)), None)
    if r is None:
        raise ValueError(f"the trace has no range named {range_name!r}")
    lo, hi = float(r["ts"]), float(r["ts"]) + float(r["dur"])
    out = dict(trace)
    out["traceEvents"] = [e for e in evs if e.get("ph") not in ("X", "i") or lo <= float(e.get("ts", lo)) <= hi]
    return out


def trim(trace: dict, step_range: str, keep_steps: int) -> dict:
    """Keep the metadata and the events of the first `keep_steps` steps (for small fixtures).

    GPU work runs after the host call that queued it, often after the next step has started on
    the host: GPU events are kept by their correlation with a kept host call, not by time."""
    evs = trace.get("traceEvents", [])
    starts = sorted(e["ts"] for e in evs if is_host_range(e, step_range))
    if len(starts) <= keep_steps:
        return trace
    lo = starts[0] - 1.0
    hi = starts[keep_steps]  # the start of the first dropped step

    def on_host_in_window(e: dict) -> bool:
        return lo <= float(e.get("ts", lo)) < hi

    launched = {(e.get("args") or {}).get("correlation") for e in evs
                if e.get("cat") in HOST_API_CATS and on_host_in_window(e)}
    launched.discard(None)
    kept = []
    for e in evs:
        if e.get("ph") not in ("X", "i"):
            kept.append(e)
        elif e.get("cat") in GPU_CATS + ("gpu_user_annotation", "cuda_sync"):
            if (e.get("args") or {}).get("correlation") in launched or (
                    e.get("cat") in ("gpu_user_annotation", "cuda_sync") and on_host_in_window(e)):
                kept.append(e)
        elif on_host_in_window(e):
            kept.append(e)
    out = dict(trace)
    out["traceEvents"] = kept
    return out
