"""studies/trace/known_cost_roundtrip.py up to where CUDA is needed: the read-back and the comparison
on the committed H200 kit traces, and its clear exit without CUDA."""
from __future__ import annotations

import pytest

from studies.trace import known_cost_roundtrip as study


def test_dry_run_reads_the_kit_traces_back_equal(capsys):
    assert study.dry_run() == 0
    out = capsys.readouterr().out
    assert out.count("True") >= 6  # equal and within the CI, per case


def test_compare_flags_a_user_trace_outside_the_ci(tmp_path):
    path = str(study.FIXTURES / "wait_item.json.gz")
    other = str(study.FIXTURES / "two_syncs.json.gz")  # a different step's charge: not inside wait_item's CI
    from dspark_lab.measure import breakdown, syncs, trace

    ev = trace.events(path)
    row = study.compare("wait_item", breakdown.summary(ev, calls=syncs.sync_calls(ev)), [path], [other], [other])
    assert row["same_trace_equal"] and row["user_trace_within_ci"] is False
    assert row["user_minus_inspect_ms"] < 0 and row["default_minus_inspect_ms"] == row["user_minus_inspect_ms"]
    assert row["ci_over"] == "steps of one capture"


def test_with_several_captures_the_ci_is_over_captures_and_a_charge_inside_it_passes():
    a = str(study.FIXTURES / "wait_item.json.gz")
    b = str(study.FIXTURES / "wait_cpu.json.gz")  # another capture of a step of the same known cost
    from dspark_lab.measure import breakdown, syncs, trace

    ev = trace.events(a)
    row = study.compare("wait_item", breakdown.summary(ev, calls=syncs.sync_calls(ev)), [a, b], [a, b])
    assert row["ci_over"] == "captures" and len(row["inspect_captures"]) == 2
    lo, hi = row["inspect_charge_ci"][1:]
    assert lo <= sum(row["user_charges"]) / 2 <= hi and row["user_trace_within_ci"] is True


def test_without_cuda_it_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    assert study.main([]) == 6


def test_the_difference_ci_is_welchs_over_both_ways_of_capturing():
    a = str(study.FIXTURES / "wait_item.json.gz")
    b = str(study.FIXTURES / "wait_cpu.json.gz")
    c = str(study.FIXTURES / "two_syncs.json.gz")  # about 1.3 ms less charge: a real difference
    from dspark_lab.measure import breakdown, syncs, trace

    ev = trace.events(a)
    same = study.compare("wait_item", breakdown.summary(ev, calls=syncs.sync_calls(ev)), [a, b], [b, a])
    assert same["user_equal_within_difference_ci"] is True and abs(same["user_minus_inspect_ci"][0]) < 1e-9
    apart = study.compare("wait_item", breakdown.summary(ev, calls=syncs.sync_calls(ev)), [a, b], [c, c])
    d, lo, hi = apart["user_minus_inspect_ci"]
    assert apart["user_equal_within_difference_ci"] is False and hi < 0 and lo <= d <= hi


def test_welch_difference_ci_is_students_t_and_refuses_fewer_than_two_a_side():
    from dspark_lab.results.rules.stats import t_975, welch_difference_ci

    d, lo, hi = welch_difference_ci([3.0, 3.1, 3.2], [2.0, 2.1, 2.2])
    # equal variances 0.01, 3 a side: df 4, half-width t(4) * sqrt(0.01/3 + 0.01/3)
    assert abs(d - 1.0) < 1e-9 and abs((hi - lo) / 2 - 2.776 * (0.02 / 3) ** 0.5) < 1e-9
    assert t_975(2.1) == t_975(2) == 4.303 and t_975(40) == 1.96
    with pytest.raises(ValueError, match="at least two samples a side"):
        welch_difference_ci([1.0], [1.0, 2.0])


def test_a_bootstrap_of_three_captures_a_side_covers_less_than_welchs_t():
    import numpy as np

    from dspark_lab.results.rules.stats import welch_difference_ci

    # 2000 pairs of 3 normal captures a side, equal means: how often each 95% CI holds the true 0
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2000, 3)), rng.normal(size=(2000, 3))
    rows = np.arange(2000)[:, None, None]
    boots = (x[rows, rng.integers(0, 3, (2000, 500, 3))].mean(-1)
             - y[rows, rng.integers(0, 3, (2000, 500, 3))].mean(-1))
    lo, hi = np.percentile(boots, [2.5, 97.5], axis=1)
    assert np.mean((lo <= 0) & (0 <= hi)) < 0.88  # about 0.80: the percentile bootstrap's under-coverage
    assert np.mean([a <= 0 <= b for _, a, b in map(welch_difference_ci, x, y)]) >= 0.95  # df rounded down


def test_the_recorded_h200_round_trip_read_with_todays_cis():
    import json
    from pathlib import Path

    rec = json.loads((Path(__file__).resolve().parents[1] / "data" / "trace"
                      / "h200-known-cost-roundtrip-20261204-194209.json").read_text())
    rows = {r["case"]: r for r in study.reanalysed(rec)}
    inside = {c for c, r in rows.items() if r["user_trace_within_ci"]}
    assert inside == {"wait_item", "wait_pageable_d2h", "two_syncs", "draft_step"}  # wait_cpu 0.0002 ms past it
    lo, hi = rows["wait_cpu"]["inspect_charge_ci"][1:]
    assert hi < sum(rows["wait_cpu"]["user_charges"]) / 3 < hi + 0.001
    assert all(r["same_trace_equal"] for r in rows.values())
