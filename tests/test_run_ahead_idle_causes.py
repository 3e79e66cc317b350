"""Run-ahead (the host's launch lead at each launch and the share of launches that found the GPU busy)
and GPU idle by cause (sync-caused + host-bound + other = idle), on the traces recorded on an H200
(tests/fixtures) and on small synthetic traces whose answer is known by construction."""
from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest

from dspark_lab.measure import breakdown, idle_causes, run_ahead, trace
from helpers import Trace

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = sorted(glob.glob(str(FIXTURES / "traces" / "*.json.gz")) + glob.glob(str(FIXTURES / "known_idle_h200" / "*.json.gz")))


def strategy(name: str):
    return trace.events(FIXTURES / "traces" / f"sglang_profile_{name}.rank0.json.gz")


@pytest.mark.parametrize("path", RECORDED, ids=[Path(p).name.split(".")[0] for p in RECORDED])
def test_the_causes_sum_to_the_measured_idle_of_every_recorded_step(path):
    per = breakdown.per_step(trace.events(path))
    named = per.gpu_idle_sync_caused_ms + per.gpu_idle_host_bound_ms + per.gpu_idle_other_cause_ms
    assert np.allclose(named, per.gpu_idle_ms, atol=1e-9)
    assert (per[list(idle_causes.COLUMNS)] >= 0).all().all()


@pytest.mark.parametrize("path", RECORDED, ids=[Path(p).name.split(".")[0] for p in RECORDED])
def test_a_launch_queued_behind_work_had_a_positive_lead_and_one_into_an_idle_gpu_did_not(path):
    # Two readings of the same trace: breakdown's `waited` (the op started long after the call
    # returned) and the lead (work was still queued when the call began).
    lau = run_ahead.leads(breakdown.launches(trace.events(path))).dropna(subset=["lead_us"])
    assert (lau[lau.waited].lead_us > 0).all()
    assert (lau[lau.lead_us < -breakdown.HOST_AHEAD_US].waited == False).all()  # noqa: E712


def test_the_sync_free_strategies_run_further_ahead_than_device_direct_on_the_recorded_h200():
    frac = {n: breakdown.summary(strategy(n))["run_ahead_fraction"]
            for n in ("ep1_device_direct", "ep1_non_blocking", "ep1_on_demand", "ep1_persistent_fill")}
    assert frac["ep1_device_direct"] < min(frac[n] for n in frac if n != "ep1_device_direct")
    # Without any sync or pageable staging in the step every launch found the GPU still busy.
    assert frac["ep1_persistent_fill"] == 1.0 and frac["ep1_on_demand"] == 1.0


def test_device_direct_idle_is_mostly_charged_to_its_sync_and_sync_free_steps_have_none_charged():
    dd, pf = breakdown.summary(strategy("ep1_device_direct")), breakdown.summary(strategy("ep1_persistent_fill"))
    assert dd["gpu_idle_sync_caused_ms"] > dd["gpu_idle_host_bound_ms"] + dd["gpu_idle_other_cause_ms"]
    assert pf["gpu_idle_sync_caused_ms"] == 0 and pf["gpu_idle_host_bound_ms"] == 0


# -- synthetic traces ---------------------------------------------------------------------------------
def test_a_host_bound_step_names_the_wait_for_the_host_as_host_bound_and_the_launch_latency_other():
    t = Trace()
    t.step(0, 3000)
    t.launch(0, 10, 12, 1000)        # 1 ms of GPU work
    t.launch(2000, 2010, 2012, 2500)  # the host spent 2 ms before launching again: no sync anywhere
    row = breakdown.per_step(t.ev()).iloc[0]
    assert row.gpu_idle_sync_caused_ms == 0
    # until the second call began, and the step's tail after the last op (the host had launched nothing more)
    assert row.gpu_idle_host_bound_ms == pytest.approx((2000 - 1000 + 3000 - 2500) / 1e3)
    # the launch calls' own latency: 12 µs before the first op, 12 µs before the second
    assert row.gpu_idle_other_cause_ms == pytest.approx((12 + 12) / 1e3)
    assert row.gpu_idle_ms == pytest.approx(row.gpu_idle_host_bound_ms + row.gpu_idle_other_cause_ms)
    # The second launch found the GPU idle for 1 ms: a lead of -1 ms; nobody ran ahead.
    assert (row.launch_lead_min_ms, row.run_ahead_fraction) == (pytest.approx(-1.0), 0.0)


def test_the_idle_after_a_draining_sync_is_charged_to_it_up_to_its_blocked_time_the_rest_is_host_bound():
    t = Trace()
    t.step(0, 4000)
    t.launch(0, 10, 12, 1000)
    t.sync(100, 1005)                # blocked 905 µs, drains the queue
    t.launch(3000, 3010, 3012, 3500)  # 2 ms of host work after it: the sync can have cost at most 905 µs
    row = breakdown.per_step(t.ev()).iloc[0]
    assert row.gpu_idle_sync_caused_ms == pytest.approx(0.905)
    assert row.gpu_idle_host_bound_ms == pytest.approx((3000 - 1000 - 905 + 4000 - 3500) / 1e3)


def test_a_host_ahead_of_the_gpu_has_a_positive_lead_at_each_launch():
    t = Trace()
    t.step(0, 3000)
    t.launch(0, 10, 12, 1000)
    t.launch(20, 30, 1000, 2000)   # 980 µs queued when it was launched
    t.launch(40, 50, 2000, 2100)   # 1960 µs queued
    row = breakdown.per_step(t.ev()).iloc[0]
    assert row.run_ahead_fraction == 1.0  # the first launch has nothing before it and is not counted
    assert (row.launch_lead_median_ms, row.launch_lead_min_ms) == (pytest.approx(1.47), pytest.approx(0.98))
    assert row.gpu_idle_host_bound_ms == pytest.approx((3000 - 2100) / 1e3)  # only the tail after the last op
    assert row.gpu_idle_other_cause_ms == pytest.approx(12 / 1e3)


def test_the_summary_pools_the_launches_of_the_steps_after_the_first():
    t = Trace()
    for k in range(3):
        t.step(k * 3000, (k + 1) * 3000)
        t.launch(k * 3000, k * 3000 + 10, k * 3000 + 12, k * 3000 + 1000)
        t.launch(k * 3000 + 20, k * 3000 + 30, k * 3000 + 1000, k * 3000 + 1500 + 500 * k)
    s = breakdown.summary(t.ev())
    # Steps 1 and 2: leads -2000+500 (into the idle GPU left by step 0 / 1) and +970 / +970 at the second launch.
    assert s["run_ahead_fraction"] == 0.5 and s["launches_per_step"] == 2
    assert s["launch_lead_min_ms"] == pytest.approx(-(3000 - 1500) / 1e3)


def test_the_timeline_draws_the_idle_by_cause_and_labels_each_step_with_its_run_ahead():
    e = strategy("ep1_device_direct")
    segs = breakdown.timeline(e)
    parts = {s[1] for s in segs}
    assert {"idle_sync_caused", "idle_host_bound", "idle_other"} <= parts
    gpu_busy = [(s[2], s[3]) for s in segs if s[1] == "busy"]
    for s in segs:
        if s[1] in ("idle_host_bound", "idle_other"):  # idle is never drawn over GPU work
            assert not any(a < s[3] - 1e-6 and s[2] + 1e-6 < b for a, b in gpu_busy), s
    per = breakdown.per_step(e)
    first = next(s for s in segs if s[1] == "step")
    assert first[4].startswith("step 1 · launch lead median") and f"{per.run_ahead_fraction[1]:.2f}" in first[4]


# -- as records show them (results/analyses/run_ahead_idle.py) ----------------------------------------
def test_a_records_idle_shares_sum_to_one_and_its_report_lines_name_each_cause():
    from dspark_lab.results.analyses import run_ahead_idle

    parts = breakdown.summary(strategy("ep1_device_direct"))
    sh = run_ahead_idle.shares(parts)
    assert sum(sh.values()) == pytest.approx(1.0) and sh["sync"] > 0.5
    lead_line, idle_line = run_ahead_idle.text_lines(parts)
    assert f"{parts['run_ahead_fraction']:.3f} of launches" in lead_line
    assert all(f"{c.replace('_', '-')} {parts[k]:.3f} ms" in idle_line for c, k, _ in run_ahead_idle.IDLE_CAUSES)


def test_a_record_made_before_the_causes_existed_shows_none_of_them():
    from dspark_lab.results.analyses import run_ahead_idle

    old = {"gpu_idle_ms": 1.0, "gpu_idle_sync_caused_ms": 0.5}
    assert run_ahead_idle.shares(old) is None and run_ahead_idle.text_lines(old) == []


def test_diff_compares_the_run_ahead_and_the_idle_by_cause():
    from dspark_lab.results.analyses import step_diff

    def rec(name):
        return {"counts": {}, "parts": breakdown.summary(strategy(name))}
    s = step_diff.summary(rec("ep1_device_direct"), rec("ep1_persistent_fill")).set_index("what")
    row = s.loc["run-ahead fraction (launches that found the GPU busy)"]
    assert row.after == 1.0 and row.change == pytest.approx(1.0 - row.before) and row.change > 0


# -- the panel's figure (views/figures/idle_causes.py) ------------------------------------------------
def test_the_figure_stacks_the_causes_to_the_idle_and_writes_the_run_ahead_over_each_bar():
    from helpers import a_point, synthetic_runs

    from dspark_lab.views.figures.idle_causes import NOT_RECORDED, idle_by_cause

    rows = a_point(synthetic_runs()[0])
    old = idle_by_cause(rows)  # a run recorded before the causes were measured says so
    assert any(NOT_RECORDED in a.text for a in old.layout.annotations)
    measured = {s: breakdown.summary(strategy(n)) for s, n in
                (("device_direct", "ep1_device_direct"), ("persistent_fill", "ep1_persistent_fill"))}
    rows = rows[rows.strategy.isin(list(measured))].copy()
    for k in ("gpu_idle_ms", "gpu_idle_sync_caused_ms", "gpu_idle_host_bound_ms", "gpu_idle_other_cause_ms",
              "run_ahead_fraction", "launch_lead_median_ms"):
        rows[k] = [measured[s][k] for s in rows.strategy]
    fig = idle_by_cause(rows)
    bars = [t for t in fig.data if t.type == "bar"]
    tops = [b + y for b, y in zip(bars[-1].base, bars[-1].y)]
    assert tops == pytest.approx([measured[s]["gpu_idle_ms"] for s in bars[-1].x])
    [text] = [t for t in fig.data if t.type == "scatter"]
    assert f"run-ahead {measured['device_direct']['run_ahead_fraction']:.2f}" in text.text[list(text.x).index("device_direct")]
    assert not fig.layout.annotations or all(NOT_RECORDED not in a.text for a in fig.layout.annotations)
