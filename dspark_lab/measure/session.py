"""One profiler session with the kit's settings (CPU, CUDA with its sync events, memory; Python
stacks on request), exported to Chrome-trace JSON: the capture every measurement shares. Parsing the
trace lives in measure/trace.py; the profiler's own cost per event, measured with this session, in
measure/profiler_cost.py.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from typing import Callable, Iterator, Optional

from dspark_lab.measure.native_noise import native_stderr_filtered


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
