"""Profiler-free timing: warm-up, interleaved trials, medians and bootstrap confidence intervals.

Step times come from the host clock (`perf_counter`) with the device synchronized at the trial's
boundaries only, so the steps inside a trial pipeline as they do in production.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

# Fixed seed: the same samples always give the same interval.
_RNG_SEED = 20261130
BOOTSTRAP_RESAMPLES = 4000


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


def median_ci(samples: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Median and a percentile-bootstrap confidence interval of the median."""
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError("median_ci needs at least one sample")
    med = float(np.median(x))
    if x.size == 1:
        return med, med, med
    rng = np.random.default_rng(_RNG_SEED)
    boots = np.median(rng.choice(x, size=(BOOTSTRAP_RESAMPLES, x.size), replace=True), axis=1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return med, float(lo), float(hi)


def compare(a: Sequence[float], b: Sequence[float], a_name: str = "A", b_name: str = "B", level: float = 0.95) -> dict:
    """How much slower A is than B, in percent of B's median, with a bootstrap CI.

    With paired samples (same length: trial t of A and B ran in the same round) the ratio is taken
    per round, which cancels drift between rounds; otherwise the two are resampled independently.
    If the interval contains 0 the verdict is "no measurable difference".
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size == 0 or b.size == 0:
        raise ValueError("compare needs samples on both sides")
    rng = np.random.default_rng(_RNG_SEED)
    if a.size == b.size and a.size > 1:
        ratios = a / b
        pct = (float(np.median(ratios)) - 1) * 100
        boots = np.median(rng.choice(ratios, size=(BOOTSTRAP_RESAMPLES, ratios.size)), axis=1)
    else:
        pct = (np.median(a) / np.median(b) - 1) * 100
        ba = np.median(rng.choice(a, size=(BOOTSTRAP_RESAMPLES, a.size)), axis=1)
        bb = np.median(rng.choice(b, size=(BOOTSTRAP_RESAMPLES, b.size)), axis=1)
        boots = ba / bb
    lo, hi = ((np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2]) - 1) * 100).tolist()
    if lo <= 0 <= hi:
        verdict = f"no measurable difference between {a_name} and {b_name} ({pct:+.1f}%, {level:.0%} CI {lo:+.1f}% to {hi:+.1f}%)"
    else:
        word = "slower" if pct > 0 else "faster"
        verdict = f"{a_name} is {abs(pct):.1f}% {word} than {b_name} ({level:.0%} CI {lo:+.1f}% to {hi:+.1f}%)"
    return {"pct": float(pct), "ci_low": float(lo), "ci_high": float(hi), "measurable": not (lo <= 0 <= hi), "verdict": verdict}
