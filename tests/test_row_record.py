"""One typed record from the trial to the file: RowRecord is checked when it is made and read-only
after; the run writer takes records (a dict is made one) and refuses, before writing anything, a
row that is not valid or not of its point; the sweep and the live panel hand rows on unchanged."""
from __future__ import annotations

import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dspark_lab.config import LabConfig
from dspark_lab.measure.timing import TrialTiming
from dspark_lab.parallel.spec import PointSpec, TrialRecord
from dspark_lab.results.record import schema
from dspark_lab.results.record.row_record import RowRecord
from dspark_lab.results.record.rows import build_row
from dspark_lab.results.record.store import RunWriter
from dspark_lab.run.sweep import SweepSpec, run_sweep

FP = {"gpu": "Test GPU", "driver": "1.0", "cuda": "12.0", "torch": "2.0"}
TINY = LabConfig(model="tiny", workload="tiny", device="cpu", steps=2, warmup=0, trials=2, batch_size=2, gamma=2)


def a_row(**kw):
    return build_row(**{"point_id": "p", "strategy": "device_direct", "trial": 0, "step_ms": 2.0, "ep_size": 1,
                        "batch_size": 2, "gamma": 2, **kw})


def test_a_trials_row_becomes_a_record_that_gives_the_same_row_back():
    row = TrialRecord(PointSpec(TINY), "non_blocking", TrialTiming(1, 2, 3.5, np.array([3.0, 4.0]))).row()
    rec = RowRecord.of(row)
    assert (rec.point_id, rec.strategy, rec.status, rec.error) == (row["point_id"], "non_blocking", "ok", "")
    assert rec.file_row() == row and list(rec.file_row()) == list(row)  # the same columns, in the same order


def test_a_record_is_read_only():
    rec = RowRecord.of(a_row())
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.status = "failed"
    with pytest.raises(TypeError):
        rec.columns["step_ms"] = 9.0
    mine = rec.row()
    mine["step_ms"] = 9.0  # a caller's copy: the record is unchanged
    assert rec.file_row()["step_ms"] == 2.0


@pytest.mark.parametrize("change, message", [
    ({"status": "done"}, "status must be one of ok, failed; got 'done'"),
    ({"point_id": ""}, "point_id must be a non-empty string"),
    ({"strategy": None}, "strategy must be a non-empty string"),
    ({"ep_size": "8"}, "ep_size must be an integer"),
    ({"graph": "yes"}, "graph must be true or false"),
    ({"rank": [0]}, "rank must be an integer"),
    ({"kind": "row"}, "kind is the run file's own key"),
    ({"gpu": "H200"}, "gpu is the machine's"),
])
def test_a_bad_value_is_refused_naming_the_field_and_what_it_may_be(change, message):
    row = {**a_row(), **change}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RowRecord.of(row)


def test_the_machine_is_a_frame_s_never_the_file_s():
    with pytest.raises(ValueError, match="machine holds python; allowed: gpu, driver, cuda, torch, run_id, recorded_at"):
        RowRecord.of(a_row(), {"python": "3"})
    rec = RowRecord.of(a_row(), {**FP, "run_id": "live-1"})
    assert rec.row()["gpu"] == "Test GPU" and not set(schema.FINGERPRINT_COLUMNS) & set(rec.file_row())


def test_nan_goes_where_a_number_goes_and_is_stored_as_null(tmp_path):
    rec = RowRecord.of(a_row(step_ms_p50=float("nan"), gpu_ms=float("inf")))
    with RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep={}, run_kind="single_point") as w:
        w.write_point("p", [rec])
    line = json.loads(w.path.read_text().splitlines()[1])
    assert line["step_ms_p50"] is None and line["gpu_ms"] is None and line["step_ms"] == 2.0
    with pytest.raises(ValueError, match="ctx_switches_vol must be an integer, got nan"):
        RowRecord.of({**a_row(), "ctx_switches_vol": float("nan")})  # a count is never NaN


def _writer(tmp_path):
    return RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep={}, run_kind="single_point")


def test_the_writer_refuses_a_bad_row_before_writing_anything(tmp_path):
    with _writer(tmp_path) as w:
        size = w.path.stat().st_size
        with pytest.raises(ValueError, match="batch_size must be an integer"):
            w.write_point("p", [a_row(), {**a_row(), "batch_size": 2.5}])
        with pytest.raises(ValueError, match="point_id of a row must be the point's 'q'; got 'p'"):
            w.write_point("q", [a_row()])
        with pytest.raises(ValueError, match="point_id of a timeline must be the point's 'p'; got 'q'"):
            w.write_point("p", [a_row()], [{"kind": "timeline", "point_id": "q", "strategy": "x", "segments": []}])
        with pytest.raises(ValueError, match="status must be one of ok, failed; got 'partly'"):
            w.write_point("p", [a_row()], status="partly")
        assert w.path.stat().st_size == size and w.points == {}


def test_the_writer_writes_a_record_as_it_is(tmp_path):
    rec = RowRecord.of(a_row(sync_site="x.py:1 f", rank_case="solo"))
    with _writer(tmp_path) as w:
        w.write_point("p", [rec])
    line = json.loads(w.path.read_text().splitlines()[1])
    assert {k: v for k, v in line.items() if k not in ("kind", "attempt")} == rec.file_row()


SPEC = SweepSpec(ep_sizes=(1,), batch_sizes=(2,), gammas=(2,), strategies=("device_direct",), base=TINY)


def _sweep(tmp_path, measure, failed_rows=None):
    w = RunWriter.create(tmp_path / "s.jsonl", fingerprint=FP, sweep=SPEC.to_dict(), run_kind="sweep")
    summary = run_sweep(SPEC, w, measure=measure, progress=False, point_id=lambda cfg: "g", failed_rows=failed_rows)
    w.close()
    return summary, [json.loads(line) for line in w.path.read_text().splitlines()[1:]]


def test_the_sweep_records_rows_of_another_point_as_a_failed_point_naming_it(tmp_path):
    summary, lines = _sweep(tmp_path, lambda cfg, names, on_progress=None: SimpleNamespace(rows=[a_row()], timelines=[]))
    assert summary.failed == 1 and "point_id of the measured rows must be the point's 'g'; got 'p'" in summary.failures[0][1]
    assert [(r["kind"], r["point_id"], r["status"]) for r in lines] == [("row", "g", "failed"), ("point", "g", "failed")]


def test_the_sweep_writes_a_measured_point_s_rows_unchanged(tmp_path):
    rows = [a_row(point_id="g", trial=t, step_ms=1.0 + t) for t in range(2)]
    summary, lines = _sweep(tmp_path, lambda cfg, names, on_progress=None: SimpleNamespace(rows=rows, timelines=[]))
    written = [{k: v for k, v in r.items() if k not in ("kind", "attempt")} for r in lines if r["kind"] == "row"]
    assert summary.measured == 1 and written == rows


def test_a_failed_points_rows_of_another_point_are_not_relabelled_but_built_for_it(tmp_path):
    def boom(cfg, names, on_progress=None):
        raise RuntimeError("OOM")

    other = lambda cfg, names, e: [dict(a_row(), status="failed", error="x")]  # noqa: E731 - point 'p', not 'g'
    _, lines = _sweep(tmp_path, boom, failed_rows=other)
    rows = [r for r in lines if r["kind"] == "row"]
    assert [(r["point_id"], r["status"], r["error"]) for r in rows] == [("g", "failed", "RuntimeError: OOM")]


def test_the_live_frame_is_built_from_records_with_the_machine():
    from dspark_lab.run.live import LiveBackend

    backend = LiveBackend(base=TINY, measure=lambda *a, **k: None, fingerprint={**FP, "python": "3"}, warm=False)
    frame = backend.frame([a_row(), a_row(trial=1)])
    assert list(frame["gpu"]) == ["Test GPU"] * 2 and set(frame["run_id"]) == {backend.run_id}
    assert "python" not in frame.columns and not math.isnan(frame["step_ms"].iloc[0])
    with pytest.raises(ValueError, match="status must be one of ok, failed"):
        backend.frame([{**a_row(), "status": None}])
