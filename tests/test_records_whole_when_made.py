"""Every record the run writer takes is whole when it is made: the writer fills in nothing (a row or
a timeline without its point_id, strategy or segments is refused, naming the field, before anything
is written), and the predicted rows of the EP model (results.analyses.ep_predict, studies/ep/
real_ranks.py) are made as records with their point id, never given one afterwards."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from dspark_lab import strategies
from dspark_lab.config import LabConfig
from dspark_lab.parallel.measure import only_rank0, uniform
from dspark_lab.parallel.spec import PointResult
from dspark_lab.results.analyses import ep_predict
from dspark_lab.results.record.row_record import RowRecord
from dspark_lab.results.record.rows import build_row
from dspark_lab.results.record.store import RunWriter

FP = {"gpu": "Test GPU", "driver": "1.0", "cuda": "12.0", "torch": "2.0"}
SEGMENTS = [["host", "prep", 0.0, 1.0, "prep"]]


def a_row(**kw):
    return build_row(**{"point_id": "p", "strategy": "device_direct", "trial": 0, "step_ms": 2.0, "ep_size": 1,
                        "batch_size": 2, "gamma": 2, **kw})


def a_timeline(**kw):
    return {"kind": "timeline", "point_id": "p", "strategy": "device_direct", "segments": SEGMENTS, **kw}


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize("rows, timelines, message", [
    ([_without(a_row(), "point_id")], [], "point_id must be a non-empty string; got None"),
    ([_without(a_row(), "strategy")], [], "strategy must be a non-empty string; got None"),
    ([a_row()], [_without(a_timeline(), "point_id")], "point_id of a timeline must be the point's 'p'; got None"),
    ([a_row()], [_without(a_timeline(), "strategy")], "strategy of a timeline must be a non-empty string; got None"),
    ([a_row()], [_without(a_timeline(), "segments")], "segments of a timeline must be a list of .*; got NoneType"),
    ([a_row()], [_without(a_timeline(), "kind")], "kind of a timeline must be 'timeline'; got None"),
    ([a_row()], [[["host"]]], "a timeline must be a dict .*; got list"),
])
def test_the_writer_refuses_a_record_lacking_a_field_and_writes_nothing(tmp_path, rows, timelines, message):
    with RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep={}, run_kind="single_point") as w:
        size = w.path.stat().st_size
        with pytest.raises(ValueError, match=message):
            w.write_point("p", rows, timelines)
        assert w.path.stat().st_size == size and w.points == {}
        w.write_point("p", [a_row()], [a_timeline()])  # the whole ones are written as given
    lines = [json.loads(line) for line in w.path.read_text().splitlines()[1:]]
    assert {k: v for k, v in lines[1].items() if k != "attempt"} == a_timeline()


class Case:
    def __init__(self, strategies_, name):
        self.strategies, self.name = tuple(strategies_), name
        self.host_delay_ms = self.host_jitter_ms = (0.0,) * len(self.strategies)


def test_predicted_rows_are_whole_records_with_their_point_id():
    one = {"device_direct": ep_predict.OneRank((2.0, 2.2)), "non_blocking": ep_predict.OneRank((1.0, 1.1))}
    cases = [Case(["non_blocking"] * 4, "nb x4"), Case(["device_direct"] + ["non_blocking"] * 3, "dd r0")]
    recs = ep_predict.predicted_rows(one, cases, {"batch_size": 8, "dispatch": "allreduce", "predicate": False})
    assert all(isinstance(r, RowRecord) for r in recs)
    assert [(r.point_id, r.strategy, r.status, r.error) for r in recs] == [
        ("predicted-ep4-allreduce", "non_blocking", "ok", ""), ("predicted-ep4-allreduce", "device_direct", "ok", "")]
    for r, c in zip(recs, cases):
        cols = r.columns
        assert (cols["ep_mode"], cols["world_size"], cols["ep_size"], cols["rank_case"]) == ("predicted", 4, 4, c.name)
        assert cols["step_ms"] == cols["step_ms_max_rank"] == ep_predict.predict_case(one, c.strategies)
        assert cols["batch_size"] == 8 and cols["dispatch"] == "allreduce"
    with pytest.raises(dataclasses.FrozenInstanceError):
        recs[0].point_id = "other"


@pytest.fixture
def real_ranks():
    """studies/ep/real_ranks, imported without keeping the NCCL settings it applies to this process."""
    saved = dict(os.environ)
    try:
        from studies.ep import real_ranks as module
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return module


def _uniform_rows(dispatch: str, world: int = 2) -> list:
    """Rows of a real run's uniform cases, every strategy on every rank, no host delay."""
    rows = []
    for i, s in enumerate(strategies.BUILTIN):
        case = ",".join([s] * world)
        rows += [{"rank_case": case, "rank_strategies": case, "rank": r, "status": "ok", "host_delay_ms": 0.0,
                  "host_jitter_ms": 0.0, "host_readback_ms": 0.1 * r, "step_ms_max_rank": 1.0 + i + 0.01 * t}
                 for r in range(world) for t in range(3)]
    return rows


def test_real_ranks_predictions_are_written_as_made_one_point_per_id(tmp_path, real_ranks):
    res = {d: PointResult(_uniform_rows(d), []) for d in ("allreduce", "a2a_fixed")}
    single = {"batch_size": 8, "gamma": 4, "model": "small", "workload": "sglang_profile", "device": "cuda",
              "query_token_num": 40, "bucket_batch_size": 8, "num_tokens": 40, "target_verify_ms": 1.0}
    recs = real_ranks.predicted_records(res, single)
    path = real_ranks.write_predicted(tmp_path, FP, LabConfig(device="cpu"), recs)
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    points = [ln for ln in lines if ln["kind"] == "point"]
    want = [ep_predict.predicted_point_id(n, d) for d in res for n in real_ranks.PREDICTED_SIZES]
    assert [p["point_id"] for p in points] == want
    per_point = len(strategies.BUILTIN) + 1  # the uniform cases and one with device_direct on rank 0 only
    assert all(p["n_rows"] == per_point for p in points)
    written = [{k: v for k, v in ln.items() if k not in ("kind", "attempt")} for ln in lines if ln["kind"] == "row"]
    assert written == [r.file_row() for r in recs]  # each written as it was made
    for row in written:
        assert row["point_id"] == ep_predict.predicted_point_id(row["world_size"], row["dispatch"])
    cases = {r["rank_case"] for r in written if r["world_size"] == 4}
    assert cases == {uniform(s, 4).name for s in strategies.BUILTIN} | {only_rank0("device_direct", "non_blocking", 4).name}
