"""A point's spec (the one point id and ep-mode rule), the one result type of both executors, and
the point run's phases and observer calls in order, on CPU."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from dspark_lab.config import LabConfig
from dspark_lab.measure.timing import TrialTiming
from dspark_lab.parallel.measure import measure_single
from dspark_lab.parallel.spec import PointPlan, PointResult, PointSpec, TrialRecord
from dspark_lab.parallel.orchestrator import PointObserver, PointRun
from dspark_lab.run.point import LocalExecutor, measure_point, point_id

TINY = LabConfig(model="tiny", workload="tiny", device="cpu", steps=2, warmup=0, trials=2, batch_size=2, gamma=2)
NAMES = ("device_direct", "non_blocking")


def _sha(d: dict) -> str:
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def test_one_process_point_id_is_the_recorded_hash_of_the_config_without_its_strategy():
    cfg = TINY.with_(ep_size=4, strategy="non_blocking")
    d = cfg.to_dict()
    d.pop("strategy")
    assert PointSpec(cfg).point_id == point_id(cfg) == _sha(d)  # recorded runs resume by it
    assert PointSpec(cfg.with_(strategy="device_direct")).point_id == point_id(cfg)


def test_ranks_point_id_adds_world_size_and_dispatch():
    spec = PointSpec.on_ranks(TINY, 2, "a2a_fixed", "cpu")
    d = TINY.with_(ep_size=2).to_dict()
    d.pop("strategy")
    assert spec.point_id == _sha({**d, "world_size": 2, "dispatch": "a2a_fixed"})
    assert spec.point_id != PointSpec.on_ranks(TINY, 2, "allreduce", "cpu").point_id


@pytest.mark.parametrize("ep, world, mode", [(1, 1, "single"), (8, 1, "predicate_only"), (2, 2, "real")])
def test_the_one_ep_mode_rule(ep, world, mode):
    spec = PointSpec.on_ranks(TINY.with_(ep_size=ep), world, "allreduce", "cpu")
    assert spec.ep_mode == mode and spec.columns("non_blocking")["ep_mode"] == mode
    assert spec.dispatch == ("allreduce" if world > 1 else "")  # no ranks joined: nothing dispatched


def test_bad_spec_values_name_the_field():
    with pytest.raises(ValueError, match="world_size must be a whole number >= 1"):
        PointSpec(TINY, world_size=0)
    with pytest.raises(ValueError, match="dispatch must be one of allreduce, a2a_fixed, a2a_dynamic"):
        PointSpec(TINY, world_size=2, dispatch="ring")


def test_a_trial_record_becomes_one_row_with_the_specs_identity():
    spec = PointSpec.on_ranks(TINY, 2, "allreduce", "cpu")
    t = TrialTiming(1, 2, 3.5, np.array([3.0, 4.0]))
    row = TrialRecord(spec, "device_direct", t, where={"rank": 1, "rank_case": "x"}).row()
    assert (row["point_id"], row["ep_mode"], row["world_size"], row["dispatch"]) == (spec.point_id, "real", 2, "allreduce")
    assert (row["rank"], row["rank_case"], row["trial"], row["step_ms"], row["status"]) == (1, "x", 1, 3.5, "ok")
    assert "node" in row and row["node"] is None  # every rank column, where the rank gave none


def test_both_executors_return_one_result_type_with_the_same_point_identity():
    one = measure_point(TINY, list(NAMES), profile_steps=2)
    ranks = measure_single(TINY, "allreduce", list(NAMES), profile_steps=2)
    assert type(one) is type(ranks) is PointResult
    for res in (one, ranks):
        rows = res.point_rows()
        assert {r["point_id"] for r in rows} == {point_id(TINY)}
        assert {(r["ep_mode"], r["world_size"], r["dispatch"]) for r in rows} == {("single", 1, "")}
        assert sorted({t["strategy"] for t in res.point_timelines()}) == sorted(NAMES)


class Recorder(PointObserver):
    def __init__(self):
        self.calls: list = []

    def on_first_look(self, strategy, timing):
        self.calls.append(("first_look", strategy))

    def on_built(self, seconds):
        self.calls.append(("built",))

    def on_trial(self, strategy, timing):
        self.calls.append(("trial", strategy, timing.trial))

    def on_round(self, rounds, timings):
        self.calls.append(("round", rounds))

    def on_profiled(self):
        self.calls.append(("profiled",))

    def on_done(self, result):
        self.calls.append(("done", len(result.rows)))


class FakeExecutor:
    """Two rounds of one trial per strategy, then the profiled pass; rows from the records."""

    def build(self, plan, built=None):
        return {n: None for n in plan.names}

    def execute(self, plan, observer, steps):
        records = []
        for trial in range(2):
            for n in plan.names:
                t = TrialTiming(trial, 1, 1.0, np.array([1.0]))
                records.append(TrialRecord(plan.spec, n, t))
                observer.on_trial(n, t)
        observer.on_profiled()
        return PointResult([r.row() for r in records], [])


def test_the_run_tells_its_observers_each_phase_in_order():
    rec = Recorder()
    res = PointRun(PointPlan(PointSpec(TINY), NAMES), FakeExecutor(), [rec]).run()
    a, b = NAMES
    assert rec.calls == [("built",), ("trial", a, 0), ("trial", b, 0), ("round", 1), ("trial", a, 1),
                         ("trial", b, 1), ("round", 2), ("profiled",), ("done", 4)]
    assert len(res.rows) == 4


def test_the_real_cpu_step_profiles_after_the_first_round_when_asked():
    rec = Recorder()
    ex = LocalExecutor(profile_steps=2, profile_after_round=1, keep_traces=False)
    res = PointRun(PointPlan(PointSpec(TINY), NAMES), ex, [rec]).run()
    kinds = [c[0] for c in rec.calls]
    assert kinds == ["built", "trial", "trial", "round", "profiled", "trial", "trial", "round", "done"]
    assert rec.calls[-1] == ("done", 4) and res.analysed_in == "this process"
