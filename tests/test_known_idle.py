"""The known-idle step functions (gallery/known_idle.py): the model's expected idle on CPU, and on
CUDA that the GPU idle the trace charges to the syncs matches the profiler-free loss on each case."""
from __future__ import annotations

from pathlib import Path

import pytest

from dspark_lab.gallery import known_idle as ki
from dspark_lab.gallery.known_idle import GPU, HOST, SYNC


def test_the_model_times_a_gpu_bound_step_by_its_gpu_work_and_a_host_bound_one_by_its_host_work():
    assert ki.simulate(((GPU, 3.0), (HOST, 1.0))) == pytest.approx(3.0)
    # host-bound: the first GPU op (at the start) adds nothing but the last one's tail
    assert ki.simulate(((GPU, 1.0), (HOST, 3.0)), steps=10) == pytest.approx(3.0)


def test_a_sync_mid_step_costs_the_host_work_after_it_when_the_gpu_bound_step_is_drained():
    # with the sync: 3 ms of GPU work, then 1 ms of host work with the GPU idle, every step
    assert ki.get("one_mid").expected() == pytest.approx(
        {"step_ms": 4.0, "sync_free_step_ms": 3.0, "caused_idle_ms": 1.0})


def test_two_syncs_in_a_row_cost_more_than_the_second_ones_blocked_time():
    # 0.5 ms after the first sync and 1.5 ms after the second (blocked only 0.2 ms) are idle; the
    # sync-free step is host-bound at 2.4 ms. Capped one sync at a time the rule would say 0.7.
    e = ki.get("two_syncs").expected()
    assert e["step_ms"] == pytest.approx(4.3)
    assert e["caused_idle_ms"] == pytest.approx(1.9)


def test_a_sync_that_finds_the_gpu_idle_and_the_control_cost_nothing():
    assert ki.get("idle_gpu_sync").expected()["caused_idle_ms"] == pytest.approx(0.0)
    assert ki.get("sync_free").syncs_per_step == 0
    assert ki.get("sync_free").expected()["caused_idle_ms"] == pytest.approx(0.0)


def test_the_set_covers_one_two_and_three_syncs_per_step():
    assert {c.syncs_per_step for c in ki.CASES} == {0, 1, 2, 3}
    assert all(c.expected()["caused_idle_ms"] >= 0 for c in ki.CASES)


def test_the_studies_fixed_bound_allows_ten_percent_of_the_loss_or_the_absolute_floor_near_zero():
    from studies.known_idle import recheck as fb

    assert fb.within(1.09, 1.0) and not fb.within(1.11, 1.0)
    assert fb.within(0.04, 0.0) and not fb.within(0.06, 0.0)


def test_bad_ops_and_names_are_refused_naming_what_is_allowed():
    with pytest.raises(ValueError, match="an op must be"):
        ki.KnownIdleCase("x", "bad", (("sleep", 1.0),))
    with pytest.raises(ValueError, match="one of sync_free, one_mid"):
        ki.get("nope")


def test_the_table_has_one_line_per_case_and_says_no_where_the_rule_misses():
    rows = [{"case": "a", "syncs_per_step": 1, "expected_idle_ms": 1.0, "charged_idle_ms": 1.0, "loss_ms": 1.02,
             "loss_ci_low_ms": 0.98, "loss_ci_high_ms": 1.05, "within": True},
            {"case": "b", "syncs_per_step": 2, "expected_idle_ms": 1.9, "charged_idle_ms": 0.7, "loss_ms": 1.9,
             "loss_ci_low_ms": 1.8, "loss_ci_high_ms": 2.0, "within": False}]
    from studies.known_idle import recheck as fb

    lines = fb.table_lines(rows)
    assert len(lines) == 3 and lines[1].rstrip().endswith("yes") and lines[2].rstrip().endswith("NO")


@pytest.mark.cuda
@pytest.mark.parametrize("name", [c.name for c in ki.CASES])
def test_cuda_charged_idle_agrees_with_the_profiler_free_loss_within_the_measured_tolerance(name, record_property):
    """verify's cost check: the steady-state loss, the charge, the tolerance measured on the same step.
    Its numbers go to the JUnit report (`--junitxml`), so the spread over invocations can be read."""
    import json

    from dspark_lab.verify.checks import cost_checks

    (c,) = cost_checks([name])
    record_property("cost_check", json.dumps(c.numbers))
    assert c.passed, c.line()


def test_the_h200_traces_of_chained_syncs_are_charged_within_ten_percent_of_the_measured_loss():
    """Traces profiled on an H200 (tests/fixtures/known_idle_h200/) read by the rule, against the
    profiler-free loss measured there (studies/interference/h200-summary-20261201.json). Before
    `.item()`'s own copy was kept from ending a chain, two syncs charged 0.72 ms against a 1.95 ms loss."""
    from studies.known_idle import recheck

    rows = {r["case"]: r for r in recheck.recheck()}
    assert set(rows) == {"one_mid", "two_syncs", "three_syncs"}
    for r in rows.values():
        assert r["within"], r
    assert rows["two_syncs"]["charged_before_ms"] < 0.8  # the miss this fixes, as recorded


def test_the_suite_spread_reads_each_invocations_cost_numbers_and_marks_the_failed_run(tmp_path):
    """The spread table over CUDA-suite invocations, from JUnit reports as the device round writes them
    (the cost test's record_property) and from a committed verify record."""
    import json

    from studies.known_idle import suite_spread

    def report(path, loss, charged, failed):
        nums = json.dumps({"loss_ms": loss, "charged_ms": charged})
        failure = "<failure message='x'/>" if failed else ""
        path.write_text(
            "<testsuites><testsuite>"
            f"<testcase name='test_cuda_charged_idle[two_syncs]'><properties><property name='cost_check' "
            f"value='{nums}'/></properties>{failure}</testcase>"
            "<testcase name='test_other'/></testsuite></testsuites>")
        return path

    runs = [suite_spread.from_junit(report(tmp_path / "a.xml", 2.0, 1.9, False)),
            suite_spread.from_junit(report(tmp_path / "b.xml", 2.0, 2.1, True))]
    assert runs[0] == {"two_syncs": {"loss_ms": 2.0, "charged_ms": 1.9, "failed": False}}
    assert suite_spread.table(runs)[2] == "| two_syncs | 2 | -5.0 to +5.0 % | 1 | +5.0, -5.0 |"
    verify = suite_spread.from_verify(Path(__file__).parents[1] / "data/machines/h200-verify-20261202-0350.json")
    assert set(verify) <= {c.name for c in ki.CASES} and not any(v["failed"] for v in verify.values())
    assert suite_spread.gap(verify["sync_free"])[1] == "ms"  # a loss near zero is read in ms


BLOCKED = Path(__file__).parent / "fixtures" / "known_idle_h200_blocked"  # studies/known_idle/blocked_without_profiler.py


def test_on_the_h200_traces_a_host_bound_chain_is_charged_its_syncs_calls_host_time_as_timed_without_a_profiler():
    """Three repeats per case on an H200: the profiler-free loss, each `.item()` timed without a profiler,
    and the profiled trace. Where the cap binds (the host-bound cases) the charge is the syncs' calls'
    host time, which matches the loss; the bare cudaStreamSynchronize, shortened by the profiler's own
    host time before it, under-charged."""
    import json

    import numpy as np

    from dspark_lab.measure import breakdown, syncs, trace

    rows = json.loads((BLOCKED / "summary.json").read_text())["rows"]
    new_err, old_err = [], []
    for r in (r for r in rows if r["case"] in ("host_bound", "two_syncs")):
        ev = trace.events(BLOCKED / f"{r['case']}-{r['repeat']}.json.gz")
        calls = syncs.sync_calls(ev)
        spans = breakdown.call_spans_us(ev, calls)
        later = (calls.step >= 1).to_numpy()  # the first profiled step pays the profiler's start
        steps = calls.step[later].nunique()
        assert spans[later].sum() / 1e3 / steps == pytest.approx(sum(r["sync_host_ms_free"]), rel=0.01)

        def charge(caps=None):
            caused = breakdown.sync_caused_gaps(ev, calls, caps_us=caps)
            return float(breakdown.per_step(ev, calls, caused=caused).iloc[1:].gpu_idle_sync_caused_ms.mean())

        new_err.append(abs(charge() - r["loss_ms"]) / r["loss_ms"])
        old_err.append(abs(charge((calls.end - calls.ts).to_numpy()) - r["loss_ms"]) / r["loss_ms"])
    assert len(new_err) == 6 and max(new_err) < 0.015
    assert np.mean(new_err) < np.mean(old_err) / 2
