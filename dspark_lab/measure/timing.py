"""Profiler-free timing: warm-up, interleaved trials, medians and bootstrap confidence intervals.

Step times come from the host clock (`perf_counter`) with the device synchronized at the trial's
boundaries only, so the steps inside a trial pipeline as they do in production.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import numpy as np

# The statistics live in the torch-free results layer; imported here so measure's users
# (scripts/gpu_session.py: timing.median_ci, timing.compare) get the same numbers as every view.
from ..results.stats import compare, median_ci  # noqa: F401


@dataclass
class TrialTiming:
    trial: int
    steps: int
    step_ms: float  # trial wall time / steps
    per_step_ms: np.ndarray  # host-clock time between consecutive step starts

    @property
    def p50(self) -> float:
        return float(np.median(self.per_step_ms))

    @property
    def p90(self) -> float:
        return float(np.percentile(self.per_step_ms, 90))


def time_trial(step: Callable[[], None], steps: int, warmup: int, sync: Callable[[], None], trial: int = 0) -> TrialTiming:
    """Run `warmup` then `steps` steps; time each step start-to-start and the whole trial."""
    for _ in range(warmup):
        step()
    sync()
    stamps = np.empty(steps + 1)
    t0 = time.perf_counter()
    for i in range(steps):
        stamps[i] = time.perf_counter()
        step()
    sync()
    stamps[steps] = time.perf_counter()
    return TrialTiming(trial, steps, (stamps[steps] - t0) * 1e3 / steps, np.diff(stamps) * 1e3)


def interleaved_trials(
    steps_by_name: Mapping[str, Callable[[], None]],
    *,
    trials: int,
    steps: int,
    warmup: int,
    sync: Callable[[], None],
    on_trial: Optional[Callable[[str, int], None]] = None,
) -> dict[str, list[TrialTiming]]:
    """Trials of each named step, interleaved A B C, B C A, ... so machine drift is shared by all
    and no strategy always runs first."""
    names = list(steps_by_name)
    out: dict[str, list[TrialTiming]] = {n: [] for n in names}
    for t in range(trials):
        order = names[t % len(names):] + names[: t % len(names)]
        for n in order:
            if on_trial:
                on_trial(n, t)
            out[n].append(time_trial(steps_by_name[n], steps, warmup, sync, trial=t))
    return out
