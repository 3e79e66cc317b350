"""The EP model fed by the uniform cases of the same dispatch's run, validated on the other cases (torch-free)."""
import glob
import json
from pathlib import Path

import numpy as np
import pytest

from dspark_lab.results.analyses import ep_predict as P

ROOT = Path(__file__).resolve().parents[1]
RECORDED = {m: sorted(glob.glob(str(ROOT / f"data/runs/h200x2-ep2-{m}-*.jsonl")))
            for m in ("allreduce", "a2a_fixed", "a2a_dynamic")}


def _row(case, strategies, rank, trial, step, readback, delay=0.0, jitter=0.0):
    return dict(rank_case=case, rank_strategies=strategies, world_size=2, rank=rank, trial=trial, status="ok",
                host_delay_ms=delay, host_jitter_ms=jitter, step_ms_max_rank=step, host_readback_ms=readback,
                dispatch="a2a_fixed")


def _synthetic():
    rows = []
    for t, (nb, dd) in enumerate([(6.0, 8.0), (6.2, 8.4), (5.9, 7.9)]):  # medians: nb 6.0, dd 8.0
        for k, rb in enumerate((0.9, 0.1)):  # rank 0 waits 0.9 ms on its readback, rank 1 0.1 ms
            rows.append(_row("non_blocking,non_blocking", "non_blocking,non_blocking", k, t, nb, rb))
            rows.append(_row("device_direct,device_direct", "device_direct,device_direct", k, t, dd, 0.0))
            rows.append(_row("device_direct,non_blocking", "device_direct,non_blocking", k, t, 7.5, 0.0))
            rows.append(_row("non_blocking,non_blocking delay=1,0", "non_blocking,non_blocking", k, t, 6.5, rb,
                             delay=1.0 if k == 0 else 0.0))
            rows.append(_row("non_blocking,non_blocking delay=0,1", "non_blocking,non_blocking", k, t, 6.5, rb,
                             delay=1.0 if k == 1 else 0.0))
    return rows


def test_a_delay_on_one_rank_makes_the_whole_case_non_uniform():
    assert P.uniform_cases(_synthetic()) == {"non_blocking,non_blocking", "device_direct,device_direct"}


def test_inputs_are_the_uniform_cases_median_trial_and_each_ranks_slack():
    one = P.one_rank_from_uniform(_synthetic())
    assert one["non_blocking"].mean_ms == pytest.approx(6.0) and one["device_direct"].mean_ms == pytest.approx(8.0)
    assert one["non_blocking"].slack_by_rank == pytest.approx((0.9, 0.1))
    assert one["non_blocking"].slack_ms == pytest.approx(0.1)  # ranks beyond the measured ones: the smallest
    assert one["non_blocking"].slack_for(5) == pytest.approx(0.1)


def test_held_out_cases_have_the_known_answer():
    got = {v["case"]: v for v in P.validate_held_out(_synthetic())}
    assert set(got) == {"device_direct,non_blocking", "non_blocking,non_blocking delay=1,0",
                        "non_blocking,non_blocking delay=0,1"}  # the uniform inputs are not validated on
    # Mixed: the slowest rank's uniform level.
    assert got["device_direct,non_blocking"]["predicted_ms"] == pytest.approx(8.0)
    assert got["device_direct,non_blocking"]["error_pct"] == pytest.approx((8.0 / 7.5 - 1) * 100)
    # A 1 ms delay is absorbed by the delayed rank's own slack first: 0.9 on rank 0, 0.1 on rank 1.
    assert got["non_blocking,non_blocking delay=1,0"]["predicted_ms"] == pytest.approx(6.1)
    assert got["non_blocking,non_blocking delay=0,1"]["predicted_ms"] == pytest.approx(6.9)
    assert "device_direct" in got["device_direct,non_blocking"]["inputs"]


def test_per_step_samples_give_the_noise_term_around_the_median_trial():
    rows = [r for r in _synthetic() if r["rank_case"] in ("non_blocking,non_blocking", "device_direct,non_blocking")]
    rng = np.random.default_rng(1)
    samples = {"non_blocking,non_blocking": {0: list(6.0 + rng.normal(0, 0.3, 400)), 1: [6.0] * 400}}
    one = P.one_rank_from_uniform(rows, samples)
    assert one["non_blocking"].mean_ms == pytest.approx(6.0)  # the level is still the median trial
    assert P.predict_step_ms([one["non_blocking"]] * 2) > P.predict_step_ms([one["non_blocking"]] * 2, noise=False)


def test_no_uniform_case_is_a_value_error():
    rows = [r for r in _synthetic() if r["rank_case"] == "device_direct,non_blocking"]
    with pytest.raises(ValueError, match="no uniform case"):
        P.one_rank_from_uniform(rows)


def _load(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("kind") == "row"]


@pytest.mark.parametrize("mode", sorted(RECORDED))
def test_recorded_h200_runs_report_the_errors_they_compute(mode):
    if not RECORDED[mode]:
        pytest.skip(f"no recorded run for {mode}")
    rows = _load(RECORDED[mode][0])
    got = P.validate_held_out(rows)
    names = {r["rank_case"] for r in rows}
    uniform = {c for c in names if "delay" not in c and len(set(c.split(","))) == 1}
    assert {v["case"] for v in got} == names - uniform and got
    for v in got:
        case_rows = [r for r in rows if r["rank_case"] == v["case"]]
        measured = np.median([r["step_ms_max_rank"] for r in case_rows if r["rank"] == 0])
        # Recomputed here from the uniform rows: max over ranks of (level + delay not absorbed by that rank's slack).
        expect = []
        for r in sorted({r["rank"]: r for r in case_rows}.values(), key=lambda r: r["rank"]):
            s = r["rank_strategies"].split(",")[r["rank"]]
            u = [x for x in rows if x["rank_case"] == f"{s},{s}"]
            level = np.median([x["step_ms_max_rank"] for x in u if x["rank"] == 0])
            slack = np.median([x["host_readback_ms"] for x in u if x["rank"] == r["rank"]])
            expect.append(level + max(0.0, r["host_delay_ms"] - slack))
        assert v["measured_ms"] == pytest.approx(measured)
        assert v["predicted_ms"] == pytest.approx(max(expect))  # recorded rows: no per-step samples, no noise
        assert v["error_pct"] == pytest.approx((v["predicted_ms"] / v["measured_ms"] - 1) * 100)
