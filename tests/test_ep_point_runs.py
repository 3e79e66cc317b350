"""`dspark-lab ep` and torchrun's ranks go through the one point run (parallel.orchestrator.PointRun):
run_ep launches each point on its group through a GroupExecutor (here a fake launcher, so the
executor's logic runs without ranks), a PointWriter observer writes it; every rank's measure_ranks
is a PointRun on a RankExecutor (here the world-size-1 rank, in this process); the columns that
compare the ranks are in each trial's record before its row is built."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dspark_lab.config import LabConfig
from dspark_lab.measure.timing import TrialTiming
from dspark_lab.parallel import measure as M
from dspark_lab.parallel import run as ep_run
from dspark_lab.parallel import torchrun
from dspark_lab.parallel.orchestrator import PointObserver
from dspark_lab.parallel.ranks import RankContext
from dspark_lab.parallel.spec import PointResult, PointSpec, TrialRecord

FP = {"gpu": "Test GPU", "driver": "1.0", "cuda": "12.0", "torch": "2.0"}
TINY = LabConfig(model="tiny", workload="tiny", device="cpu", steps=2, warmup=0, trials=2, batch_size=2, gamma=2)


class FakeGroup:
    """Stands in for a WorkerGroup: `call(measure_ranks, ...)` answers, per rank, what rank 0 would
    (the point the call names, its rows' point id `point_id_of(spec)`), and records each call."""

    def __init__(self, world: int = 2, point_id_of=None, fail_on=()):
        self.world_size, self.info, self.calls = world, [{"device": "cpu", "torch": "2.0"}], []
        self.point_id_of = point_id_of or (lambda spec: spec.point_id)
        self.fail_on = set(fail_on)

    def call(self, fn, timeout_s=None, **kw):
        self.calls.append((fn, kw["dispatch"], timeout_s))
        if kw["dispatch"] in self.fail_on:
            raise RuntimeError(f"rank 1 died in {kw['dispatch']}")
        spec = PointSpec.on_ranks(kw["cfg"], self.world_size, kw["dispatch"], "cpu")
        pid = self.point_id_of(spec)
        rows = [dict(TrialRecord(spec, c.strategies[0], TrialTiming(t, 2, 1.0 + t, np.ones(2)),
                                 where={"rank": 0, "rank_case": c.name}).row(), point_id=pid)
                for c in kw["cases"] for t in range(kw["cfg"].trials)]
        tl = [{"kind": "timeline", "point_id": spec.point_id, "strategy": c.name, "rank": 0, "rank_case": c.name, "segments": []}
              for c in kw["cases"]]
        return [PointResult(rows, tl, info={"point_id": spec.point_id}), None]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_run_ep_runs_one_point_run_per_dispatch_on_the_group_and_writes_each(tmp_path):
    group, seen = FakeGroup(), []
    cases = [M.uniform("non_blocking", 2), M.only_rank0("device_direct", "non_blocking", 2)]
    res = ep_run.run_ep(TINY, 2, ["allreduce", "a2a_fixed"], cases, out=tmp_path, group=group, fingerprint=FP,
                        timeout_s=7.0, on_point=lambda d, r: seen.append((d, r.info["point_id"])))
    assert [(fn, d, t) for fn, d, t in group.calls] == [(M.measure_ranks, "allreduce", 7.0), (M.measure_ranks, "a2a_fixed", 7.0)]
    want = {d: PointSpec.on_ranks(TINY, 2, d, "cpu").point_id for d in ("allreduce", "a2a_fixed")}
    assert seen == list(want.items()) and {d: res[d].info["point_id"] for d in want} == want
    recs = _lines(res["path"])
    assert recs[0]["run_kind"] == "ep_real" and recs[0]["launcher"] == "workers"
    commits = [r for r in recs if r["kind"] == "point"]
    assert [(c["point_id"], c["status"], c["n_rows"]) for c in commits] == [(p, "ok", 4) for p in want.values()]
    assert {r["rank_case"] for r in recs if r["kind"] == "row"} == {c.name for c in cases}


def test_a_point_the_ranks_could_not_finish_leaves_no_header_only_file(tmp_path):
    with pytest.raises(RuntimeError, match="rank 1 died in allreduce"):
        ep_run.run_ep(TINY, 2, ["allreduce"], [M.uniform("non_blocking", 2)], out=tmp_path, group=FakeGroup(fail_on={"allreduce"}),
                      fingerprint=FP)
    assert list(tmp_path.glob("*.jsonl")) == []


def test_rows_of_another_point_are_refused_by_the_writer_naming_the_field(tmp_path):
    group = FakeGroup(point_id_of=lambda spec: "elsewhere")
    with pytest.raises(ValueError, match="point_id of a row must be the point's"):
        ep_run.run_ep(TINY, 2, ["allreduce"], [M.uniform("non_blocking", 2)], out=tmp_path, group=group, fingerprint=FP,
                      on_point=lambda d, r: (_ for _ in ()).throw(AssertionError("told after a refused write")))
    assert list(tmp_path.glob("*.jsonl")) == []  # nothing of the point written; the header-only file removed


class Calls(PointObserver):
    def __init__(self):
        self.calls = []

    def on_built(self, seconds):
        self.calls.append("built")

    def on_trial(self, strategy, timing):
        self.calls.append(("trial", strategy))

    def on_profiled(self):
        self.calls.append("profiled")

    def on_done(self, result):
        self.calls.append(("done", result.info["point_id"]))


def test_measure_ranks_is_each_ranks_point_run_with_its_phases_in_order():
    ctx, rec = RankContext.single("cpu"), Calls()
    cases = [M.uniform("non_blocking", 1), M.uniform("device_direct", 1)]
    res = M.measure_ranks(ctx, TINY, "allreduce", cases, profile_steps=2, observers=[rec])
    pid = PointSpec.on_ranks(TINY, 1, "allreduce", "cpu").point_id
    trials = [c for c in rec.calls if isinstance(c, tuple) and c[0] == "trial"]
    assert rec.calls[0] == "built" and rec.calls[-2:] == ["profiled", ("done", pid)]
    assert sorted(trials) == sorted([("trial", c.name) for c in cases] * TINY.trials)
    assert res.info["point_id"] == pid and len(res.rows) == len(cases) * TINY.trials


def _record(spec, case, rank, trial, step_ms, blocked, coll):
    return TrialRecord(spec, case.strategies[rank], TrialTiming(trial, 2, step_ms, np.full(2, step_ms)),
                       {"host_blocked_ms": blocked, "host_readback_ms": 0.5, "gpu_collective_ms": coll},
                       {"rank": rank, "rank_case": case.name})


def test_the_columns_that_compare_ranks_are_in_each_record_before_its_row_is_built():
    spec = PointSpec.on_ranks(TINY, 2, "allreduce", "cpu")
    base, mixed = M.uniform("non_blocking", 2), M.only_rank0("device_direct", "non_blocking", 2)
    rng = np.random.default_rng(3)
    records = [_record(spec, c, r, t, *rng.uniform(1, 9, 3)) for c in (base, mixed) for r in (0, 1) for t in (0, 1)]
    rows = M._gathered([(records, [], {base.name: [], mixed.name: []}), ([], [], {base.name: [], mixed.name: []})],
                       [base, mixed], {}).rows
    for rec, row in zip(records, rows):
        same_trial = [r.timing.step_ms for r in records if (r.where["rank_case"], r.timing.trial) ==
                      (rec.where["rank_case"], rec.timing.trial)]
        assert row["step_ms_max_rank"] == max(same_trial)
        rank = rec.where["rank"]
        mine = [r for r in records if r.where == rec.where]
        # rank 1 runs non_blocking in both cases: its baseline is `base`; rank 0's (device_direct everywhere) was not run
        if rank == 1:
            theirs = [r for r in records if r.where == {"rank": 1, "rank_case": base.name}]
            mean = lambda rs, k: float(np.mean([r.measured[k] for r in rs]))  # noqa: E731
            assert row["blocked_from_others_ms"] == pytest.approx(mean(mine, "host_blocked_ms") - mean(theirs, "host_blocked_ms"))
            assert row["collective_from_others_ms"] == pytest.approx(mean(mine, "gpu_collective_ms") - mean(theirs, "gpu_collective_ms"))
        elif rec.where["rank_case"] == mixed.name:
            assert row["blocked_from_others_ms"] is None and row["collective_from_others_ms"] is None


def _ranks_run(tmp_path, **kw):
    ctx = RankContext.single("cpu")
    return torchrun.run_ranks(ctx, TINY, ["allreduce"], [M.uniform("non_blocking", 1)], ranks=[ctx.describe()],
                              out=tmp_path, profile_steps=2, fingerprint=FP, **kw)


def test_a_torchrun_rank_writes_its_point_through_the_point_run(tmp_path):
    res = _ranks_run(tmp_path)
    commits = [r for r in _lines(res["path"]) if r["kind"] == "point"]
    assert [(c["point_id"], c["status"]) for c in commits] == [(res["allreduce"].info["point_id"], "ok")]


def test_a_torchrun_point_that_did_not_finish_is_recorded_failed(tmp_path, monkeypatch):
    def broken(self, plan, observer, steps):
        raise RuntimeError("collective timed out")

    monkeypatch.setattr(M.RankExecutor, "execute", broken)
    with pytest.raises(torchrun.RankFailed, match="the allreduce point did not finish"):
        _ranks_run(tmp_path)
    (path,) = tmp_path.glob("*.jsonl")
    assert [r["status"] for r in _lines(path) if r["kind"] in ("row", "point")] == ["failed", "failed"]


def test_an_on_point_error_after_the_write_is_not_a_point_that_did_not_finish(tmp_path):
    def on_point(d, res):
        raise KeyError("the caller's own error")

    with pytest.raises(KeyError, match="the caller's own error"):
        _ranks_run(tmp_path, on_point=on_point)
    (path,) = tmp_path.glob("*.jsonl")
    assert [r["status"] for r in _lines(path) if r["kind"] == "point"] == ["ok"]
