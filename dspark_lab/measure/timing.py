"""Profiler-free timing of one trial: warm-up, then timed steps between two drains.

Step times come from the host clock (`perf_counter` unless a timer is given) with the device
synchronized at the trial's boundaries only, so the steps inside a trial pipeline as they do in
production. Rounds of trials and when to stop them: measure/loop.py.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


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
               diag=None, timer: Callable[[], float] = time.perf_counter) -> TrialTiming:
    """Run `warmup` then `steps` steps; time each step start-to-start and the whole trial.
    `diag` (a measure.diagnostics.TrialDiagnostics) adds per-trial diagnostics, read outside the
    timed span. `timer`: seconds, for a fake clock in tests."""
    for _ in range(warmup):
        step()
    sync()
    stamps = np.empty(steps + 1)
    snap = diag.begin() if diag is not None else None
    t0 = timer()
    for i in range(steps):
        stamps[i] = timer()
        step()
    t_sync = timer()
    sync()
    stamps[steps] = timer()
    out = TrialTiming(trial, steps, (stamps[steps] - t0) * 1e3 / steps, np.diff(stamps) * 1e3)
    if diag is not None:
        out.diag = diag.end(snap, steps, wall_s=stamps[steps] - t0, tail_wait_s=stamps[steps] - t_sync)
    return out
