"""A fix's step-time change against its case, and both step times, from one set of paired rounds.

Each round runs one trial of the case and one of the fix (interleaved, the order drawn by the one
measurement loop, measure/loop.py), on the state the profiled passes used. The variants' step times
(medians with their 95% CIs) and the change (fix - case, per round, in ms and in percent) come from the
same trials, so the change a table shows is the difference of the step times it shows beside it, up to
the median of differences against the difference of medians.
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

import numpy as np

from dspark_lab.measure import loop
from dspark_lab.results.rules.stats import compare, median_ci

ROUNDS, STEPS, WARMUP = 10, 20, 3  # the gallery's default: 10 rounds (loop.MIN_ADAPTIVE_ROUNDS' floor) of 20 steps
STEP_CHANGE_RULE = ("the fix's step-time change against the case's: rounds of one profiler-free trial of each "
                    "(interleaved, on the state the profiled passes used, after them); the change is the median over "
                    "rounds of fix - case (ms, with a bootstrap 95% CI of that median) and of fix / case - 1 (%, "
                    "with its CI); each variant's step time is the median of its trials in the same rounds")


def summarise(case_ms: Sequence[float], fix_ms: Sequence[float], *, steps: int) -> dict:
    """The variants' step times and the change from paired per-round trial times (ms per step)."""
    a, b = np.asarray(case_ms, float), np.asarray(fix_ms, float)
    if a.size != b.size or a.size < 2:
        raise ValueError(f"case_ms and fix_ms must be paired rounds, at least 2 of each; got {a.size} and {b.size}")
    c = compare(b, a, "fix", "case", paired=True)
    ms, lo, hi = median_ci(b - a)
    change = {k: c[k] for k in ("pct", "ci_low", "ci_high", "measurable", "paired", "difference", "verdict")}
    change.update(ms=ms, ms_low=lo, ms_high=hi, rounds=int(a.size), steps=steps, same_rounds=True,
                  case_trials_ms=a.tolist(), fix_trials_ms=b.tolist())
    out = {"change": change}
    for name, x in (("case", a), ("fix", b)):
        med, vlo, vhi = median_ci(x)
        out[name] = {"step_ms": med, "step_ms_lo": vlo, "step_ms_hi": vhi}
    return out


def paired_rounds(case_step: Callable[[], object], fix_step: Callable[[], object], *, rounds: int = ROUNDS,
                  steps: int = STEPS, warmup: int = WARMUP, sync: Optional[Callable[[], None]] = None,
                  timer: Callable[[], float] = time.perf_counter) -> dict:
    """STEP_CHANGE_RULE over `rounds` rounds of `steps` steps (summarise's dict). `sync` drains the
    device before and after each trial (torch.cuda.synchronize on CUDA); `timer`: a fake in tests."""
    if rounds < 2 or steps < 1:
        raise ValueError(f"rounds must be at least 2 and steps at least 1; got rounds={rounds}, steps={steps}")
    t = loop.run_rounds({"case": case_step, "fix": fix_step}, loop.FixedRounds(rounds), steps=steps,
                        warmup=warmup, sync=sync or (lambda: None), timer=timer).timings
    return summarise([x.step_ms for x in t["case"]], [x.step_ms for x in t["fix"]], steps=steps)
