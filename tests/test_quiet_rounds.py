"""Confidence needs quiet rounds: no headline or headline comparison CI from fewer than
noise.MIN_QUIET_ROUNDS quiet rounds, and an adaptive point stops on its CI only after that many.
Synthetic rows and fake clocks: nothing is timed."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dspark_lab.measure import loop
from dspark_lab.results.rules import noise
from dspark_lab.results.rules import summaries

SLOW_MS = 2.4  # a host-side disturbance of the size measured on the shared H200


def rows(rounds: int, disturbed: set) -> pd.DataFrame:
    """device_direct ~8 ms and non_blocking ~6 ms per round; device_direct slowed in `disturbed` rounds."""
    rng = np.random.default_rng(3)
    out = []
    for t in range(rounds):
        dd = 8.0 * (1 + rng.normal(0, 0.005)) + (SLOW_MS if t in disturbed else 0.0)
        out += [{"strategy": "device_direct", "trial": t, "step_ms": dd, "status": "ok"},
                {"strategy": "non_blocking", "trial": t, "step_ms": 6.0 * (1 + rng.normal(0, 0.005)), "status": "ok"}]
    return pd.DataFrame(out)


def test_a_headline_from_nine_quiet_rounds_prints_the_count_and_no_ci():
    h = noise.headline(rows(12, {2, 5, 9}))
    assert h["quiet_rounds"] == 9 and h["excluded_rounds"] == 3
    assert h["ratio"] == pytest.approx(8 / 6, rel=0.02)
    assert h["ci_low"] is None and h["ci_high"] is None and h["half_width_pct"] is None
    assert "over 9 quiet rounds" in h["text"] and noise.TOO_FEW_QUIET in h["text"]
    assert "CI " not in h["text"] and "±" not in h["text"]


def test_a_headline_from_ten_quiet_rounds_has_its_ci():
    h = noise.headline(rows(13, {2, 5, 9}))
    assert h["quiet_rounds"] == 10 and h["half_width_pct"] is not None
    assert "95% CI" in h["text"] and noise.TOO_FEW_QUIET not in h["text"]


def test_the_headline_comparison_from_too_few_quiet_rounds_gives_no_ci():
    df = noise.mark_disturbed(rows(12, {2, 5, 9})).assign(run_id="r")
    c = summaries.compare(df, "non_blocking", "device_direct", noise.MIN_QUIET_ROUNDS)
    assert c["quiet_rounds"] == 9 and c["ci_low"] is None and c["measurable"] is None
    assert noise.TOO_FEW_QUIET in c["verdict"] and "9 quiet rounds" in c["verdict"] and "CI" not in c["verdict"]
    full = summaries.compare(noise.mark_disturbed(rows(13, {2, 5, 9})).assign(run_id="r"),
                             "non_blocking", "device_direct", noise.MIN_QUIET_ROUNDS)
    assert full["quiet_rounds"] == 10 and full["ci_low"] is not None and "95% CI" in full["verdict"]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def disturbed_steps(clock: FakeClock, slow_rounds: tuple, period: int):
    """device_direct slowed by SLOW_MS in the rounds r with r % period in `slow_rounds`."""
    calls = {"dd": 0}
    rng = np.random.default_rng(5)
    steps_per_trial = 5

    def dd():
        r = calls["dd"] // steps_per_trial
        calls["dd"] += 1
        clock.now += (8.0 * (1 + rng.normal(0, 0.002)) + (SLOW_MS if r % period in slow_rounds else 0.0)) * 1e-3

    def nb():
        clock.now += 6.0 * (1 + rng.normal(0, 0.002)) * 1e-3

    return {"device_direct": dd, "non_blocking": nb}


def run(clock, steps, stop):
    return loop.run_rounds(steps, stop, steps=5, warmup=0, sync=lambda: None, timer=clock, clock=clock)


def test_disturbed_rounds_do_not_count_towards_the_floor_of_the_ci_stop():
    clock = FakeClock()
    res = run(clock, disturbed_steps(clock, (0,), 3), loop.CITarget(3.0, 1e6))
    assert res.stop_reason == "ci_target"
    assert res.quiet_rounds == loop.MIN_ADAPTIVE_ROUNDS and res.rounds > loop.MIN_ADAPTIVE_ROUNDS
    assert res.half_width_pct is not None and res.half_width_pct <= 3.0


def test_heavy_disturbance_measures_on_until_the_time_cap():
    clock = FakeClock()
    cap = 0.9  # fake seconds: about 12 rounds of ~75 ms, 2 in 5 of them disturbed
    res = run(clock, disturbed_steps(clock, (0, 2), 5), loop.CITarget(3.0, cap))
    assert res.stop_reason == "time_cap" and res.quiet_rounds < loop.MIN_ADAPTIVE_ROUNDS
    assert res.half_width_pct is None  # and so the rows record no CI half-width
