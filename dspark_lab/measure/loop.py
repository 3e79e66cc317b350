"""The one measurement loop: interleaved rounds of named steps until a stop rule ends them.

As in torch.utils.benchmark (Timer.blocked_autorange / adaptive_autorange) there is one loop and
the policy is a stop rule. A round runs one trial of every named step in a seeded random order
(round_orders: each block of len(names) rounds is a Latin square over a fresh random permutation,
its rounds shuffled), so machine drift is shared, every step takes every position once per block,
and no step always runs right after the same other step (a fixed rotation A B C, B C A, ... put
the same step after the baseline in every round); the seed and each trial's position in its round
are recorded on the trial (`order_seed`, `trial_position`); every rank of an EP run draws the
same orders from the same seed, so collectives still meet. A trial is
measure.timing.time_trial (warm-up, drain, timed steps, drain), with optional per-trial
diagnostics. After each round the rule says whether to stop and why (the `stop_reason` of rows):

  FixedRounds(n)                      n rounds                                    "fixed_trials"
  CITarget(pct, cap_s, min_trials=k)  the headline's CI half-width <= pct % over "ci_target"
                                      at least min_rounds QUIET rounds
                                      or cap_s seconds since the first trial     "time_cap"

The CI rule judges the trials' step-time arrays and diagnostics as results.rules.noise does (its
disturbed-trial rule and headline, on a small frame of just those columns), never built rows, and
only in rounds where it may stop the point. The single-process point (run/point.py), every rank of
an EP run (parallel/measure.py) and `measure_step` use this loop.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

import pandas as pd

from dspark_lab.measure.timing import time_trial
from dspark_lab.results.rules import noise

STOP_REASONS = ("ci_target", "time_cap", "fixed_trials")
ORDER_SEED = 0  # the default seed of the trial order: the same on every rank, recorded on each trial


def round_orders(names: list, seed: int):
    """The order of each round, forever: per block of len(names) rounds a fresh random permutation
    P of `names`, its len(names) rotations (each name in each position once: a Latin square) in a
    random order. Deterministic in `seed` (random.Random; the same on every rank)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"order_seed must be an integer; got {seed!r}")
    rng, n = random.Random(seed), len(names)
    while True:
        perm = rng.sample(list(names), n)
        block = [perm[k:] + perm[:k] for k in range(n)]
        rng.shuffle(block)
        yield from block
# Below this many paired rounds a bootstrap CI of a median can only take the few sample values,
# and may look narrow by chance: an adaptive point never stops on its CI before this. Rounds drift
# within a run, which a bootstrap (rounds taken as independent) cannot see, so the floor comes from
# prefixes of three H200 runs of the reference point that ran to the 40 s cap (48-50 rounds each;
# data/runs/h200-reference-run*): after 6 rounds the prefixes were up to 3.7% off their full-run
# ratio, after 8 up to 1.1%, and from 10 rounds on every prefix stayed within 1% of it. (A run
# disturbed from start to end is a different matter: results.rules.noise.RUN_RULE.) Ten sglang_profile
# rounds (5 strategies x 20 steps) take ~7 s on an H200, inside the 8 s per-point cap of
# `sweep --target-ci`. The floor counts quiet rounds (neither trial of the headline pair disturbed):
# counting every round, a point under pinned host interference stopped on a CI formed from 2 quiet
# rounds (H200); now heavy disturbance makes it measure on until the time cap.
MIN_ADAPTIVE_ROUNDS = noise.MIN_QUIET_ROUNDS

Timings = dict  # name -> list[TrialTiming], one per round


def trial_frame(timings: Mapping[str, list]) -> pd.DataFrame:
    """One row per trial with the columns results.rules.noise judges: strategy, trial, step_ms and the
    trial's diagnostics (the same values the point's rows will carry)."""
    return pd.DataFrame.from_records(
        [{"strategy": n, "trial": t.trial, "step_ms": t.step_ms, **t.diag} for n, ts in timings.items() for t in ts])


def headline_state(timings: Mapping[str, list]) -> Optional[dict]:
    """The headline (results.rules.noise.headline) over the rounds so far: its `half_width_pct` (None below
    noise.MIN_QUIET_ROUNDS quiet rounds) and `quiet_rounds`; None when there is no headline (fewer
    than two strategies, no baseline)."""
    try:
        return noise.headline(trial_frame(timings))
    except ValueError:
        return None


def headline_half_width(timings: Mapping[str, list]) -> Optional[float]:
    """The headline ratio's CI half-width (%) over the quiet rounds so far; None when there is no
    headline or too few quiet rounds for a CI (the live panel's "current CI")."""
    if min((len(v) for v in timings.values()), default=0) < noise.MIN_QUIET_ROUNDS:
        return None  # fewer rounds than a CI needs quiet ones: no need to judge them (a live update's cost)
    state = headline_state(timings)
    return None if state is None else state.get("half_width_pct")


class _Headline:
    """The headline of the rounds so far, computed at most once per round (the rule and the result
    share it)."""

    def __init__(self, timings: Timings):
        self.timings, self._rounds, self._value = timings, -1, None

    def __call__(self) -> Optional[dict]:
        rounds = min((len(v) for v in self.timings.values()), default=0)
        if rounds != self._rounds:
            self._rounds, self._value = rounds, headline_state(self.timings)
        return self._value


@dataclass(frozen=True)
class FixedRounds:
    """Exactly `rounds` rounds."""

    rounds: int

    def __post_init__(self) -> None:
        if not self.rounds >= 1:
            raise ValueError(f"trials must be at least 1; got {self.rounds!r}")

    def label(self, t: int) -> str:
        return f"trial {t + 1}/{self.rounds}"

    def share(self, trials_started: int, names: int, elapsed_s: float) -> float:
        return min(trials_started / (self.rounds * names), 1.0)

    def reason(self, rounds: int, elapsed_s: float, headline: Callable[[], Optional[dict]]) -> Optional[str]:
        return "fixed_trials" if rounds >= self.rounds else None


@dataclass(frozen=True)
class CITarget:
    """Rounds until the headline's CI half-width is at most `target_pct` % (never before
    max(min_trials, min_rounds) rounds, of which at least min_rounds quiet), or `time_cap_s` seconds
    have passed since the first trial (never before `min_trials` rounds: those always run)."""

    target_pct: float
    time_cap_s: float
    min_rounds: int = MIN_ADAPTIVE_ROUNDS
    min_trials: int = 1

    def __post_init__(self) -> None:
        if not (self.target_pct > 0):
            raise ValueError(f"target_ci_pct must be a positive percentage; got {self.target_pct!r}")
        if not (self.time_cap_s > 0):
            raise ValueError(f"time_cap_s must be a positive number of seconds; got {self.time_cap_s!r}")

    def label(self, t: int) -> str:
        return f"round {t + 1} (to ±{self.target_pct:g}% or {self.time_cap_s:g} s)"

    def share(self, trials_started: int, names: int, elapsed_s: float) -> float:
        # The larger of the minimum trials done and the time cap used: both only grow, so the bar
        # never runs backwards; the CI may end it early, hence never quite 1.
        return min(max(trials_started / (self.min_trials * names), elapsed_s / self.time_cap_s), 0.99)

    def reason(self, rounds: int, elapsed_s: float, headline: Callable[[], Optional[dict]]) -> Optional[str]:
        if rounds >= max(self.min_trials, self.min_rounds):
            h = headline()
            hw = None if h is None else h["half_width_pct"]
            if hw is not None and hw <= self.target_pct and h["quiet_rounds"] >= self.min_rounds:
                return "ci_target"
        if rounds >= self.min_trials and elapsed_s >= self.time_cap_s:
            return "time_cap"
        return None


@dataclass
class LoopResult:
    timings: Timings
    stop_reason: str  # one of STOP_REASONS
    rounds: int
    _headline: _Headline
    order_seed: int = ORDER_SEED
    orders: list = field(default_factory=list)  # each round's order of names, as run

    @property
    def half_width_pct(self) -> Optional[float]:
        """The headline CI half-width over all rounds (what results.rules.noise.headline gives on the rows;
        None below noise.MIN_QUIET_ROUNDS quiet rounds)."""
        h = self._headline()
        return None if h is None else h["half_width_pct"]

    @property
    def quiet_rounds(self) -> Optional[int]:
        """Rounds in which neither trial of the headline pair is disturbed (None without a headline)."""
        h = self._headline()
        return None if h is None else h["quiet_rounds"]


def run_rounds(
    steps_by_name: Mapping[str, Callable[[], None]],
    stop,
    *,
    steps: int,
    warmup: int,
    sync: Callable[[], None],
    diag: Optional[Mapping[str, object]] = None,
    progress: Optional[Callable[[str, float], None]] = None,
    on_trial: Optional[Callable[[str, object], None]] = None,
    timer: Callable[[], float] = time.perf_counter,
    clock: Callable[[], float] = time.monotonic,
    after_round: Optional[Callable[[int], None]] = None,
    order_seed: int = ORDER_SEED,
) -> LoopResult:
    """Interleaved rounds of `steps_by_name` until `stop` (FixedRounds or CITarget) ends them.

    `diag`: per name, a measure.diagnostics.TrialDiagnostics. `progress(message, share)` is called
    before each trial, `share` in [0, 1] the trials' part done (the stop rule's arithmetic).
    `on_trial(name, timing)` is called after each trial with its TrialTiming, in the order run, so
    a caller can show trials as they arrive (run.live); an exception it raises ends the loop there.
    `after_round(rounds_done)` runs after each whole round, before the stop rule looks (run.point
    puts a live update's profiled pass there); its time does not count towards the time cap.
    `timer` times the steps, `clock` the time cap (both seconds; fakes in tests). `order_seed` seeds
    the trial order (round_orders); each trial's diag carries it and the trial's position in its round."""
    names = list(steps_by_name)
    if not names:
        raise ValueError("steps_by_name must name at least one step")
    timings: Timings = {n: [] for n in names}
    headline, orders, order_of_rounds = _Headline(timings), round_orders(names, order_seed), []
    start, started, t = clock(), 0, 0
    while True:
        order_of_rounds.append(next(orders))
        for position, n in enumerate(order_of_rounds[-1]):
            started += 1
            if progress is not None:
                progress(f"{stop.label(t)}: {n}", stop.share(started, len(names), clock() - start))
            timings[n].append(time_trial(steps_by_name[n], steps, warmup, sync, trial=t,
                                         diag=diag.get(n) if diag else None, timer=timer))
            timings[n][-1].diag.update(order_seed=order_seed, trial_position=position)
            if on_trial is not None:
                on_trial(n, timings[n][-1])
        t += 1
        if after_round is not None:
            t_hook = clock()
            after_round(t)
            start += clock() - t_hook  # the hook's time is not the trials'
        reason = stop.reason(t, clock() - start, headline)
        if reason is not None:
            return LoopResult(timings, reason, t, headline, order_seed, order_of_rounds)

