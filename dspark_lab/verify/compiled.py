"""verify's compiled-code group: the guard, inspect's counts and the cost rule on `torch.compile`d code.

A step queues GPU work, reads one number back with `.item()` and then does HOST_MS of host work
before its next launch, so the GPU idles for about HOST_MS per step because of the read: the truth
the cost rule's charge is checked against. The read runs eager, compiled by Inductor with Dynamo's
default graph break at `.item()`, and compiled with `capture_scalar_outputs` (no graph break). Each
must show one sync per step to the guard and to the trace, and a charge within CHARGE_TOLERANCE of
HOST_MS; the compiled forms must show their graph breaks as `torch._dynamo.explain` counts them.

And pytorch #182190's shape: a non-blocking device-to-host copy followed by `.item()` inside compiled
code, behind queued GPU work. Where Inductor orders it (the fix of pytorch #185252 adds an event sync), the
values are right and the guard sees the event sync; where it does not, the values are stale and
there is no sync to see. Either is consistent and recorded with the torch checked; right values
without a sync, or stale ones with one, would be a surprise (the check fails).

Skips with the reason where Inductor cannot compile here (no compiler, no Triton). About 10 s on an H200.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from dspark_lab import guard
from dspark_lab.gallery.compiled_cases import compiled
from dspark_lab.measure import breakdown, probe, syncs, trace
from dspark_lab.measure.step import measure_step
from dspark_lab.results.record.verify_record import Check

GROUP = "compiled"
HOST_MS, QUEUED_MS = 1.0, 2.0
CHARGE_TOLERANCE = 0.5  # the charge within HOST_MS * (1 +- this)
VARIANTS = ("eager", "compiled", "compiled, capture_scalar_outputs")
WANT_BREAKS = {"eager": None, "compiled": 1, "compiled, capture_scalar_outputs": 0}
ORDER_TRIES = 20


def _read(x: torch.Tensor) -> int:
    return x.sum().item() + 0


def _read_captured(x: torch.Tensor) -> int:
    return x.sum().item() + 0


def _d2h_item(a: torch.Tensor) -> float:
    return a.to("cpu", non_blocking=True).item()


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms * 1e-3
    while time.perf_counter() < end:
        pass


def variant_fn(name: str, dev: torch.device) -> Callable:
    if name == "eager":
        return _read
    if name == "compiled":
        return compiled(_read, dev)
    return compiled(_read_captured, dev, capture_scalars=True)


def graph_breaks(name: str, x: torch.Tensor) -> Optional[int]:
    """Dynamo's graph-break count for the variant's function (None for eager)."""
    if WANT_BREAKS[name] is None:
        return None
    fn = _read if name == "compiled" else _read_captured
    with torch._dynamo.config.patch(capture_scalar_outputs=name != "compiled"):
        found = torch._dynamo.explain(fn)(x)
    # A break at the function's last op splits no graph, so graph_break_count can say 0 (torch 2.11, 2.13)
    # while break_reasons names it: Dynamo's own warning for `.item()` is that break.
    return max(int(found.graph_break_count), len(found.break_reasons))


def variant_check(name: str, guard_per_step: float, trace_per_step: float, charge_ms: Optional[float],
                  breaks: Optional[int], host_ms: float = HOST_MS) -> Check:
    """The verdict on one variant (pure: testable on CPU)."""
    want = WANT_BREAKS[name]
    ok_breaks = want is None or (breaks is not None and (breaks >= 1 if want else breaks == 0))
    ok_charge = charge_ms is not None and abs(charge_ms - host_ms) <= CHARGE_TOLERANCE * host_ms
    passed = guard_per_step == 1 and trace_per_step == 1 and ok_charge and ok_breaks
    text = (f"syncs per step: guard {guard_per_step:g}, trace {trace_per_step:g} (want 1); charge "
            f"{'n/a' if charge_ms is None else f'{charge_ms:.3f}'} ms against {host_ms:g} ms of host work after the "
            f"read (+-{CHARGE_TOLERANCE:.0%})" + ("" if want is None else f"; graph breaks {breaks} (want "
                                                     f"{'>= 1' if want else '0'})"))
    return Check(GROUP, name, bool(passed), text, {"guard_per_step": guard_per_step, "trace_per_step": trace_per_step,
                                                   "charge_ms": charge_ms, "graph_breaks": breaks})


def order_check(torch_version: str, wrong: int, n: int, guard_syncs: float) -> Check:
    """pytorch #182190's shape: consistent when right values come with a sync, or stale ones without."""
    ordered, synced = wrong == 0, guard_syncs >= 1
    what = ("ordered: the guard sees the wait Inductor adds" if ordered and synced else
            "not ordered (pytorch #182190): stale values and no sync to see" if not ordered and not synced else
            "unexpected: " + ("right values with no sync seen" if ordered else "stale values despite a sync"))
    return Check(GROUP, "non-blocking D2H then .item() under compile", ordered == synced,
                 f"torch {torch_version}: {wrong} of {n} compiled reads stale; guard syncs per call {guard_syncs:g}: {what}",
                 {"torch": torch_version, "wrong": wrong, "n": n, "guard_syncs": guard_syncs})


def _measure(name: str, x: torch.Tensor, out: torch.Tensor) -> Check:
    fn = variant_fn(name, x.device)

    def step() -> None:
        probe.busy_kernel(QUEUED_MS)
        fn(x)
        _spin(HOST_MS)
        out.mul_(1.0)
    step(), step(), torch.cuda.synchronize()  # compiled on the first call, outside the measurement
    with guard.no_host_syncs(count=True) as g:
        step(), step()
    rep = measure_step(step, steps=5, trials=1, warmup=1, profile_steps=5)
    ev = trace.events(rep.trace)
    charge = breakdown.summary(ev, calls=syncs.sync_calls(ev)).get("gpu_idle_sync_caused_ms")
    return variant_check(name, g.count() / 2, float(rep.counts["syncs_per_step"]), charge, graph_breaks(name, x))


def _order(dev: torch.device) -> Check:
    fn = compiled(_d2h_item, dev, capture_scalars=True)
    x = torch.zeros((), device=dev)
    fn(x), torch.cuda.synchronize()
    wrong = 0
    for i in range(ORDER_TRIES):
        probe.busy_kernel(1.0)
        x.fill_(float(i + 1))
        wrong += fn(x) != float(i + 1)
    torch.cuda.synchronize()
    probe.busy_kernel(1.0)
    with guard.no_host_syncs(count=True, debug_mode=False) as g:
        fn(x)
    return order_check(torch.__version__, wrong, ORDER_TRIES, float(g.count()))


def _negate(x: torch.Tensor) -> torch.Tensor:
    return -x


def cannot_compile(dev: torch.device) -> Optional[str]:
    """Why Inductor cannot compile here, or None where a tiny function compiles and runs."""
    try:
        compiled(_negate, dev)(torch.ones(2, device=dev))
        return None
    except Exception as e:  # noqa: BLE001 -- any failure to compile is the reason to skip
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def compiled_checks() -> list[Check]:
    dev = torch.device("cuda")
    why = cannot_compile(dev)
    if why:
        return [Check(GROUP, name, None, f"not checked: Inductor cannot compile here ({why})")
                for name in VARIANTS + ("non-blocking D2H then .item() under compile",)]
    probe.calibrate_sleep()
    x = torch.arange(1024, dtype=torch.float32, device=dev)
    out = torch.ones(1024, device=dev)
    return [_measure(name, x, out) for name in VARIANTS] + [_order(dev)]
