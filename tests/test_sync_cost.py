"""What a sync costs: the GPU idle charged to the sync that caused it (measure.breakdown), on the
recorded H200 traces and on small synthetic traces for the rule's edges, and the measured
step-time loss beside it (dspark_lab/results/analyses/sync_cost.py)."""
import glob
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dspark_lab.views import figures
from dspark_lab.results.loading import load as run_load
from dspark_lab.results.record import schema
from dspark_lab.measure import breakdown, syncs, trace
from dspark_lab.results.analyses import sync_cost as sc
from dspark_lab.measure.ranges import READBACK_RANGE
from helpers import Trace

ROOT = Path(__file__).resolve().parents[1]
T = ROOT / "tests" / "fixtures" / "traces"
SYNC_FREE = ["ep1_non_blocking", "ep1_on_demand", "ep1_persistent_fill", "ep8_on_demand_pinned"]


def ev(name):
    return trace.events(T / f"sglang_profile_{name}.rank0.json.gz")


# -- recorded H200 traces -------------------------------------------------------------------------

def test_device_direct_charged_idle_matches_the_idle_the_sync_free_strategy_does_not_have():
    dd, nb = breakdown.summary(ev("ep1_device_direct")), breakdown.summary(ev("ep1_non_blocking"))
    extra_idle = dd["gpu_idle_ms"] - nb["gpu_idle_ms"]
    assert extra_idle > 0
    assert dd["gpu_idle_sync_caused_ms"] == pytest.approx(extra_idle, rel=0.10)
    # The old column charged only the first gap: far from it.
    assert dd["gpu_idle_after_sync_ms"] < 0.9 * extra_idle


@pytest.mark.parametrize("name", SYNC_FREE)
def test_sync_free_strategies_have_no_idle_charged(name):
    e = ev(name)
    assert (breakdown.per_step(e).gpu_idle_sync_caused_ms == 0).all()
    assert breakdown.sync_caused_gaps(e).empty
    assert not [s for s in breakdown.timeline(e) if s[1] == "idle_sync_caused"]


def test_each_charged_gap_is_gpu_idle_points_at_its_sync_and_no_sync_is_charged_more_than_its_calls_host_time():
    e = ev("ep1_device_direct")
    calls = syncs.sync_calls(e)
    gaps = breakdown.sync_caused_gaps(e, calls)
    assert not gaps.empty
    busy = breakdown.gpu_intervals(e)
    for r in gaps.itertuples():
        assert r.start < r.end <= r.gap_end
        assert not any(s < r.end and r.start < b for s, b in busy)  # inside a GPU idle gap
        c = calls.iloc[r.sync]
        assert (r.sync_name, r.sync_site, r.sync_step) == (c["name"], c["site"], c["step"])
        assert not c["readback"] and r.start >= c["ts"]
    per_sync = (gaps.end - gaps.start).groupby(gaps.sync).sum()
    host_time = pd.Series(breakdown.call_spans_us(e, calls))[per_sync.index]
    assert (per_sync <= host_time + 1e-6).all()
    assert (host_time >= (calls.end - calls.ts)[per_sync.index] - 1e-6).all()  # the op holds the call
    # Each step's charge is part of its GPU idle, and more than the first gap alone.
    df = breakdown.per_step(e)
    assert (df.gpu_idle_sync_caused_ms <= df.gpu_idle_ms + 1e-9).all()
    assert (df.gpu_idle_sync_caused_ms.iloc[1:] > df.gpu_idle_after_sync_ms.iloc[1:]).all()


def test_host_ahead_threshold_separates_launches_into_an_idle_gpu_from_queued_ones():
    # On the recorded traces, every launch's first op starts either within a few µs of the call's
    # return (the GPU was idle) or long after (queued): none is near HOST_AHEAD_US.
    for name in ["ep1_device_direct"] + SYNC_FREE:
        lau = breakdown.launches(ev(name))
        delay = (lau.gpu_start - lau.end).to_numpy()
        assert len(delay) and lau.waited.any() and (~lau.waited).any()
        assert not ((delay > breakdown.HOST_AHEAD_US / 4) & (delay < breakdown.HOST_AHEAD_US * 4)).any(), name


def test_timeline_marks_the_caused_idle_with_the_sync_and_its_site():
    e = ev("ep1_device_direct_stacks")
    segs = breakdown.timeline(e)
    caused = [s for s in segs if s[1] == "idle_sync_caused"]
    assert caused and all(s[0] == "gpu" for s in caused)
    assert all(s[4].startswith("GPU idle caused by a blocking copy to the device (cudaStreamSynchronize) at dspark_lab/strategies.py(") for s in caused)
    fig = figures.timeline(pd.DataFrame([{"point_id": "p", "strategy": "device_direct", "segments": segs}]))
    assert figures.TIMELINE_NAMES["idle_sync_caused"] in {t.name for t in fig.data}


# -- synthetic traces: the rule's edges -------------------------------------------------------------

def charged(tr):
    g = breakdown.sync_caused_gaps(tr.ev())
    return [(r.start, r.end, r.sync_name) for r in g.itertuples()]


def test_a_drained_queue_charges_each_gap_until_the_host_is_ahead_again():
    t = Trace()
    t.step(0, 3000)
    t.launch(0, 10, 12, 500)
    t.sync(20, 505)                    # waits for the kernel: drains the queue
    t.launch(700, 710, 712, 800)       # found the GPU idle: gap 500-712 is the sync's
    t.launch(900, 910, 912, 1000)      # idle again: gap 800-912 too (host still not ahead)
    t.launch(920, 930, 1000, 2000)     # queued behind 912-1000: the host is ahead again
    t.launch(2500, 2510, 2512, 2600)   # gap 2000-2512: the host's own, not the sync's
    assert charged(t) == [(500, 712, "cudaStreamSynchronize"), (800, 912, "cudaStreamSynchronize")]
    row = breakdown.per_step(t.ev()).iloc[0]
    assert row.gpu_idle_sync_caused_ms == pytest.approx((212 + 112) / 1e3)
    assert row.gpu_idle_after_sync_ms == pytest.approx(212 / 1e3)  # the old column: first gap only


def test_the_charge_spans_into_the_next_step_until_its_first_queued_launch():
    t = Trace()
    t.step(0, 1000)
    t.step(1000, 3000)
    t.launch(0, 10, 12, 600)
    t.sync(20, 605)
    t.launch(800, 810, 812, 900)       # rest of step 0
    t.launch(1200, 1210, 1212, 2500)   # step 1's first launch (its "target verify"), GPU idle
    t.launch(1300, 1310, 2500, 2600)   # queued: host ahead
    assert charged(t) == [(600, 812, "cudaStreamSynchronize"), (900, 1212, "cudaStreamSynchronize")]
    df = breakdown.per_step(t.ev())
    assert df.gpu_idle_sync_caused_ms.tolist() == pytest.approx([(212 + 100) / 1e3, 212 / 1e3])


def test_two_syncs_in_one_step_each_gap_goes_to_the_latest_sync_that_drained_the_queue():
    t = Trace()
    t.step(0, 2000)
    t.launch(0, 10, 12, 500)
    t.sync(20, 505, "cudaStreamSynchronize")
    t.launch(600, 610, 612, 895)
    t.sync(620, 900, "cudaDeviceSynchronize")
    t.launch(1000, 1010, 1012, 1100)
    t.launch(1020, 1030, 1100, 1900)   # host ahead
    assert charged(t) == [(500, 612, "cudaStreamSynchronize"), (895, 1012, "cudaDeviceSynchronize")]


def test_syncs_in_a_chain_share_one_budget_their_summed_blocked_time():
    # Two syncs with the host never ahead in between: the second is blocked only 80 µs, the gap
    # after it is 600 µs. Capped one by one it would get 80; the chain's budget is 485 + 80.
    t = Trace()
    t.step(0, 3000)
    t.launch(0, 10, 12, 500)
    t.sync(20, 505)                       # drains: blocked 485
    t.launch(600, 610, 612, 700)          # found the GPU idle: the host is not ahead
    t.sync(620, 700, "cudaDeviceSynchronize")  # drains again: blocked 80, joins the chain
    t.launch(1300, 1310, 1312, 1400)      # gap 700-1312 (612 µs), charged to the second sync
    assert charged(t) == [(500, 612, "cudaStreamSynchronize"), (700, 1153, "cudaDeviceSynchronize")]
    # 112 + 453 = 565 = 485 + 80: the chain's whole budget, no more


def test_a_host_ahead_between_two_syncs_makes_two_chains_each_capped_by_its_own_blocked_time():
    t = Trace()
    t.step(0, 3000)
    t.launch(0, 10, 12, 500)
    t.sync(20, 505)                       # blocked 485
    t.launch(510, 520, 522, 900)          # found the GPU idle (gap 500-522 is the first sync's)
    t.launch(530, 540, 900, 1000)         # queued: the host is ahead, the first chain ends
    t.sync(620, 1000, "cudaDeviceSynchronize")  # drains: a chain of its own, blocked 380
    t.launch(1800, 1810, 1812, 1900)      # gap 1000-1812: only 380 µs are the second sync's
    assert charged(t) == [(500, 522, "cudaStreamSynchronize"), (1000, 1380, "cudaDeviceSynchronize")]


# (trace as Trace calls, the charged gaps): what a sync is charged depends on the queue it drains.
CHARGE_CASES = [
    pytest.param([("step", 0, 3000), ("launch", 0, 10, 12, 100),
                  ("launch", 20, 30, 100, 2000),  # long work queued behind
                  ("sync", 40, 120, "cudaEventSynchronize"),  # waits for the first kernel only: the queue is not empty
                  ("launch", 300, 310, 2000, 2100), ("launch", 2500, 2510, 2512, 2600)],
                 [], id="long-gpu-work-queued-behind-it-drains-nothing"),
    pytest.param([("step", 0, 2000), ("launch", 0, 10, 12, 100),
                  ("sync", 400, 405),  # the GPU has been idle since 100: nothing to wait for
                  ("launch", 900, 910, 912, 1000)],
                 [], id="an-already-empty-queue-charges-nothing"),
    pytest.param([("step", 0, 4000), ("launch", 0, 10, 12, 500), ("sync", 20, 505),
                  ("launch", 510, 520, 522, 3000),  # long work, GPU was idle: gap 500-522 is the sync's
                  ("launch", 530, 540, 3000, 3050),  # queued: the host is ahead again
                  ("launch", 3500, 3510, 3512, 3600)],  # gap 3050-3512: not the sync's
                 [(500, 522, "cudaStreamSynchronize")], id="the-host-getting-ahead-ends-the-charge"),
]


@pytest.mark.parametrize("calls,expected", CHARGE_CASES)
def test_a_sync_is_charged_only_the_gpu_idle_it_caused(calls, expected):
    t = Trace()
    for name, *args in calls:
        getattr(t, name)(*args)
    assert charged(t) == expected


def test_no_sync_is_charged_more_idle_than_the_host_was_blocked_in_it():
    t = Trace()
    t.step(0, 2000)
    t.launch(0, 10, 12, 100)
    t.sync(20, 105)                    # blocked 85 µs
    t.launch(400, 410, 412, 500)       # gap 100-412 (312 µs): only its first 85 µs are the sync's
    assert charged(t) == [(100, 185, "cudaStreamSynchronize")]


def test_a_sync_made_inside_a_framework_op_is_capped_by_the_ops_host_time_not_the_bare_call():
    # `.item()`: aten::_local_scalar_dense issues the copy, waits in cudaStreamSynchronize and wakes;
    # without the sync the host saves the whole op (150 µs), not only the 85 µs of the wait.
    t = Trace()
    t.step(0, 2000)
    t.launch(0, 10, 12, 100)
    t.host("aten::item", 5, 160, cat="cpu_op")
    t.host("aten::_local_scalar_dense", 10, 160, cat="cpu_op")  # the innermost op around the sync
    t.sync(20, 105)
    t.host("aten::add", 300, 310, cat="cpu_op")  # an op that encloses no sync changes nothing
    t.launch(400, 410, 412, 500)       # gap 100-412: 150 µs of it are the sync's
    e = t.ev()
    assert breakdown.call_spans_us(e, syncs.sync_calls(e)).tolist() == [150.0]
    assert charged(t) == [(100, 250, "cudaStreamSynchronize")]
    # Without the op (a trace without CPU ops) the bare call's 85 µs cap it, as before.
    bare = Trace()
    bare.events = [x for x in t.events if x["cat"] != "cpu_op"]
    assert charged(bare) == [(100, 185, "cudaStreamSynchronize")]


def test_readback_syncs_are_charged_nothing_and_end_an_earlier_charge():
    t = Trace()
    t.step(0, 3000)
    t.launch(0, 10, 12, 500)
    t.sync(20, 505)
    t.launch(600, 610, 612, 1000)
    t.host(READBACK_RANGE, 700, 1010, cat="user_annotation")
    t.sync(710, 1005, "cudaEventSynchronize")  # by design, drains the queue
    t.launch(1500, 1510, 1512, 1600)
    assert charged(t) == [(500, 612, "cudaStreamSynchronize")]


# -- the counterfactual: measured loss beside the charged idle -------------------------------------

def synthetic_rows():
    drift = [0.0, 0.3, -0.2, 0.5, 0.1, 0.0]
    extra = [2.0, 2.1, 1.9, 2.2, 2.0, 1.8]
    rows = []
    for t, (d, x) in enumerate(zip(drift, extra)):
        for s, step, syn, idle, caused in (("sync_one", 5 + d + x, 1.0, 2.6, 1.9), ("free_fast", 5 + d, 0.0, 0.5, 0.0),
                                            ("free_slow", 6 + d, 0.0, 0.4, 0.0)):
            rows.append(dict(point_id="p", status="ok", strategy=s, trial=t, step_ms=step, syncs_per_step=syn,
                             gpu_idle_ms=idle, gpu_idle_sync_caused_ms=caused, host_blocked_ms=3.0 * syn))
    return pd.DataFrame(rows), extra, drift


def test_loss_is_paired_per_round_against_the_best_sync_free_strategy():
    rows, extra, drift = synthetic_rows()
    t = sc.sync_cost(rows)
    assert t.strategy.tolist() == ["sync_one"]
    r = t.iloc[0]
    assert r.baseline == "free_fast" and r.rounds == len(extra)
    assert r.loss_ms == pytest.approx(np.median(extra))  # drift cancels in each round
    assert r.ratio == pytest.approx(np.median([(5 + d + x) / (5 + d) for d, x in zip(drift, extra)]))
    assert min(extra) <= r.loss_ci_low_ms <= r.loss_ms <= r.loss_ci_high_ms <= max(extra)
    assert r.measurable
    assert r.charged_idle_ms == pytest.approx(1.9) and r.idle_diff_ms == pytest.approx(2.6 - 0.5)
    assert r.charged_column == sc.CHARGED_COLUMN
    assert "sync_one: +" in sc.describe(t)[0]


def test_older_runs_fall_back_to_the_first_gap_column_and_bad_input_is_refused():
    rows, _, _ = synthetic_rows()
    old = rows.drop(columns=[sc.CHARGED_COLUMN]).assign(gpu_idle_after_sync_ms=0.7)
    r = sc.sync_cost(old).iloc[0]
    assert r.charged_column == sc.OLD_CHARGED_COLUMN and r.charged_idle_ms == pytest.approx(0.7)
    with pytest.raises(ValueError, match="sync-free"):
        sc.sync_cost(rows[rows.strategy == "sync_one"])
    with pytest.raises(ValueError, match="point_id"):
        sc.sync_cost(pd.concat([rows, rows.assign(point_id="q")]))
    with pytest.raises(ValueError, match="step_ms"):
        sc.sync_cost(rows.drop(columns=["step_ms"]))
    assert sc.sync_cost(rows[rows.strategy != "sync_one"]).empty


def test_recorded_h200_run_device_direct_loses_measurably_against_a_sync_free_strategy():
    rows = run_load.load(sorted(glob.glob(str(ROOT / "data" / "runs" / "h200-sglang-profile-*.jsonl")))).rows
    t = sc.for_points(rows)
    dd = t[t.strategy == "device_direct"]
    assert len(dd) == rows.point_id.nunique()
    assert (dd.loss_ms > 0).all() and (dd.loss_ci_low_ms > 0).all() and dd.measurable.all()
    assert (dd.baseline != "device_direct").all() and (dd.idle_diff_ms > 0).all()


def test_figures_show_the_charged_idle_beside_the_loss():
    rows, _, _ = synthetic_rows()
    full = rows.assign(**{c: 0.1 for c in schema.HOST_PARTS}, gpu_busy_ms=4.0, gpu_idle_after_sync_ms=0.3,
                       profiled_step_ms=6.0)
    f = figures.sync_cost(full)
    by = {d.name: d for d in f.data}
    t = sc.sync_cost(rows)
    loss = next(d for n, d in by.items() if n.startswith("step-time loss"))
    assert list(loss.y) == pytest.approx(t.loss_ms.tolist())
    assert list(by[figures.PART_NAMES[sc.CHARGED_COLUMN] + " (profiled)"].y) == pytest.approx([1.9])
    # The breakdown draws the new column as the sync's GPU part, and the old one (with a note) without it.
    names = {d.name: d for d in figures.step_breakdown(full).data}
    bar = names[figures.PART_NAMES[sc.CHARGED_COLUMN]]
    assert dict(zip(bar.x, bar.y)) == pytest.approx({"sync_one": 1.9, "free_fast": 0.0, "free_slow": 0.0})
    old = figures.step_breakdown(full.drop(columns=[sc.CHARGED_COLUMN]))
    assert figures.PART_NAMES["gpu_idle_after_sync_ms"] in {d.name for d in old.data}
    assert "older run" in old.layout.annotations[0].text


def test_gpu_stage_table_reports_each_point_type():
    from studies.sync_cost import point_types as stage

    rows, extra, _ = synthetic_rows()
    both = pd.concat([rows.assign(workload="sglang_profile", device="cuda"),
                      rows[rows.strategy != "sync_one"].assign(workload="gpu_bound", point_id="q", device="cpu")])
    lines = stage.table(both)
    sgl = next(line for line in lines if line.startswith("sglang_profile"))
    assert "sync_one" in sgl and "free_fast" in sgl and f"{np.median(extra):+.2f} ms" in sgl and "1.90 ms" in sgl
    assert "no strategy synchronizes here" in next(line for line in lines if line.startswith("gpu_bound"))
    assert "not measured" in next(line for line in lines if line.startswith("host_bound"))


@pytest.mark.cuda
def test_cuda_a_users_item_is_charged_the_idle_of_the_host_work_after_it():
    import time

    import torch

    from dspark_lab.measure.step import measure_step

    x = torch.randn(2048, 2048, device="cuda")

    def host_work():
        end = time.perf_counter() + 0.5e-3
        while time.perf_counter() < end:
            pass

    def with_item():
        y = x
        for _ in range(8):
            y = y @ x
        y.sum().item()  # drains the queue, then the host works with the GPU idle
        host_work()

    def without_item():
        y = x
        for _ in range(8):
            y = y @ x
        host_work()

    r = measure_step(with_item, steps=5, trials=2, warmup=2, profile_steps=6).breakdown.iloc[1:]
    assert (r.gpu_idle_sync_caused_ms > 0).all()
    assert (r.gpu_idle_sync_caused_ms <= r.gpu_idle_ms + 1e-9).all()
    # A sync's charge can spill into the next step; over the steps it is at most the host time of the
    # `.item()` calls: the time blocked plus the op's own (10-25 µs per call on an H200 under the profiler).
    assert r.gpu_idle_sync_caused_ms.sum() <= r.host_blocked_ms.sum() + 0.05 * len(r)
    free = measure_step(without_item, steps=5, trials=2, warmup=2, profile_steps=6).breakdown
    assert (free.gpu_idle_sync_caused_ms == 0).all()


def test_a_drain_after_the_last_step_does_not_take_the_last_steps_charge():
    t = Trace()
    t.step(0, 1000)
    t.launch(0, 10, 12, 500)
    t.sync(20, 505)
    t.launch(600, 610, 612, 700)       # GPU idle from 700 to the end of the step: still the sync's
    t.launch(1100, 1110, 1112, 1200)   # after the step (e.g. the strategy's drain work)
    t.sync(1120, 1205, "cudaDeviceSynchronize")
    assert charged(t) == [(500, 612, "cudaStreamSynchronize"), (700, 1000, "cudaStreamSynchronize")]


def test_the_readback_is_charged_apart_by_the_same_rule():
    # The step's only wait is its by-design readback (an event sync that drains the queue): the step's
    # charge leaves it out, its own charge is the gap after it, capped by its host time (395 µs).
    t = Trace()
    t.step(0, 900)                     # the step ends with the next launch's work
    t.launch(0, 10, 12, 500)
    t.host(READBACK_RANGE, 100, 520, cat="user_annotation")
    t.sync(110, 505, "cudaEventSynchronize")
    t.launch(800, 810, 812, 900)       # gap 500-812: 312 µs, under the cap
    s = breakdown.summary(t.ev())
    assert s["gpu_idle_sync_caused_ms"] == 0
    assert s["gpu_idle_readback_caused_ms"] == pytest.approx(0.312)
    # Capped: a longer gap is charged only the host time the readback waited (395 µs).
    t = Trace()
    t.step(0, 1700)
    t.launch(0, 10, 12, 500)
    t.host(READBACK_RANGE, 100, 520, cat="user_annotation")
    t.sync(110, 505, "cudaEventSynchronize")
    t.launch(1600, 1610, 1612, 1700)   # gap 500-1612
    assert breakdown.summary(t.ev())["gpu_idle_readback_caused_ms"] == pytest.approx(0.395)


def test_a_step_without_a_readback_has_no_readback_charge_and_the_step_charge_is_unchanged():
    t = Trace()
    t.step(0, 3000)
    t.launch(0, 10, 12, 500)
    t.sync(20, 505)
    t.launch(600, 610, 612, 1000)
    s = breakdown.summary(t.ev())
    assert s["gpu_idle_readback_caused_ms"] == 0
    assert s["gpu_idle_sync_caused_ms"] > 0
    assert s["gpu_idle_sync_caused_ms"] == pytest.approx(breakdown.per_step(t.ev()).gpu_idle_sync_caused_ms.mean())


def test_the_charge_ci_half_width_is_over_the_steps_charges_the_readbacks_included():
    t = Trace()
    for k, idle in enumerate((100, 200, 300)):  # three steps whose readback-caused gaps differ
        lo = k * 2000
        t.step(lo, lo + 1000 + idle)
        t.launch(lo, lo + 10, lo + 12, lo + 500)
        t.host(READBACK_RANGE, lo + 100, lo + 520, cat="user_annotation")
        t.sync(lo + 110, lo + 505, "cudaEventSynchronize")
        t.launch(lo + 500 + idle, lo + 510 + idle, lo + 512 + idle, lo + 1000 + idle)
    s = breakdown.summary(t.ev())  # the first step left out: 0.212 and 0.312 ms
    assert s["gpu_idle_readback_caused_ms"] == pytest.approx(0.262)
    from dspark_lab.results.rules.stats import mean_ci
    _, lo, hi = mean_ci([0.212, 0.312])
    assert s["charge_ci_half_width_ms"] == pytest.approx((hi - lo) / 2) and s["charge_ci_half_width_ms"] > 0
