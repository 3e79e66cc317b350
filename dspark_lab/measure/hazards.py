"""Run each hazard form of results.analyses.hazards.FORMS under deliberate host run-ahead and count the
wrong values; and the kit's own strategies under the same run-ahead (none may deliver one).

Run-ahead: before every step a calibrated `torch.cuda._sleep` of `queued_ms` is queued, so the
GPU is behind the host for the whole loop and a value the host changes before the GPU reads it
shows as wrong. Values are checked on the GPU's side after one final synchronize, so the check
itself adds no sync inside the loop.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable

import torch

from dspark_lab import strategies
from dspark_lab.measure import probe
from dspark_lab.predicate import ParallelSettings
from dspark_lab.results.analyses import hazards as hazards_results

_I32 = torch.int32
_EP8 = ParallelSettings(ep_size=8)  # the predicate is true: every strategy makes its copy


def _wrong(got: torch.Tensor, n: int) -> int:
    torch.cuda.synchronize()
    want = torch.arange(1, n + 1, dtype=_I32)
    return int((got.cpu() != want).sum())


def pinned_reused(n: int, queued_ms: float, dev) -> int:
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    buf = torch.zeros((), dtype=_I32, pin_memory=True)
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        buf.fill_(i)
        out[i - 1].copy_(buf, non_blocking=True)
    return _wrong(out, n)


def pinned_fresh(n: int, queued_ms: float, dev) -> int:
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        out[i - 1].copy_(torch.tensor(i, dtype=_I32, pin_memory=True), non_blocking=True)
    return _wrong(out, n)


def pinned_double_buffer(n: int, queued_ms: float, dev) -> int:
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    bufs = [torch.zeros((), dtype=_I32, pin_memory=True) for _ in range(2)]
    done = [torch.cuda.Event() for _ in range(2)]
    for e in done:
        e.record()
    for i in range(1, n + 1):
        k = i % 2
        probe.busy_kernel(queued_ms)
        done[k].synchronize()  # the last copy out of bufs[k] has run: refilling it is safe
        bufs[k].fill_(i)
        out[i - 1].copy_(bufs[k], non_blocking=True)
        done[k].record()
    return _wrong(out, n)


def _graph(body: Callable[[], None]) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture, as torch.cuda.graphs advises
        body()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    torch.cuda.synchronize()
    return g


def graph_python_value(n: int, queued_ms: float, dev) -> int:
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    slot = torch.zeros((), dtype=_I32, device=dev)
    value = {"n": 0}
    g = _graph(lambda: slot.fill_(value["n"]))  # captures n = 0 as the kernel's argument
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        value["n"] = i
        g.replay()
        out[i - 1].copy_(slot)
    return _wrong(out, n)


def graph_device_buffer(n: int, queued_ms: float, dev) -> int:
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    slot = torch.zeros((), dtype=_I32, device=dev)
    src = torch.zeros((), dtype=_I32, device=dev)
    g = _graph(lambda: slot.copy_(src))
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        src.fill_(i)  # stream-ordered before the replay
        g.replay()
        out[i - 1].copy_(slot)
    return _wrong(out, n)


def _d2h(n: int, queued_ms: float, dev, wait: bool) -> int:
    got = torch.empty(n, dtype=_I32)
    val = torch.zeros((), dtype=_I32, device=dev)
    for i in range(1, n + 1):
        host = torch.full((), -1, dtype=_I32, pin_memory=True)
        probe.busy_kernel(queued_ms)
        val.fill_(i)
        host.copy_(val, non_blocking=True)
        if wait:
            ev = torch.cuda.Event()
            ev.record()
            ev.synchronize()
        got[i - 1] = host  # a CPU read: no sync, whatever the copy's state
    torch.cuda.synchronize()
    return int((got != torch.arange(1, n + 1, dtype=_I32)).sum())


def d2h_before_event(n: int, queued_ms: float, dev) -> int:
    return _d2h(n, queued_ms, dev, wait=False)


def d2h_after_event(n: int, queued_ms: float, dev) -> int:
    return _d2h(n, queued_ms, dev, wait=True)


FORM_FUNCTIONS = {f.__name__: f for f in (pinned_reused, pinned_fresh, pinned_double_buffer, graph_python_value,
                                          graph_device_buffer, d2h_before_event, d2h_after_event)}
assert set(FORM_FUNCTIONS) == set(hazards_results.FORMS), "every documented form has its function"


def strategy_under_run_ahead(name: str, n: int, queued_ms: float, dev) -> int:
    """Wrong values of the scalar made by one of the kit's strategies, consumed on the GPU each step."""
    fn = strategies.get(name).fn
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    buf = torch.zeros((), dtype=_I32, device=dev)
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        out[i - 1].copy_(fn(i, dev, _EP8, buffer=buf))
    return _wrong(out, n)


def measure_hazards(n: int = 200, queued_ms: float = 0.2) -> dict:
    """Every form and every strategy, n steps each with `queued_ms` queued per step (results.analyses.hazards format)."""
    if not torch.cuda.is_available():
        raise RuntimeError("the hazards need a CUDA device (pinned memory, CUDA graphs); none is visible here")
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2; got {n!r}")
    if queued_ms <= 0:
        raise ValueError(f"queued_ms must be > 0 (without queued work the host never runs ahead); got {queued_ms!r}")
    dev = torch.device("cuda")
    probe.calibrate_sleep()
    forms = [{"form": name, "wrong": f(n, queued_ms, dev), "n": n} for name, f in FORM_FUNCTIONS.items()]
    strats = [{"strategy": s, "wrong": strategy_under_run_ahead(s, n, queued_ms, dev), "n": n} for s in strategies.BUILTIN]
    return {"kind": hazards_results.HAZARDS_KIND, "schema": hazards_results.HAZARDS_SCHEMA,
            "fingerprint": probe.fingerprint(), "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "steps": n, "queued_ms_per_step": queued_ms, "forms": forms, "strategies": strats}
