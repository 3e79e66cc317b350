"""Verdicts of `dspark-lab verify`'s checks, from measured numbers (torch-free, so the rules are
tested on CPU with recorded or synthetic numbers; dspark_lab/verify measures them on CUDA).

Each function takes what one check measured and returns a Check: passed or not, and a sentence with
the numbers and the tolerance the verdict was judged by.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from dspark_lab.results.analyses import card as card_results
from dspark_lab.results.record.verify_record import Check
from dspark_lab.results.rules.stats import mean_ci, t_975

# --- syncs: counts and lines exact, one record per sync ------------------------------------------

def sync_check(name: str, want_per_step: float, want_lines: Sequence[int], *, counted_per_step: float,
               debug_lines: Sequence[int], guard_records: int, guard_lines: Sequence[int], steps: int = 1) -> Check:
    """A step function with a known number of syncs per step at known lines, run through measure_step
    (`counted_per_step` from the trace, `debug_lines` from sync debug mode) and once through the guard
    (`guard_records` records at `guard_lines`, over `steps` steps)."""
    problems = []
    if not math.isclose(counted_per_step, want_per_step, abs_tol=1e-9):
        problems.append(f"measure_step counted {counted_per_step:g}/step, not {want_per_step:g}")
    if sorted(set(debug_lines)) != sorted(set(want_lines)):
        problems.append(f"sync debug mode saw lines {sorted(set(debug_lines))}, not {sorted(set(want_lines))}")
    if guard_records != round(want_per_step * steps):
        problems.append(f"the guard made {guard_records} records for {want_per_step * steps:g} syncs")
    if sorted(set(guard_lines)) != sorted(set(want_lines)):
        problems.append(f"the guard named lines {sorted(set(guard_lines))}, not {sorted(set(want_lines))}")
    nums = {"want_per_step": want_per_step, "want_lines": list(want_lines), "counted_per_step": counted_per_step,
            "debug_lines": sorted(set(debug_lines)), "guard_records": guard_records, "guard_lines": sorted(set(guard_lines))}
    if problems:
        return Check("syncs", name, False, "; ".join(problems), nums)
    where = f" at line {', '.join(map(str, sorted(set(want_lines))))}" if want_lines else ""
    return Check("syncs", name, True, f"{want_per_step:g} sync(s)/step{where}: counted exactly, "
                 f"one guard record per sync", nums)


# --- cost: the charged idle against the profiler-free loss ----------------------------------------

def charge_over_captures(per_capture: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """The charge (ms per step) from several profiled captures of one step, and its 95% CI: the mean
    of the captures' means, and the wider of a t-interval over those means and the bootstrap CI of
    the steps pooled. Between captures the charge can move more than within one (on an H200, `.item()`'s
    step: 3.056 ms (95% CI 3.048 to 3.067) in one verify capture, 3.073 ms in another), so a CI over one
    capture's steps can understate what a re-measurement would find."""
    means = [float(np.mean(c)) for c in per_capture if len(c)]
    if not means:
        raise ValueError("per_capture must hold at least one capture with a step")
    pooled, lo, hi = mean_ci([v for c in per_capture for v in c])
    centre = float(np.mean(means))
    half = (hi - lo) / 2
    if len(means) > 1:
        t = t_975(len(means) - 1)
        half = max(half, t * float(np.std(means, ddof=1)) / math.sqrt(len(means)))
    return centre, centre - half, centre + half


def cost_tolerance(loss_ci: tuple, charge_ci: tuple, profiler_host_ms: float, syncs_per_step: int,
                   sync_call_ms: float) -> dict:
    """The tolerance a case is judged by, each part measured on this machine:
    - the half-widths of the loss's and the charge's 95% CIs (the loss over rounds, the charge over
      profiled steps: both are measurements);
    - the host time the profiled step spends outside its syncs beyond the sync-free step's host work
      without a profiler: it moves the charge both ways (host work before a sync that takes longer
      leaves the sync less to wait, so a charge capped by the blocked time comes out short; host work
      after it that takes longer stretches the idle gap, so an uncapped charge comes out long);
    - the syncs' own host time (a `.item()` on an idle GPU, times the syncs per step): the step loses
      it whether or not the GPU waits, and the rule charges only idle the GPU spent waiting."""
    parts = {"loss_ci_half_width_ms": max(0.0, (loss_ci[1] - loss_ci[0]) / 2),
             "charge_ci_half_width_ms": max(0.0, (charge_ci[1] - charge_ci[0]) / 2),
             "profiler_host_ms": abs(profiler_host_ms),
             "sync_calls_ms": max(0.0, syncs_per_step * sync_call_ms)}
    return {**parts, "tolerance_ms": sum(parts.values())}


def cost_check(case: str, what: str, *, charged_ms: float, charge_ci: tuple, loss_ms: float, loss_ci: tuple,
               profiler_host_ms: float, syncs_per_step: int, sync_call_ms: float,
               expected_ms: Optional[float] = None, measured: Optional[dict] = None,
               wait_kind: Optional[str] = None, waits_seen: Optional[list] = None,
               waits_per_step: Optional[float] = None, waits_expected: Optional[int] = None) -> Check:
    """The charged idle agrees with the profiler-free loss when they differ by at most the tolerance;
    with `wait_kind`, the trace also saw the step's waits, as many per step as it makes
    (`waits_per_step` against `waits_expected`, syncs_per_step where not given), all named that kind
    (`waits_seen`): a wait the kit does not see cannot be charged. `measured`: more of the case's
    numbers, kept in the record beside the verdict's."""
    tol = cost_tolerance(loss_ci, charge_ci, profiler_host_ms, syncs_per_step, sync_call_ms)
    gap = loss_ms - charged_ms
    want = syncs_per_step if waits_expected is None else waits_expected
    named = wait_kind is None or (list(waits_seen or []) == [wait_kind] and waits_per_step == want)
    ok = abs(gap) <= tol["tolerance_ms"] and named
    nums = {"charged_ms": charged_ms, "charge_ci": list(charge_ci), "loss_ms": loss_ms, "loss_ci": list(loss_ci),
            "syncs_per_step": syncs_per_step, "sync_call_ms": sync_call_ms, "expected_ms": expected_ms, **tol,
            "wait_kind": wait_kind, "waits_seen": list(waits_seen or []), "waits_per_step": waits_per_step,
            **(measured or {})}
    text = (f"{what}: charged {charged_ms:.3f} ms (95% CI {charge_ci[0]:.3f} to {charge_ci[1]:.3f}) against a loss "
            f"of {loss_ms:.3f} ms (95% CI {loss_ci[0]:.3f} to {loss_ci[1]:.3f}); they differ by {gap:+.3f} ms, "
            f"allowed ±{tol['tolerance_ms']:.3f} (the CIs ±{tol['loss_ci_half_width_ms']:.3f} and "
            f"±{tol['charge_ci_half_width_ms']:.3f}, host time added under the profiler {tol['profiler_host_ms']:.3f}, "
            f"the sync calls' own {tol['sync_calls_ms']:.3f} per step)")
    if not named:
        text += (f"; the trace saw {waits_per_step} waits per step of kinds {list(waits_seen or [])}, "
                 f"not {want} of kind {wait_kind!r}")
    if ok and charged_ms == 0 and loss_ms > tol["loss_ci_half_width_ms"]:
        text += "; what is lost is the sync call's own host time: the GPU was already idle when it was made"
    return Check("cost", case, bool(ok), text, nums)


# --- the card: verdicts on cells whose answer is known by construction (or, where marked, observed) ---

# (direction, source, size, queued?, expected verdict, why it must be so)
KNOWN_CELLS = (
    ("h2d", "pageable_to_nb", 4, False, card_results.AT_ONCE,
     "4 bytes with nothing queued: nothing to wait for and nothing to copy for long"),
    ("h2d", "pageable_to_nb", 64 << 20, True, card_results.WAITS,
     "64 MB pageable with work queued: CUDA allows the driver to synchronize and stage it, and both H200 cards "
     "the kit recorded waited (17.8 ms with 10 ms queued); an observed cell, not one known by construction"),
    ("h2d", "pinned_to_nb", 64 << 20, True, card_results.AT_ONCE,
     "pinned and non-blocking: the copy is queued, the host goes on"),
    ("h2d", "tensor_device", 4, True, card_results.WAITS,
     "torch.tensor(n, device=) copies blocking: a stream synchronize after the copy"),
)
CARD_SIZES = tuple(sorted({c[2] for c in KNOWN_CELLS}))
CARD_SOURCES = tuple(dict.fromkeys(c[1] for c in KNOWN_CELLS))


def card_checks(card: dict) -> list[Check]:
    f = card_results.frame(card)
    out = []
    for direction, source, size, queued, want, why in KNOWN_CELLS:
        name = f"{source} {card_results.size_label(size)} {'queued' if queued else 'empty queue'}"
        try:
            c = card_results.cell(f, direction, source, size, None if queued else 0.0)
        except (KeyError, ValueError) as e:
            out.append(Check("card", name, False, f"no such cell in the card measured here ({e})"))
            continue
        got = c["verdict"]
        nums = {"host_us": float(c["host_us"]), "queued_ms": float(c["queued_ms"]), "copy_gpu_us": float(c["copy_gpu_us"]),
                "verdict": got, "expected": want}
        text = f"{got or 'no verdict'} (median host {float(c['host_us']):.1f} µs, {float(c['queued_ms']):g} ms queued)"
        out.append(Check("card", name, got == want, text + ("" if got == want else f"; expected '{want}': {why}"), nums))
    return out


# --- hazards: the race reproduces, each fix gives 0 -----------------------------------------------

def hazard_check(name: str, wrong: int, n: int, must_race: bool) -> Check:
    if must_race:
        ok = wrong > 0
        text = (f"{wrong} of {n} values wrong: the race reproduces here" if ok else
                f"0 of {n} values wrong: the race did not show (queue too short on this GPU?)")
    else:
        ok = wrong == 0
        text = f"{wrong} of {n} values wrong" + ("" if ok else ": this fix is not safe here")
    return Check("hazards", name, ok, text, {"wrong": wrong, "n": n, "must_race": must_race})


# --- katas: each reference solution passes its own grade, or the kata says what this GPU does not show

def kata_check(name: str, results: dict, speed_rule: str) -> Check:
    """`results`: a kata Grade's {check: (True | False | None, detail)} for the kata's reference
    solution. Output, races and guard must pass; the speed criterion is one this machine may not show (a fix
    whose gain is microseconds): then the check passes on the others and says so."""
    bad = [c for c in ("output", "races", "guard") if results.get(c, (None, ""))[0] is False]
    missing = [c for c, (ok, _) in results.items() if ok is None]
    nums = {c: {"passed": ok, "detail": d} for c, (ok, d) in results.items()}
    if bad:
        return Check("katas", name, False, "; ".join(f"{c}: {results[c][1]}" for c in bad), nums)
    if missing:
        return Check("katas", name, None, f"cannot grade {', '.join(missing)} here: {results[missing[0]][1]}", nums)
    speed_ok, speed_text = results.get("faster", (True, ""))
    if speed_ok:
        return Check("katas", name, True, f"the reference solution passes: {speed_text}", nums)
    return Check("katas", name, True, f"output, races and guard pass; this machine does not show the speed criterion "
                 f"({speed_rule}): {speed_text} — the kata is graded on the others here", nums)


# --- clocks: CUDA events and the host clock agree on a calibrated GPU sleep -----------------------

CLOCK_TOLERANCE = 0.02  # of the events' time, plus the host's own cost of one launch and one sync
CLOCK_OVERHEAD_MS = 0.1


def clock_check(asked_ms: float, event_ms: Sequence[float], host_ms: Sequence[float]) -> Check:
    """Median over repeats: the host clock's time around a GPU sleep (launch to synchronize return) is
    no shorter than the CUDA events' time of it and longer by at most 2% plus 0.1 ms (one launch and
    one sync). How far the sleep is from what was asked is reported, not judged: `torch.cuda._sleep`
    counts cycles, and the GPU's clock moves after the calibration (the kit's checks compare
    measurements with measurements, never with the asked time)."""
    ev, host = float(pd.Series(event_ms).median()), float(pd.Series(host_ms).median())
    agree = ev - 0.01 <= host <= ev * (1 + CLOCK_TOLERANCE) + CLOCK_OVERHEAD_MS
    nums = {"asked_ms": asked_ms, "event_ms": ev, "host_ms": host, "reps": len(event_ms),
            "sleep_off_by": ev / asked_ms - 1 if asked_ms else None}
    text = (f"a GPU sleep of {ev:.3f} ms by CUDA events, {host:.3f} ms by the host clock (median of {len(event_ms)}; "
            f"asked {asked_ms:g} ms, the calibrated sleep off by {ev / asked_ms - 1:+.1%})")
    if not agree:
        text += f"; the host clock is not within 0 to {CLOCK_TOLERANCE:.0%} + {CLOCK_OVERHEAD_MS} ms above the events"
    return Check("clocks", f"sleep {asked_ms:g} ms", bool(agree), text, nums)


# What each group needs that a machine without CUDA lacks.
NEEDS_CUDA = {
    "syncs": "sync counts and lines: without a GPU nothing blocks the host on a device",
    "cost": "caused GPU idle: needs GPU work, a trace of it and syncs that wait for it",
    "card": "the card's verdicts: needs host-to-device copies and queued GPU work",
    "hazards": "the races: need pinned memory, copies queued behind GPU work and CUDA graphs",
    "katas": "the katas' guard and speed criteria: need syncs to find and remove",
    "clocks": "CUDA events against the host clock: need CUDA events",
    "compiled": "the guard, the counts and the cost rule on torch.compile'd code: need CUDA and Inductor",
    "capture": "the guard's capture witness: needs CUDA graph capture",
}


def without_cuda(reason: str) -> list[Check]:
    """One line per group this machine cannot check, saying what it needs."""
    return [Check(g, "all", None, f"not checked ({reason}): {NEEDS_CUDA[g]}") for g in NEEDS_CUDA]
