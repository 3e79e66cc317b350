"""Profiler-free timing: warm-up, interleaved trials, medians and bootstrap confidence intervals.

Step times come from the host clock (`perf_counter`) with the device synchronized at the trial's
boundaries only, so the steps inside a trial pipeline as they do in production.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import numpy as np

# The statistics live in the torch-free results layer; imported here so measure's users
# (scripts/gpu_session.py: timing.median_ci, timing.compare) get the same numbers as every view.
from dspark_lab.results.stats import compare, median_ci  # noqa: F401


@dataclass
class TrialTiming:
    trial: int
    steps: int
    step_ms: float  # trial wall time / steps
    per_step_ms: np.ndarray  # host-clock time between consecutive step starts
    diag: dict = field(default_factory=dict)  # measure.diagnostics fields, when asked for

    @property
    def p50(self) -> float:
        return float(np.median(self.per_step_ms))

    @property
    def p90(self) -> float:
        return float(np.percentile(self.per_step_ms, 90))


def time_trial(step: Callable[[], None], steps: int, warmup: int, sync: Callable[[], None], trial: int = 0,
               diag=None) -> TrialTiming:
    """Run `warmup` then `steps` steps; time each step start-to-start and the whole trial.
    `diag` (a measure.diagnostics.TrialDiagnostics) adds per-trial diagnostics, read outside the
    timed span."""
    for _ in range(warmup):
        step()
    sync()
    stamps = np.empty(steps + 1)
    snap = diag.begin() if diag is not None else None
    t0 = time.perf_counter()
    for i in range(steps):
        stamps[i] = time.perf_counter()
        step()
    t_sync = time.perf_counter()
    sync()
    stamps[steps] = time.perf_counter()
    out = TrialTiming(trial, steps, (stamps[steps] - t0) * 1e3 / steps, np.diff(stamps) * 1e3)
    if diag is not None:
        out.diag = diag.end(snap, steps, wall_s=stamps[steps] - t0, tail_wait_s=stamps[steps] - t_sync)
    return out


def interleaved_trials(
    steps_by_name: Mapping[str, Callable[[], None]],
    *,
    trials: int,
    steps: int,
    warmup: int,
    sync: Callable[[], None],
    on_trial: Optional[Callable[[str, int], None]] = None,
    diag: Optional[Mapping[str, object]] = None,
) -> dict[str, list[TrialTiming]]:
    """Trials of each named step, interleaved A B C, B C A, ... so machine drift is shared by all
    and no strategy always runs first. `diag`: per name, a TrialDiagnostics."""
    names = list(steps_by_name)
    out: dict[str, list[TrialTiming]] = {n: [] for n in names}
    for t in range(trials):
        _round(steps_by_name, out, t, steps=steps, warmup=warmup, sync=sync, on_trial=on_trial, diag=diag)
    return out


def _round(steps_by_name, out, t: int, *, steps, warmup, sync, on_trial, diag) -> None:
    """Round `t`: one trial of each name, the order rotated by t."""
    names = list(steps_by_name)
    order = names[t % len(names):] + names[: t % len(names)]
    for n in order:
        if on_trial:
            on_trial(n, t)
        out[n].append(time_trial(steps_by_name[n], steps, warmup, sync, trial=t,
                                 diag=diag.get(n) if diag else None))


STOP_REASONS = ("ci_target", "time_cap", "fixed_trials")
# Below this many paired rounds a bootstrap CI of a median can only take the few sample values,
# and may look narrow by chance: an adaptive point never stops on its CI before this. Rounds drift
# within a run, which a bootstrap (rounds taken as independent) cannot see, so the floor comes from
# prefixes of three H200 runs of the reference point that ran to the 40 s cap (48-50 rounds each;
# data/runs/h200-reference-run*): after 6 rounds the prefixes were up to 3.7% off their full-run
# ratio, after 8 up to 1.1%, and from 10 rounds on every prefix stayed within 1% of it. (A run
# disturbed from start to end is a different matter: results.noise.RUN_RULE.) Ten sglang_profile
# rounds (5 strategies x 20 steps) take ~7 s on an H200, inside the 8 s per-point cap of
# `sweep --target-ci`.
MIN_ADAPTIVE_ROUNDS = 10


@dataclass
class AdaptiveResult:
    timings: dict  # name -> list[TrialTiming], as interleaved_trials returns
    stop_reason: str  # one of STOP_REASONS
    half_width_pct: Optional[float]  # headline CI half-width at the stop (None if never computable)
    rounds: int


def adaptive_trials(
    steps_by_name: Mapping[str, Callable[[], None]],
    *,
    min_trials: int,
    steps: int,
    warmup: int,
    sync: Callable[[], None],
    half_width: Callable[[dict], Optional[float]],
    target_ci_pct: float,
    time_cap_s: float,
    clock: Callable[[], float] = time.monotonic,
    on_trial: Optional[Callable[[str, int], None]] = None,
    diag: Optional[Mapping[str, object]] = None,
) -> AdaptiveResult:
    """Interleaved rounds until the headline CI half-width (`half_width(timings)`, in %) is at most
    `target_ci_pct`, or `time_cap_s` (measured with `clock` from the first trial) has passed.
    At least `min_trials` rounds always run, and max(min_trials, MIN_ADAPTIVE_ROUNDS) before the
    CI may stop the point."""
    if not (target_ci_pct > 0):
        raise ValueError(f"target_ci_pct must be a positive percentage; got {target_ci_pct!r}")
    if not (time_cap_s > 0):
        raise ValueError(f"time_cap_s must be a positive number of seconds; got {time_cap_s!r}")
    out: dict[str, list[TrialTiming]] = {n: [] for n in steps_by_name}
    start = clock()
    floor = max(min_trials, MIN_ADAPTIVE_ROUNDS)
    t, hw = 0, None
    while True:
        _round(steps_by_name, out, t, steps=steps, warmup=warmup, sync=sync, on_trial=on_trial, diag=diag)
        t += 1
        if t >= 2:  # a CI needs two paired rounds
            hw = half_width(out)
        if t >= floor and hw is not None and hw <= target_ci_pct:
            return AdaptiveResult(out, "ci_target", hw, t)
        if t >= min_trials and clock() - start >= time_cap_s:
            return AdaptiveResult(out, "time_cap", hw, t)
