"""inspect measures through the one orchestrator: a StepPlan on a CallableExecutor in PointRun, its
observers told each trial, the profiled pass and the result; the record it gives on CPU is the one
inspect gave before it went through PointRun (recorded below from a small callable)."""
from __future__ import annotations

import math

import pytest
import torch

from dspark_lab.measure.step import StepPlan, StepResult, measure_step
from dspark_lab.parallel.orchestrator import PointExecutor, PointObserver, PointRun
from dspark_lab.parallel.spec import PointPlan, PointSpec
from dspark_lab.config import LabConfig
from dspark_lab.run import inspect as inspect_run
from dspark_lab.run.callable_executor import CallableExecutor

X = torch.ones(64)


def small() -> torch.Tensor:
    return (X * 2).sum()


class Told(PointObserver):
    """Every call a point run makes, in order."""

    def __init__(self):
        self.calls: list = []

    def on_built(self, seconds):
        self.calls.append(("built",))

    def on_trial(self, strategy, timing):
        self.calls.append(("trial", strategy, timing.step_ms))

    def on_round(self, rounds, timings):
        self.calls.append(("round", rounds))

    def on_profiled(self):
        self.calls.append(("profiled",))

    def on_done(self, result):
        self.calls.append(("done", result))


@pytest.fixture
def runs(monkeypatch):
    """Each PointRun inspect makes: (plan, executor)."""
    made = []

    class Seen(PointRun):
        def __init__(self, plan, executor, observers=()):
            made.append((plan, executor))
            super().__init__(plan, executor, observers)
    monkeypatch.setattr(inspect_run, "PointRun", Seen)
    return made


def test_inspect_step_runs_one_step_plan_on_a_callable_executor_and_tells_its_observers(runs):
    told = Told()
    rec = inspect_run.inspect_step(small, label="small", steps=3, trials=3, warmup=1, observers=[told])
    (plan, executor), = runs
    assert isinstance(executor, CallableExecutor) and isinstance(executor, PointExecutor)
    assert executor.fns == {"small": small}
    assert (plan.names, plan.steps, plan.trials, plan.warmup, plan.with_stack) == (("small",), 3, 3, 1, True)
    kinds = [c[0] for c in told.calls]
    assert kinds == ["built"] + ["trial", "round"] * 3 + ["profiled", "done"]
    result = told.calls[-1][1]
    assert isinstance(result, StepResult) and list(result.reports) == ["small"]
    # The record is made from the trials the observer was told, and from the report it was handed.
    assert rec["trials"] == [c[2] for c in told.calls if c[0] == "trial"]
    assert rec["options"]["profiled_steps"] == result.reports["small"].counts["steps_in_trace"]


def test_inspect_pair_measures_each_step_then_both_interleaved_through_point_runs(runs):
    a, b = inspect_run.inspect_pair(small, lambda: (X + 1).sum(), targets=("a", "b"), labels=("A", "B"),
                                    steps=3, trials=4, warmup=1)
    assert [p.names for p, _ in runs] == [("A",), ("B",), ("before", "after")]
    assert [p.trials for p, _ in runs] == [1, 1, 4] and runs[2][0].profile_steps == 0
    assert all(isinstance(e, CallableExecutor) for _, e in runs)
    assert (a["pair"]["role"], b["pair"]["role"]) == ("before", "after") and a["pair"]["id"] == b["pair"]["id"]
    assert len(a["trials"]) == len(b["trials"]) == a["options"]["trials"] == 4
    assert a["options"]["profiled_steps"] == b["options"]["profiled_steps"] == inspect_run.PROFILE_STEPS


# What inspect recorded on CPU for `small` before it went through PointRun (measure_step and the
# guard called directly): the record's keys, the values that do not depend on timing, and which
# counts and parts are n/a (NaN) without CUDA.
RECORD_KEYS = {"cost_scope", "counts", "device", "fingerprint", "guard", "kind", "label", "options", "pair", "parts",
               "recorded_at", "schema", "sites", "step_ms", "step_ms_hi", "step_ms_lo", "target", "timeline",
               "trials", "waits"}
NAN_COUNTS = {"blocking_copies_per_step", "copy_waits_per_step", "d2h_pageable_per_step", "d2h_per_step",
              "debug_syncs_per_step", "device_syncs_per_step", "event_syncs_per_step", "h2d_pageable_per_step",
              "h2d_pinned_per_step", "readback_syncs_per_step", "stream_syncs_per_step", "sync_memcpy_per_step",
              "syncs_per_step"}
OTHER_COUNTS = {"allocs_per_step": 0.0, "steps_in_trace": 10, "sync_count_mismatch": None,
                "sync_note": "not measurable without CUDA"}
NAN_PARTS = {"gpu_busy_ms", "gpu_idle_after_sync_ms", "gpu_idle_host_bound_ms", "gpu_idle_ms",
             "gpu_idle_other_cause_ms", "gpu_idle_sync_caused_ms", "host_blocked_ms", "launch_lead_median_ms",
             "launch_lead_min_ms", "run_ahead_fraction",
             "gpu_idle_readback_caused_ms", "charge_ci_half_width_ms"}  # no GPU idle on CPU: no charge, no CI
OTHER_PARTS = {"host_copy_ms", "host_launch_ms", "host_other_ms", "host_prep_ms", "host_readback_ms",
               "launches_per_step", "profiled_step_ms"}


def _nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _as_before(rec: dict, trials: int) -> None:
    assert set(rec) == RECORD_KEYS
    assert (rec["kind"], rec["schema"], rec["device"], rec["cost_scope"]) == ("dspark_inspect", 1, "cpu", "function")
    assert rec["options"] == {"steps": 4, "trials": trials, "warmup": 1, "profiled_steps": 10}
    assert {k for k, v in rec["counts"].items() if _nan(v)} == NAN_COUNTS
    assert {k: v for k, v in rec["counts"].items() if not _nan(v)} == OTHER_COUNTS
    assert {k for k, v in rec["parts"].items() if _nan(v)} == NAN_PARTS
    assert {k for k, v in rec["parts"].items() if not _nan(v)} == OTHER_PARTS
    assert rec["waits"] == {"charges": "{}", "note": ""} and rec["sites"] == []
    assert rec["guard"]["checked"] == [] and rec["guard"]["violations"] == [] and "no CUDA device" in rec["guard"]["note"]
    assert len(rec["trials"]) == trials and rec["step_ms_lo"] <= rec["step_ms"] <= rec["step_ms_hi"]
    assert {s[0] for s in rec["timeline"]} == {"host", "gpu"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA record")
def test_on_cpu_inspects_record_is_the_one_it_gave_before():
    rec = inspect_run.inspect_step(small, steps=4, trials=3, warmup=1)
    _as_before(rec, 3)
    assert rec["pair"] is None and rec["label"] == "small"
    a, b = inspect_run.inspect_pair(small, lambda: (X + 1).sum(), targets=("a", "b"), labels=("A", "B"),
                                    steps=4, trials=3, warmup=1)
    for r in (a, b):
        _as_before(r, 3)
        assert set(r["pair"]) == {"id", "role"}


def test_measure_step_composes_the_same_two_phases():
    told = Told()
    plan = StepPlan(("small",), steps=3, trials=2, warmup=1, profile_steps=4)
    run = PointRun(plan, CallableExecutor({"small": small}), [told]).run()
    direct = measure_step(small, steps=3, trials=2, warmup=1, profile_steps=4)
    via_run = run.reports["small"]
    assert set(direct.counts) == set(via_run.counts) and direct.device == via_run.device
    assert len(direct.timing) == len(via_run.timing) == 2
    assert direct.counts["steps_in_trace"] == via_run.counts["steps_in_trace"] == 4
    assert list(direct.breakdown.columns) == list(via_run.breakdown.columns)


def test_a_plan_that_profiles_nothing_gives_the_trials_alone():
    run = PointRun(StepPlan(("a", "b"), steps=2, trials=3, warmup=0, profile_steps=0),
                   CallableExecutor({"a": small, "b": small})).run()
    assert run.reports == {} and [len(run.timings[n]) for n in ("a", "b")] == [3, 3]


@pytest.mark.parametrize("kwargs, words", [
    (dict(names=()), "names must be distinct non-empty strings"),
    (dict(names=("a", "a")), "names must be distinct non-empty strings"),
    (dict(steps=0), "steps must be a whole number >= 1"),
    (dict(trials=1.5), "trials must be a whole number >= 1"),
    (dict(warmup=-1), "warmup must be a whole number >= 0"),
    (dict(profile_steps=True), "profile_steps must be a whole number >= 0"),
])
def test_a_bad_step_plan_names_the_field(kwargs, words):
    with pytest.raises(ValueError, match=words):
        StepPlan(**kwargs)


def test_the_callable_executor_refuses_what_it_cannot_measure():
    with pytest.raises(ValueError, match="fns must map each name to a callable step; 'a' is a int"):
        CallableExecutor({"a": 3})
    ex = CallableExecutor({"a": small})
    with pytest.raises(ValueError, match="plan must be a StepPlan"):
        ex.build(PointPlan(PointSpec(LabConfig(device="cpu")), ("device_direct",)))
    with pytest.raises(ValueError, match=r"one callable per name, in order \['b'\]"):
        ex.build(StepPlan(("b",)))
    with pytest.raises(ValueError, match="look_first needs a PointPlan"):
        PointRun(StepPlan(("a",)), ex).run(look_first=True)
    with pytest.raises(ValueError, match="plan must be a PointPlan or a StepPlan; got dict"):
        PointRun({"names": ("a",)}, ex)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_inspect_through_point_run_sees_the_one_sync_and_the_guard_names_it(runs):
    y = torch.ones(64, device="cuda")

    def one_sync():
        return (y * 2).sum().item()

    told = Told()
    rec = inspect_run.inspect_step(one_sync, steps=5, trials=2, warmup=1, observers=[told])
    assert isinstance(runs[0][1], CallableExecutor)
    assert [c[0] for c in told.calls].count("profiled") == 1
    assert rec["device"] == "cuda" and rec["counts"]["syncs_per_step"] == pytest.approx(1.0)
    assert [s["per_step"] for s in rec["sites"]] == [pytest.approx(1.0)] and rec["sites"][0]["exact"]
    assert "one_sync" in rec["sites"][0]["site"]
    assert len(rec["guard"]["violations"]) == 1 and "one_sync" in rec["guard"]["violations"][0]
