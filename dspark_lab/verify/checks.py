"""The checks `dspark-lab verify` makes on CUDA, one function per group; each measures on this machine
and hands its numbers to results.analyses.verification for the verdict."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from dspark_lab import guard, strategies
from dspark_lab.gallery import katas
from dspark_lab.gallery import known_idle as ki
from dspark_lab.measure import breakdown, hazards, loop, probe, syncs, trace
from dspark_lab.measure import card as card_measure
from dspark_lab.measure.step import as_step, measure_step
from dspark_lab.results.analyses import verification as V
from dspark_lab.results.analyses.hazards import FORMS
from dspark_lab.results.record import sync_sites
from dspark_lab.results.record.verify_record import Check
from dspark_lab.results.rules.stats import median_ci
from dspark_lab.verify import known_syncs as KS
from dspark_lab.verify.capture import capture_checks
from dspark_lab.verify.compiled import compiled_checks


def _line_of(site: str) -> int:
    """The line a site names (either recorded form, results.record.sync_sites); -1 when it names none."""
    parsed = sync_sites.try_parse(site)
    return parsed.line if parsed else -1


def _def_line(fn: Callable) -> int:
    return fn.__code__.co_firstlineno


def sync_checks() -> list[Check]:
    """Each known-sync step through measure_step (trace count, sync debug mode's lines) and through the
    guard over 2 steps (records and their lines). Syncs sync debug mode cannot see are named by CUPTI
    at their function's def line, so that is the line expected of the guard for them."""
    s = KS.State(torch.device("cuda"))
    out = []
    for case in KS.CASES:
        fn = lambda c=case: c.fn(s)  # noqa: E731
        fn(), torch.cuda.synchronize()  # first-call allocations outside the measurement
        rep = measure_step(fn, steps=5, trials=1, warmup=1, profile_steps=3)
        debug = [_line_of(k) for k in rep.debug_sites]
        with guard.no_host_syncs(count=True) as g:
            fn(), fn()
        want_lines = case.lines()
        guard_want = want_lines if case.debug_sees else ([_def_line(case.fn)] if case.per_step else [])
        chk = V.sync_check(case.name, case.per_step, guard_want, counted_per_step=float(rep.counts["syncs_per_step"]),
                           debug_lines=debug if case.debug_sees else guard_want,
                           guard_records=len(g.syncs), guard_lines=[_line_of(x.site) for x in g.syncs], steps=2)
        if not case.debug_sees and chk.passed and debug:
            chk = Check("syncs", case.name, False, f"sync debug mode flagged lines {debug}, which it should not see")
        out.append(chk)
    return out


def _twice(step: Callable[[], None]) -> Callable[[], None]:
    def two() -> None:
        step()
        step()
    return two


def _host_ms_per_step(step: Callable[[], None], steps: int, reps: int = 5) -> float:
    """Host time per step of a sync-free step, no profiler: the loop's launches alone (the GPU left to
    catch up after the clock stops), median over `reps`."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        out.append((time.perf_counter() - t0) * 1e3 / steps)
        torch.cuda.synchronize()
    return float(np.median(out))


def _sync_call_ms(reps: int = 200, wait: str = "item") -> float:
    """The host time of one wait made as `wait` (known_idle.WAIT_FORMS) on an idle GPU (median, ms): a
    sync call's own cost."""
    call = ki.wait_call(wait)
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts) * 1e3)


def steady_loss(w: Callable[[], None], f: Callable[[], None], *, rounds: int = 8, steps: int = 20) -> tuple:
    """The steady-state loss of step `w` against `f` (ms, median and its 95% CI): each trial's time at
    2n steps minus at n steps cancels the start and the drain, the same for both; paired per round."""
    sync = torch.cuda.synchronize
    res = loop.run_rounds({"w": w, "w2": _twice(w), "f": f, "f2": _twice(f)}, loop.FixedRounds(rounds),
                          steps=steps, warmup=3, sync=sync).timings
    steady = {k: [b.step_ms - a.step_ms for a, b in zip(res[k], res[k + "2"])] for k in ("w", "f")}
    return median_ci([a - b for a, b in zip(steady["w"], steady["f"])])


def measure_cost_case(case: ki.KnownIdleCase, *, sync_call_ms: float, rounds: int = 8, steps: int = 20,
                      profile_steps: int = 12, captures: int = 4) -> Check:
    """One known-idle case: the steady-state loss (steady_loss); the charge over the profiled steps but
    the first (it pays the profiler's start) of `captures` profiled captures, with its CI over them
    (V.charge_over_captures); the profiler's host time per step (the profiled step's host time outside
    its syncs minus the sync-free step's host time without profiler); `sync_call_ms` (see _sync_call_ms)."""
    sync = torch.cuda.synchronize
    w, f = as_step(ki.make_step(case.ops, wait=case.wait)), as_step(ki.make_step(case.sync_free()))
    loss, lo, hi = steady_loss(w, f, rounds=rounds, steps=steps)
    charges, hosts = [], []
    for _ in range(captures):
        ev = trace.events(trace.capture(w, profile_steps, warmup=1, sync=sync))
        calls = syncs.sync_calls(ev)
        per = breakdown.per_step(ev, calls).iloc[1:]
        charges.append(per.gpu_idle_sync_caused_ms.tolist())
        hosts.append(float((per.wall_ms - per.host_blocked_ms - per.host_readback_ms).mean()))
    charged, c_lo, c_hi = V.charge_over_captures(charges)
    host_profiled = float(np.mean(hosts))
    outside = calls[~calls.readback & (calls.step >= 1)]  # the last capture's waits, named and counted
    # The syncs' host time the rule caps a chain by, from the trace, beside the same timed without a
    # profiler: the evidence that the cap is what the host would save.
    in_steps = (calls.step >= 1).to_numpy()
    measured = {"sync_host_traced_ms": float(breakdown.call_spans_us(ev, calls)[in_steps].sum()) / 1e3 / max(1, len(per)),
                "sync_host_unprofiled_ms": _sync_host_ms_unprofiled(case, steps)}
    return V.cost_check(case.name, case.what, charged_ms=charged, charge_ci=(c_lo, c_hi), loss_ms=loss,
                        loss_ci=(lo, hi), profiler_host_ms=host_profiled - _host_ms_per_step(f, steps),
                        syncs_per_step=case.syncs_per_step, sync_call_ms=sync_call_ms,
                        expected_ms=case.expected(steps)["caused_idle_ms"], measured=measured,
                        wait_kind=case.wait_kind if case.syncs_per_step else None, waits_expected=case.waits_per_step,
                        waits_seen=sorted(set(outside.wait)), waits_per_step=len(outside) / max(1, len(per)))


def sync_host_times_s(case: ki.KnownIdleCase, steps: int = 20, warmup: int = 3) -> list:
    """Each sync's host time (s, each `.item()` timed around the call) over `steps` steps, in order,
    no profiler."""
    times: list = []
    step = as_step(ki.make_step(case.ops, sync_host_s=times, wait=case.wait))
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times.clear()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return times


def _sync_host_ms_unprofiled(case: ki.KnownIdleCase, steps: int) -> float:
    """The step's syncs' host time per step (ms), no profiler."""
    return sum(sync_host_times_s(case, steps)) * 1e3 / steps


def cost_checks(names=None) -> list[Check]:
    probe.calibrate_sleep()
    cases = [c for c in ki.CASES if names is None or c.name in names]
    call_ms = {w: _sync_call_ms(wait=w) for w in dict.fromkeys(c.wait for c in cases)}
    return [measure_cost_case(c, sync_call_ms=call_ms[c.wait]) for c in cases]


def card_checks() -> list[Check]:
    card = card_measure.measure_card(sizes=V.CARD_SIZES, queued_ms=(0.0, 10.0), reps=5, sources=V.CARD_SOURCES)
    return V.card_checks(card)


def hazard_checks(n: int = 200, queued_ms: float = 0.2) -> list[Check]:
    """Every documented hazard form under run-ahead: an unsafe form must race here (wrong values > 0),
    a safe one and each of the kit's strategies must give 0 (the safe flag is the forms table's)."""
    probe.calibrate_sleep()
    dev = torch.device("cuda")
    out = [V.hazard_check(name, f(n, queued_ms, dev), n, must_race=not FORMS[name][2])
           for name, f in hazards.FORM_FUNCTIONS.items()]
    for s in strategies.BUILTIN:
        out.append(V.hazard_check(f"strategy {s}", hazards.strategy_under_run_ahead(s, n, queued_ms, dev), n, False))
    return out


def kata_checks() -> list[Check]:
    out = []
    for name in katas.names():
        k = katas.kata(name)
        g = katas.check(name, k.case.fix)
        rule = "no slower than the pitfall" if k.speed == "not_slower" else "measurably faster than the pitfall"
        out.append(V.kata_check(name, g.results, rule))
    return out


def clock_checks(asked=(1.0, 5.0), reps: int = 20) -> list[Check]:
    probe.calibrate_sleep()
    out = []
    for ms in asked:
        ev_ms, host_ms = [], []
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            a.record()
            probe.busy_kernel(ms)
            b.record()
            b.synchronize()
            host_ms.append((time.perf_counter() - t0) * 1e3)
            ev_ms.append(a.elapsed_time(b))
        out.append(V.clock_check(ms, ev_ms, host_ms))
    return out


GROUP_RUNNERS = {"syncs": sync_checks, "cost": cost_checks, "card": card_checks, "hazards": hazard_checks,
                 "katas": kata_checks, "clocks": clock_checks, "compiled": compiled_checks, "capture": capture_checks}
