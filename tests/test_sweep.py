"""The sweep: grid expansion, failed points, interruption and resume."""
from __future__ import annotations

import gzip
import json
import warnings
from types import SimpleNamespace

import pytest

from dspark_lab.results.record import schema
from dspark_lab import strategies
from dspark_lab.config import LabConfig
from dspark_lab.results.loading import load as run_load
from dspark_lab.results.record.store import DataWarning, RunWriter
from dspark_lab.run.sweep import (
    DEFAULT_SWEEP,
    PRESETS,
    ResumeError,
    SweepSpec,
    SweepSpecError,
    check_resume,
    progress_label,
    run_kind,
    run_sweep,
)

FP = {"gpu": "Test GPU", "driver": "1.0", "cuda": "12.0", "torch": "2.0"}
TINY = LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=2, device="cpu")
SPEC = SweepSpec(ep_sizes=(1, 8), batch_sizes=(1, 4), gammas=(2,), strategies=("device_direct", "persistent_fill"), base=TINY)


def point_id(cfg: LabConfig) -> str:
    return f"ep{cfg.ep_size}-bs{cfg.batch_size}-g{cfg.gamma}"


class FakeMeasure:
    """Stands in for run.point.measure_point: tidy rows, interleaved trials, optional failures."""

    def __init__(self, fail_on=(), interrupt_on=(), error=RuntimeError("boom")):
        self.calls: list[tuple[str, tuple]] = []
        self.fail_on, self.interrupt_on, self.error = set(fail_on), set(interrupt_on), error
        self.progress: list[tuple[str, float]] = []

    def __call__(self, cfg, strategies=None, *, on_progress=None):
        pid = point_id(cfg)
        self.calls.append((pid, tuple(strategies)))
        if pid in self.interrupt_on:
            raise KeyboardInterrupt
        if pid in self.fail_on:
            raise self.error
        rows = []
        for t in range(cfg.trials):
            for s in strategies:  # A B A B ...
                if on_progress:
                    on_progress(f"trial {t} {s}", len(rows) / (cfg.trials * len(strategies)))
                    self.progress.append((pid, len(rows)))
                r = {c: None for c in schema.ROW_COLUMNS}
                r.update(point_id=pid, ep_size=cfg.ep_size, batch_size=cfg.batch_size, gamma=cfg.gamma,
                         strategy=s, status="ok", error="", trial=t, steps=cfg.steps, step_ms=1.0 + t)
                rows.append(r)
        timelines = [{"kind": "timeline", "point_id": pid, "strategy": s, "segments": [["host", "prep", 0, 1, "x"]]}
                     for s in strategies]
        return SimpleNamespace(rows=rows, timelines=timelines, traces={s: {"traceEvents": []} for s in strategies})


def failed_rows(cfg, strategies, error):
    rows = []
    for s in strategies:
        r = {c: None for c in schema.ROW_COLUMNS}
        r.update(point_id=point_id(cfg), strategy=s, ep_size=cfg.ep_size, batch_size=cfg.batch_size,
                 gamma=cfg.gamma, status="failed", error=f"{type(error).__name__}: {error}")
        rows.append(r)
    return rows


def sweep(spec, writer, measure, **kw):
    return run_sweep(spec, writer, measure=measure, progress=False, point_id=point_id, failed_rows=failed_rows, **kw)


def writer(tmp_path, spec=SPEC) -> RunWriter:
    return RunWriter.create(tmp_path / "run.jsonl", fingerprint=FP, sweep=spec.to_dict(), run_kind=run_kind(spec))


def load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        loaded = run_load.load(path)
        return loaded.rows, loaded.timelines, loaded.headers


def assert_each_row_once(rows, spec=SPEC):
    counts = rows.groupby(["point_id", "strategy", "trial"]).size()
    assert counts.eq(1).all(), counts[counts != 1]
    assert len(rows) == spec.n_rows


# ---------------------------------------------------------------------------------------------
# The spec
# ---------------------------------------------------------------------------------------------
def test_default_sweep_grid():
    assert DEFAULT_SWEEP.ep_sizes == (1, 8)
    assert DEFAULT_SWEEP.batch_sizes == (1, 8, 32, 128)
    assert DEFAULT_SWEEP.gammas == (2, 4, 8)
    assert DEFAULT_SWEEP.strategies == strategies.BUILTIN
    points = DEFAULT_SWEEP.points()
    assert len(points) == len(DEFAULT_SWEEP) == 24
    assert {(p.ep_size, p.batch_size, p.gamma) for p in points} == {
        (e, b, g) for e in (1, 8) for b in (1, 8, 32, 128) for g in (2, 4, 8)}
    assert set(PRESETS) == {"default", "quick"}


def test_spec_round_trips_through_the_header():
    d = SPEC.to_dict()
    assert d["ep_size"] == [1, 8] and d["strategy"] == ["device_direct", "persistent_fill"]
    assert "ep_size" not in d["base"] and d["base"]["model"] == "tiny"
    assert SweepSpec.from_dict(d) == SPEC


def test_spec_with_changes_grid_and_base():
    s = DEFAULT_SWEEP.with_(ep_sizes=(1,), steps=7, model="tiny")
    assert s.ep_sizes == (1,) and s.base.steps == 7 and s.base.model == "tiny" and s.gammas == (2, 4, 8)


@pytest.mark.parametrize("changes, field, text", [
    ({"ep_sizes": (3,)}, "ep_size", "ep_size must be a positive divisor"),
    ({"batch_sizes": (1, 999)}, "batch_size", "at most 256"),
    ({"gammas": (0,)}, "gamma", "gamma must be a positive integer"),
    ({"strategies": ("nope",)}, "strategy", "device_direct"),
    ({"gammas": ()}, "gamma", "at least one value"),
    ({"model": "huge"}, "model", "one of small, tiny, medium"),
    ({"steps": 0}, "steps", "steps must be an integer between 1 and 100000"),
])
def test_invalid_spec_names_the_field(changes, field, text):
    with pytest.raises(SweepSpecError, match=text) as e:
        DEFAULT_SWEEP.with_(**changes)
    assert e.value.field == field


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------
def test_all_strategies_of_a_point_in_one_call(tmp_path):
    m = FakeMeasure()
    with writer(tmp_path) as w:
        summary = sweep(SPEC, w, m)
    assert summary.measured == 4 and summary.failed == 0 and summary.skipped == 0
    assert [c[1] for c in m.calls] == [SPEC.strategies] * 4
    assert len({c[0] for c in m.calls}) == 4
    rows, timelines, _ = load(w.path)
    assert_each_row_once(rows)
    assert len(timelines) == 4 * 2
    assert m.progress  # on_progress was passed through


def test_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    m = FakeMeasure(fail_on={"ep1-bs4-g2"}, error=ValueError("bad point"))
    with writer(tmp_path) as w:
        summary = sweep(SPEC, w, m)
    assert (summary.measured, summary.failed) == (3, 1)
    assert summary.failures == [("ep=1 bs=4 gamma=2", "ValueError: bad point")]
    assert len(m.calls) == 4  # the points after the failed one were measured
    rows, _, _ = load(w.path)
    failed = rows[rows.status == "failed"]
    assert set(failed.point_id) == {"ep1-bs4-g2"} and set(failed.strategy) == set(SPEC.strategies)
    assert failed["error"].str.contains("bad point").all()
    assert rows[rows.status == "ok"].groupby("point_id").size().to_dict() == {
        "ep1-bs1-g2": 4, "ep8-bs1-g2": 4, "ep8-bs4-g2": 4}


def test_out_of_memory_is_a_failed_point(tmp_path):
    torch = pytest.importorskip("torch")
    m = FakeMeasure(fail_on={"ep1-bs1-g2"}, error=torch.cuda.OutOfMemoryError("CUDA out of memory"))
    with writer(tmp_path) as w:
        summary = sweep(SPEC, w, m)
    assert summary.failed == 1 and "OutOfMemoryError" in summary.failures[0][1]


def test_failed_rows_fallback_when_the_runner_helper_fails(tmp_path):
    def broken_failed_rows(cfg, strategies, error):
        raise RuntimeError("helper broke too")

    with writer(tmp_path) as w:
        run_sweep(SPEC, w, measure=FakeMeasure(fail_on={"ep8-bs4-g2"}), progress=False, point_id=point_id,
                  failed_rows=broken_failed_rows)
    rows, _, _ = load(w.path)
    f = rows[rows.status == "failed"]
    assert len(f) == 2 and set(f.point_id) == {"ep8-bs4-g2"} and f["error"].str.contains("boom").all()


def test_interrupt_stops_cleanly_and_resume_neither_loses_nor_doubles(tmp_path):
    m = FakeMeasure(interrupt_on={"ep8-bs1-g2"})
    w = writer(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        sweep(SPEC, w, m)
    w.close()
    rows, _, _ = load(w.path)
    assert set(rows.point_id) == {"ep1-bs1-g2", "ep1-bs4-g2"}  # finished points are on disk
    before = rows.set_index(["point_id", "strategy", "trial"])["step_ms"]

    m2 = FakeMeasure()
    with RunWriter.open(w.path) as w2:
        check_resume(w2, SPEC, FP)
        summary = sweep(SPEC, w2, m2)
    assert summary.skipped == 2 and summary.measured == 2
    assert [c[0] for c in m2.calls] == ["ep8-bs1-g2", "ep8-bs4-g2"]
    rows, _, headers = load(w.path)
    assert len(headers) == 1
    assert_each_row_once(rows)
    after = rows.set_index(["point_id", "strategy", "trial"])["step_ms"]
    assert after.loc[before.index].equals(before)

    with RunWriter.open(w.path) as w3:  # a third run has nothing to do
        assert sweep(SPEC, w3, FakeMeasure()).skipped == 4


def test_resume_skips_failed_points_unless_retry_failed(tmp_path):
    with writer(tmp_path) as w:
        sweep(SPEC, w, FakeMeasure(fail_on={"ep8-bs1-g2"}))
    m = FakeMeasure()
    with RunWriter.open(w.path) as w2:
        assert sweep(SPEC, w2, m).skipped == 4 and m.calls == []
    with RunWriter.open(w.path) as w3:
        s = sweep(SPEC, w3, m, retry_failed=True)
    assert (s.skipped, s.measured) == (3, 1) and m.calls[0][0] == "ep8-bs1-g2"
    rows, _, _ = load(w.path)
    assert rows["status"].eq("ok").all()
    assert_each_row_once(rows)


def test_check_resume_refuses_other_machine_or_sweep(tmp_path):
    with writer(tmp_path) as w:
        check_resume(w, SPEC, dict(FP, python="other"))  # same machine: fine
        with pytest.raises(ResumeError, match="gpu=Test GPU.*gpu=Other GPU"):
            check_resume(w, SPEC, dict(FP, gpu="Other GPU"))
        with pytest.raises(ResumeError, match="another sweep"):
            check_resume(w, SPEC.with_(gammas=(2, 4)), FP)


def test_traces_saved_only_when_asked(tmp_path):
    with writer(tmp_path) as w:
        sweep(SPEC, w, FakeMeasure())
    assert not w.path.with_suffix(".traces").exists()
    w2 = RunWriter.create(tmp_path / "b.jsonl", fingerprint=FP, sweep=SPEC.to_dict(), run_kind=run_kind(SPEC))
    sweep(SPEC, w2, FakeMeasure(), save_traces=True)
    w2.close()
    saved = sorted(w2.path.with_suffix(".traces").glob("*.json.gz"))
    assert len(saved) == 4 * 2
    assert json.loads(gzip.open(saved[0], "rt").read()) == {"traceEvents": []}
    assert "traceEvents" not in w2.path.read_text()  # traces stay out of the run file


def test_progress_bar_runs(tmp_path, capsys):
    with writer(tmp_path) as w:
        run_sweep(SPEC, w, measure=FakeMeasure(), progress=True, point_id=point_id, failed_rows=failed_rows)
    err = capsys.readouterr().err
    # the bar reaches the whole grid, point by point, and names the last point it measured
    assert "100%" in err and f"{len(SPEC)}.0/{len(SPEC)} points" in err and "ep=8 bs=4 gamma=2" in err


def test_default_measure_and_point_id_come_from_the_runner(tmp_path, monkeypatch):
    runner = pytest.importorskip("dspark_lab.run.point")
    m = FakeMeasure()
    monkeypatch.setattr(runner, "measure_point", m)
    spec = SPEC.with_(ep_sizes=(1,), batch_sizes=(1,))
    with writer(tmp_path, spec) as w:
        run_sweep(spec, w, progress=False)
    assert w.is_complete(runner.point_id(spec.points()[0]))
    rows, _, _ = load(w.path)
    assert set(rows.point_id) == {runner.point_id(spec.points()[0])}  # the sweep's id wins


def test_progress_label():
    assert progress_label(TINY.with_(ep_size=8, batch_size=32, gamma=4)) == "ep=8 bs=32 gamma=4"


def test_plain_progress_without_tqdm(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # as on a bare GPU box
    with writer(tmp_path) as w:
        run_sweep(SPEC, w, measure=FakeMeasure(), progress=True, point_id=point_id, failed_rows=failed_rows)
    err = capsys.readouterr().err
    assert "sweep: 4/4 points done" in err and "sweep: 1/4 points done" in err
