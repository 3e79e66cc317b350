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
