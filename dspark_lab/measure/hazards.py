"""Run each hazard form of results.analyses.hazards.FORMS under deliberate host run-ahead and count the
wrong values; and the kit's own strategies under the same run-ahead (none may deliver one).

Run-ahead: before every step a calibrated `torch.cuda._sleep` of `queued_ms` is queued, so the
GPU is behind the host for the whole loop and a value the host changes before the GPU reads it
shows as wrong. Values are checked on the GPU's side after one final synchronize, so the check
itself adds no sync inside the loop.

Two curves beside the forms: the race's window (`refill_window`: wrong values against the host's
delay between a pinned copy and the refill of its source, for each GPU queue ahead of the copy in
WINDOW_QUEUED_US) and the size below which a pageable non-blocking copy never raced (`pageable_race`).
"""
from __future__ import annotations

import functools
import time
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


def pinned_freed_in_flight(n: int, queued_ms: float, dev) -> int:
    """pytorch #130785's shape: a pinned source dropped while its copy is queued, and a new pinned
    tensor of the same size made at once (the block the allocator would hand out if it reused it)."""
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    keep = []
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        out[i - 1].copy_(torch.full((), i, dtype=_I32, pin_memory=True), non_blocking=True)  # the source is freed here
        keep.append(torch.full((), -1, dtype=_I32, pin_memory=True))  # would overwrite it if its block came back
    return _wrong(out, n)


def _staging_graph(slot: torch.Tensor, staging: torch.Tensor) -> torch.cuda.CUDAGraph:
    return _graph(lambda: slot.copy_(staging, non_blocking=True))  # the graph records staging's host address


def graph_staging_reused(n: int, queued_ms: float, dev) -> int:
    """onnxruntime #32121's shape: a graph captured from a pooled staging buffer; the pool hands that
    buffer to another inference, and this one fills a different buffer before each replay."""
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    slot = torch.zeros((), dtype=_I32, device=dev)
    pool = [torch.zeros((), dtype=_I32, pin_memory=True) for _ in range(2)]
    g = _staging_graph(slot, pool[0])
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        torch.cuda.current_stream().synchronize()  # no copy in flight: only the address can be wrong
        pool[1].fill_(i)  # this inference's input, in the buffer the pool gave it now
        pool[0].fill_(-i)  # another inference's input, in the buffer the graph captured
        g.replay()
        out[i - 1].copy_(slot)
    return _wrong(out, n)


def graph_staging_owned(n: int, queued_ms: float, dev) -> int:
    """The graph owns its staging buffer: refilled each step, once the last replay's copy has run."""
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    slot = torch.zeros((), dtype=_I32, device=dev)
    staging = torch.zeros((), dtype=_I32, pin_memory=True)
    g = _staging_graph(slot, staging)
    done = torch.cuda.Event()
    done.record()
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        done.synchronize()  # the last replay has read the buffer: refilling it is safe
        staging.fill_(i)
        g.replay()
        done.record()
        out[i - 1].copy_(slot)
    return _wrong(out, n)


FORM_FUNCTIONS = {f.__name__: f for f in (pinned_reused, pinned_fresh, pinned_double_buffer, graph_python_value,
                                          graph_device_buffer, d2h_before_event, d2h_after_event,
                                          pinned_freed_in_flight, graph_staging_reused, graph_staging_owned)}
assert set(FORM_FUNCTIONS) == set(hazards_results.FORMS), "every documented form has its function"


# --- the race's window: wrong values against the delay between the copy and the refill ---------------
WINDOW_DELAYS_US = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0)
# GPU work queued ahead of the copy: none (the window is the copy's own latency, a few microseconds,
# which one Python call can outlast) and 100 us (the window is the queue: a refill before it drains is wrong).
WINDOW_QUEUED_US = (0.0, 100.0)
RACE_SIZES = tuple(4 << (2 * k) << 10 for k in range(8))  # 4 KiB ... 64 MiB, by 4x


def _spin_us(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def refill_window(delays_us=WINDOW_DELAYS_US, n: int = 200, queued_us=WINDOW_QUEUED_US) -> list[dict]:
    """pinned_reused: queue `queued` us of GPU work, copy, wait `delay` on the host, refill. A refill
    before the copy has run is a wrong value, so the window is the queue ahead of the copy plus the
    copy's own latency. The GPU is drained before each copy (outside the window), so each point
    measures the window alone. Call probe.calibrate_sleep() first when `queued_us` holds non-zero values."""
    dev = torch.device("cuda")
    buf = torch.zeros((), dtype=_I32, pin_memory=True)
    points = []
    for q in queued_us:
        for d in delays_us:
            out = torch.full((n,), -1, dtype=_I32, device=dev)
            for i in range(1, n + 1):
                torch.cuda.synchronize()
                if q:
                    probe.busy_kernel(q * 1e-3)
                buf.fill_(i)
                out[i - 1].copy_(buf, non_blocking=True)
                _spin_us(d)
                buf.fill_(-i)  # the refill: the next step's value
            points.append({"queued_us": q, "delay_us": d, "wrong": _wrong(out, n), "n": n})
    return points


def pageable_race(sizes=RACE_SIZES, n: int = 20) -> list[dict]:
    """A pageable source copied non-blocking on a side stream, overwritten as soon as the call returns:
    a copy raced when the device holds any overwritten value. Small copies are staged before the call
    returns (never raced); the size where that stops is this machine's."""
    dev = torch.device("cuda")
    side = torch.cuda.Stream()
    points = []
    for size in sizes:
        count = size // 4
        host = torch.empty(count, dtype=_I32)  # pageable
        dst = torch.empty(count, dtype=_I32, device=dev)
        raced = torch.zeros(n, dtype=torch.bool, device=dev)
        for k in range(n):
            torch.cuda.synchronize()
            host.fill_(k + 1)
            with torch.cuda.stream(side):
                dst.copy_(host, non_blocking=True)
            host.fill_(-1)  # the overwrite, at once
            side.synchronize()
            raced[k] = (dst != k + 1).any()
        points.append({"bytes": size, "raced": int(raced.sum()), "n": n})
    return points


def strategy_under_run_ahead(name: str, n: int, queued_ms: float, dev) -> int:
    """Wrong values of the scalar made by one of the kit's strategies, consumed on the GPU each step."""
    fn = strategies.get(name).fn
    out = torch.full((n,), -1, dtype=_I32, device=dev)
    buf = torch.zeros((), dtype=_I32, device=dev)
    for i in range(1, n + 1):
        probe.busy_kernel(queued_ms)
        out[i - 1].copy_(fn(i, dev, _EP8, buffer=buf))
    return _wrong(out, n)


def _run_form(name: str, f: Callable, n: int, queued_ms: float, dev) -> dict:
    """One form's count; a form that cannot run here (a capture refused) is recorded with its error."""
    try:
        return {"form": name, "wrong": f(n, queued_ms, dev), "n": n}
    except Exception as e:  # noqa: BLE001 -- one form's failure must not lose the others' counts
        torch.cuda.synchronize()
        return {"form": name, "wrong": None, "n": n, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}


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
    forms = [_run_form(name, f, n, queued_ms, dev) for name, f in FORM_FUNCTIONS.items()]
    strats = [{"strategy": s, "wrong": strategy_under_run_ahead(s, n, queued_ms, dev), "n": n} for s in strategies.BUILTIN]
    return {"kind": hazards_results.HAZARDS_KIND, "schema": hazards_results.HAZARDS_SCHEMA,
            "fingerprint": probe.fingerprint(), "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "steps": n, "queued_ms_per_step": queued_ms, "forms": forms, "strategies": strats,
            "window": refill_window(n=n), "pageable_race": pageable_race()}


# --- the forms as steps, for the race check (measure.races): each factory makes a step(i) -----------------
# The loop forms above count wrong values of a whole loop; measure.races runs a step N times and compares
# its outputs with a synchronized reference. The graph forms deliver the same value whether or not the host
# runs ahead (capture fixed it): a wrong value, not a race, so they have no step here.
def _h2d_step(dev, fill) -> Callable[[int], torch.Tensor]:
    def step(i: int) -> torch.Tensor:
        out = torch.empty((), dtype=_I32, device=dev)
        fill(out, i + 1)
        return out
    return step


def race_pinned_reused(dev):
    buf = torch.zeros((), dtype=_I32, pin_memory=True)

    def fill(out, v):
        buf.fill_(v)
        out.copy_(buf, non_blocking=True)
    return _h2d_step(dev, fill)


def race_pinned_fresh(dev):
    return _h2d_step(dev, lambda out, v: out.copy_(torch.tensor(v, dtype=_I32, pin_memory=True), non_blocking=True))


def race_pinned_double_buffer(dev):
    bufs = [torch.zeros((), dtype=_I32, pin_memory=True) for _ in range(2)]
    done = [torch.cuda.Event() for _ in range(2)]
    for e in done:
        e.record()

    def fill(out, v):
        k = v % 2
        done[k].synchronize()  # the last copy out of bufs[k] has run
        bufs[k].fill_(v)
        out.copy_(bufs[k], non_blocking=True)
        done[k].record()
    return _h2d_step(dev, fill)


def race_pinned_freed_in_flight(dev):
    keep = []

    def fill(out, v):
        out.copy_(torch.full((), v, dtype=_I32, pin_memory=True), non_blocking=True)
        keep.append(torch.full((), -1, dtype=_I32, pin_memory=True))
    return _h2d_step(dev, fill)


def _d2h_step(dev, wait: bool):
    val = torch.zeros((), dtype=_I32, device=dev)

    def step(i: int) -> torch.Tensor:
        host = torch.full((), -1, dtype=_I32, pin_memory=True)
        val.fill_(i + 1)
        host.copy_(val, non_blocking=True)
        if wait:
            ev = torch.cuda.Event()
            ev.record()
            ev.synchronize()
        return host  # read by the host as the step returns
    return step


def race_d2h_before_event(dev):
    return _d2h_step(dev, wait=False)


def race_d2h_after_event(dev):
    return _d2h_step(dev, wait=True)


def _condense_step(dev, wait: bool):
    """vLLM #51599's shape: a persistent pinned buffer receives a non-blocking device-to-host copy, and the
    host compacts it (moves a row down, as InputBatch.condense() does) while that copy may still land."""
    host = torch.zeros(2, dtype=_I32, pin_memory=True)
    vals = torch.zeros(2, dtype=_I32, device=dev)

    def step(i: int) -> torch.Tensor:
        vals.copy_(torch.tensor([i + 1, i + 2], dtype=_I32, pin_memory=True), non_blocking=True)
        host.copy_(vals, non_blocking=True)
        if wait:
            ev = torch.cuda.Event()
            ev.record()
            ev.synchronize()  # the copy has landed: the host may write the buffer
        host[0] = host[1]  # the condense: a host write into the buffer the copy writes
        return host
    return step


def race_pinned_written_in_flight(dev):
    return _condense_step(dev, wait=False)


def race_pinned_written_after_event(dev):
    return _condense_step(dev, wait=True)


# name -> (step factory, safe?, what it does): the loop forms' names where they have a step
RACE_FORMS = {
    "pinned_reused": (race_pinned_reused, hazards_results.FORMS["pinned_reused"][2], hazards_results.FORMS["pinned_reused"][1]),
    "pinned_fresh": (race_pinned_fresh, hazards_results.FORMS["pinned_fresh"][2], hazards_results.FORMS["pinned_fresh"][1]),
    "pinned_double_buffer": (race_pinned_double_buffer, hazards_results.FORMS["pinned_double_buffer"][2],
                             hazards_results.FORMS["pinned_double_buffer"][1]),
    "pinned_freed_in_flight": (race_pinned_freed_in_flight, hazards_results.FORMS["pinned_freed_in_flight"][2],
                               hazards_results.FORMS["pinned_freed_in_flight"][1]),
    "d2h_before_event": (race_d2h_before_event, hazards_results.FORMS["d2h_before_event"][2],
                         hazards_results.FORMS["d2h_before_event"][1]),
    "d2h_after_event": (race_d2h_after_event, hazards_results.FORMS["d2h_after_event"][2],
                        hazards_results.FORMS["d2h_after_event"][1]),
    "pinned_written_in_flight": (race_pinned_written_in_flight, False,
                                 "a pinned buffer written by the host (a condense) while its non-blocking D2H copy is in flight"),
    "pinned_written_after_event": (race_pinned_written_after_event, True,
                                   "the same buffer written only after the copy's event's synchronize()"),
}


def strategy_race_step(name: str, dev):
    """One of the kit's strategies as a step: the scalar it makes for step i, consumed on the GPU."""
    fn = strategies.get(name).fn
    buf = torch.zeros((), dtype=_I32, device=dev)

    def step(i: int) -> torch.Tensor:
        out = torch.empty((), dtype=_I32, device=dev)
        out.copy_(fn(i + 1, dev, _EP8, buffer=buf))
        return out
    return step


def check_race_forms(steps: int = 40, queued_ms: float = 0.2) -> dict:
    """measure.races.check over every form with a step and every strategy: {"forms": [...], "strategies": [...]},
    each row the form or strategy, whether it is safe (strategies: all are), flagged (a race found), and as
    expected (flagged exactly when not safe)."""
    from dspark_lab.measure import races  # here: the loop forms above need none of it

    if not torch.cuda.is_available():
        raise RuntimeError("the race check of the hazard forms needs a CUDA device; none is visible here")
    dev = torch.device("cuda")
    hooks = races.cuda_hooks(queued_ms)

    def row(key: str, name: str, make, safe: bool) -> dict:
        rep = races.check(lambda: make(dev), steps=steps, hooks=hooks, queued_ms=queued_ms)
        first = rep["races"][0] if rep["races"] else None
        return {key: name, "safe": safe, "flagged": not rep["clean"], "expected": (not rep["clean"]) == (not safe),
                "races": len(rep["races"]), "steps": steps, "first": first}
    forms = [row("form", n, make, safe) for n, (make, safe, _) in RACE_FORMS.items()]
    strats = [row("strategy", s, functools.partial(strategy_race_step, s), True) for s in strategies.BUILTIN]
    return {"steps": steps, "queued_ms_per_step": queued_ms, "forms": forms, "strategies": strats}
