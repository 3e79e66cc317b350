import numpy as np
import pytest

from dspark_lab.measure import intervals as iv
from dspark_lab.measure import loop
from dspark_lab.results.rules.stats import compare, median_ci


def test_union_subtract_complement():
    assert iv.union([(0, 2), (1, 3), (5, 6)]) == [(0, 3), (5, 6)]
    assert iv.subtract([(0, 10)], [(2, 3), (5, 7)]) == [(0, 2), (3, 5), (7, 10)]
    assert iv.length(iv.complement([(1, 2), (4, 5)], 0, 6)) == 4
    assert iv.clip([(0, 10)], 2, 4) == [(2, 4)]


def test_median_ci_contains_median_and_narrows_with_more_samples():
    rng = np.random.default_rng(0)
    few, many = rng.normal(10, 1, 5), rng.normal(10, 1, 200)
    m, lo, hi = median_ci(few)
    assert lo <= m <= hi
    _, lo2, hi2 = median_ci(many)
    assert hi2 - lo2 < hi - lo


def test_compare_reports_a_real_difference_and_no_difference():
    rng = np.random.default_rng(1)
    b = rng.normal(10, 0.1, 10)
    a = b * 1.2
    c = compare(a, b, "slow", "fast")
    assert c["measurable"] and 19 < c["pct"] < 21 and c["verdict"].startswith("slow is 20.")
    same = compare(b + rng.normal(0, 0.3, 10), b, "x", "y")
    assert not same["measurable"] and same["verdict"].startswith("no measurable difference")


def test_interleaving_runs_each_step_once_per_round_in_the_recorded_order():
    order = []
    steps = {n: (lambda n=n: order.append(n)) for n in "ABC"}
    res = loop.run_rounds(steps, loop.FixedRounds(3), steps=1, warmup=0, sync=lambda: None)
    assert order == [n for o in res.orders for n in o] and all(sorted(o) == list("ABC") for o in res.orders)
    assert res.stop_reason == "fixed_trials" and res.rounds == 3
    assert {n: [t.trial for t in ts] for n, ts in res.timings.items()} == {n: [0, 1, 2] for n in "ABC"}


def test_compare_needs_samples():
    with pytest.raises(ValueError):
        compare([], [1.0])


def test_difference_wording_reads_right():
    from dspark_lab.results.rules.stats import difference_text

    assert difference_text(-29.8, -32.3, -25.4) == "29.8% faster (95% CI 25.4%\u201332.3%)"
    assert difference_text(12.0, 8.1, 15.0) == "12.0% slower (95% CI 8.1%\u201315.0%)"
    assert difference_text(1.2, -1.1, 3.5) == "no measurable difference (+1.2%, 95% CI \u22121.1% to +3.5%)"
    rng = np.random.default_rng(2)
    b = rng.normal(10, 0.1, 8)
    c = compare(b * 0.7, b, "fix", "baseline")
    lo, hi = sorted((abs(c["ci_low"]), abs(c["ci_high"])))
    assert c["verdict"] == f"fix is {abs(c['pct']):.1f}% faster than baseline (95% CI {lo:.1f}%\u2013{hi:.1f}%)"
    assert c["paired"] and c["n_a"] == c["n_b"] == 8

