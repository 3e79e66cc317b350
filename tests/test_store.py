"""The run store: append-only JSON lines, crash-safe points, damaged files load with warnings."""
from __future__ import annotations

import json
import math
import os
import signal
import warnings

import pandas as pd
import pytest

from dspark_lab.results.record import paths
from dspark_lab.results.record import schema
from dspark_lab.results.record import store
from dspark_lab.results.loading import load as run_load
from dspark_lab.results.record.store import DataWarning, RunWriter, SchemaVersionError

FP = {"gpu": "Test GPU", "driver": "1.0", "cuda": "12.0", "torch": "2.0", "python": "3.11", "platform": "x"}
SWEEP = {"ep_size": [1], "batch_size": [1], "gamma": [2], "strategy": ["a"], "base": {}}


def read_back(paths):
    """(rows, timelines, headers) of run files as the loader gives them (results.loading.load.load)."""
    loaded = run_load.load(paths)
    return loaded.rows, loaded.timelines, loaded.headers


def make_rows(point_id: str, strategies=("device_direct", "persistent_fill"), trials=2, status="ok", step_ms=1.0):
    rows = []
    for s in strategies:
        for t in range(trials):
            r = {c: None for c in schema.ROW_COLUMNS}
            r.update(point_id=point_id, strategy=s, trial=t, ep_size=1, batch_size=8, gamma=4,
                     status=status, error="" if status == "ok" else "boom", step_ms=step_ms + t,
                     syncs_per_step=1.0)
            rows.append(r)
    return rows


def make_timelines(point_id: str, strategies=("device_direct", "persistent_fill")):
    return [{"kind": "timeline", "point_id": point_id, "strategy": s,
             "segments": [["host", "prep", 0.0, 1.0, "prep"], ["gpu", "busy", 0.5, 2.0, "target"]]}
            for s in strategies]


def new_run(tmp_path, points=("p1", "p2"), **kw) -> RunWriter:
    w = RunWriter.create(tmp_path / "runs", fingerprint=FP, sweep=SWEEP, run_kind="single_point", **kw)
    for p in points:
        w.write_point(p, make_rows(p), make_timelines(p))
    return w


def load_quiet(paths):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)  # a clean file gives no warning
        return read_back(paths)


def keys(rows: pd.DataFrame) -> list[tuple]:
    return sorted(zip(rows["point_id"], rows["strategy"], rows["trial"]))


# ---------------------------------------------------------------------------------------------
def test_roundtrip_rows_timelines_headers(tmp_path):
    w = new_run(tmp_path)
    w.close()
    assert w.path.parent == tmp_path / "runs" and w.path.name == f"{w.run_id}.jsonl"
    rows, timelines, headers = load_quiet(tmp_path)
    assert len(rows) == 8 and rows["status"].eq("ok").all()
    assert list(rows.columns[: len(schema.ROW_COLUMNS)]) == list(schema.ROW_COLUMNS)
    for c in schema.FINGERPRINT_COLUMNS:
        assert c in rows.columns
    assert set(rows["gpu"]) == {"Test GPU"} and set(rows["run_id"]) == {w.run_id}
    assert rows["recorded_at"].notna().all()
    assert list(timelines.columns) == list(run_load.TIMELINE_COLUMNS)
    assert len(timelines) == 2 * 2 * 2  # points x strategies x segments
    assert len(headers) == 1 and headers[0]["fingerprint"] == FP and headers[0]["sweep"] == SWEEP
    assert headers[0]["schema_version"] == schema.SCHEMA_VERSION and headers[0]["path"] == str(w.path)


def test_header_is_first_record_and_points_commit(tmp_path):
    w = new_run(tmp_path, points=("p1",))
    w.close()
    lines = [json.loads(x) for x in w.path.read_text().splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["run_id"] == w.run_id
    assert [r["kind"] for r in lines[1:]] == ["row"] * 4 + ["timeline"] * 2 + ["point"]
    assert lines[-1]["point_id"] == "p1" and lines[-1]["status"] == "ok" and lines[-1]["n_rows"] == 4


def test_empty_dir_gives_empty_frames_with_columns(tmp_path):
    rows, timelines, headers = read_back(tmp_path)
    assert rows.empty and list(rows.columns) == list(schema.ROW_COLUMNS) + list(schema.FINGERPRINT_COLUMNS)
    assert timelines.empty and headers == []


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        read_back(tmp_path / "nope")


def test_nan_and_numpy_values_round_trip(tmp_path):
    import numpy as np

    w = RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep=SWEEP, run_kind="single_point")
    rows = make_rows("p")
    rows[0]["step_ms"] = float("nan")
    rows[1]["step_ms"] = np.float32(2.5)
    rows[2]["ep_size"] = np.int64(8)
    w.write_point("p", rows)
    w.close()
    json.loads(w.path.read_text().splitlines()[1])  # strict JSON
    df, _, _ = load_quiet(w.path)
    assert math.isnan(df["step_ms"].iloc[0]) and df["step_ms"].iloc[1] == 2.5 and df["ep_size"].iloc[2] == 8


def test_create_never_overwrites(tmp_path):
    w = new_run(tmp_path)
    w.close()
    with pytest.raises(FileExistsError, match="resume"):
        RunWriter.create(w.path, fingerprint=FP, sweep=SWEEP, run_kind="single_point")


def test_default_data_dir_is_package_relative_and_env_overridable(monkeypatch, tmp_path):
    monkeypatch.delenv("DSPARK_DATA", raising=False)
    import dspark_lab

    assert paths.default_data_dir() == __import__("pathlib").Path(dspark_lab.__file__).resolve().parent.parent / "data"
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path))
    assert paths.default_data_dir() == tmp_path
    assert paths.runs_dir() == tmp_path / "runs"


# ---------------------------------------------------------------------------------------------
# Damaged files
# ---------------------------------------------------------------------------------------------
def test_truncated_last_line_warns_with_file_and_line_and_keeps_good_records(tmp_path):
    w = new_run(tmp_path)
    w.close()
    data = w.path.read_bytes()
    n_lines = data.count(b"\n")
    w.path.write_bytes(data[:-25])  # cut inside the last record (p2's commit)
    with pytest.warns(DataWarning) as rec:
        rows, timelines, headers = read_back(w.path)
    msgs = " | ".join(str(r.message) for r in rec)
    assert f"{w.path.name}:{n_lines}: truncated record" in msgs
    # p2 never committed: its rows are not counted (and the warning says so); p1 is whole.
    assert "point p2: 4 row(s) without a commit record" in msgs
    assert keys(rows) == sorted(("p1", s, t) for s in ("device_direct", "persistent_fill") for t in (0, 1))
    assert len(timelines) == 4 and len(headers) == 1


def test_corrupted_middle_line_warns_and_keeps_the_rest(tmp_path):
    w = new_run(tmp_path)
    w.close()
    lines = w.path.read_bytes().split(b"\n")
    lines[2] = b'{"kind":"row","point_id":"p1",\xff\xfe garbage'
    w.path.write_bytes(b"\n".join(lines))
    with pytest.warns(DataWarning) as rec:
        rows, _, _ = read_back(w.path)
    msgs = [str(r.message) for r in rec]
    assert any(f"{w.path}:3: corrupted record" in m for m in msgs), msgs
    assert len(rows) == 7  # one row lost, every other kept


def test_unknown_kind_and_second_header_warn(tmp_path):
    w = new_run(tmp_path, points=("p1",))
    w.close()
    with open(w.path, "a") as f:
        f.write(json.dumps({"kind": "mystery"}) + "\n")
        f.write(w.path.read_text().splitlines()[0] + "\n")
    with pytest.warns(DataWarning) as rec:
        rows, _, headers = read_back(w.path)
    msgs = " | ".join(str(r.message) for r in rec)
    assert "unknown kind 'mystery'" in msgs and ":9:" in msgs and "second header" in msgs and ":10:" in msgs
    assert len(rows) == 4 and len(headers) == 1


def test_corrupted_header_keeps_rows_with_unknown_fingerprint(tmp_path):
    w = new_run(tmp_path, points=("p1",))
    w.close()
    lines = w.path.read_text().splitlines()
    lines[0] = lines[0][:40]
    w.path.write_text("\n".join(lines) + "\n")
    with pytest.warns(DataWarning, match=rf"{w.path.name}:1:"):
        rows, _, headers = read_back(w.path)
    assert len(rows) == 4 and set(rows["gpu"]) == {"unknown"} and headers == []
    assert set(rows["run_id"]) == {w.path.stem}


def test_unknown_schema_version_skips_that_file_and_refuses_to_resume_it(tmp_path):
    w = new_run(tmp_path, points=("p1",))
    w.close()
    lines = w.path.read_text().splitlines()
    header = json.loads(lines[0])
    header["schema_version"] = schema.SCHEMA_VERSION + 41
    w.path.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    good = new_run(tmp_path / "good", points=("p1",))
    good.close()
    with pytest.warns(DataWarning, match=rf"{w.path.name}:1: schema_version {schema.SCHEMA_VERSION + 41} .*file skipped"):
        rows, _, headers = read_back(tmp_path)
    assert set(rows["run_id"]) == {good.run_id} and len(rows) == 4 and len(headers) == 1
    with pytest.raises(SchemaVersionError, match=w.path.name):
        RunWriter.open(w.path)


# ---------------------------------------------------------------------------------------------
# Reopen / resume
# ---------------------------------------------------------------------------------------------
def test_reopen_appends_and_knows_completed_points(tmp_path):
    w = new_run(tmp_path)
    w.close()
    r = RunWriter.open(w.path)
    assert r.run_id == w.run_id and r.fingerprint == FP and r.sweep == SWEEP
    assert r.is_complete("p1") and r.is_complete("p2") and not r.is_complete("p3")
    r.write_point("p3", make_rows("p3"), make_timelines("p3"))
    r.close()
    rows, _, headers = load_quiet(w.path)
    assert len(rows) == 12 and len(headers) == 1
    assert rows.groupby(["point_id", "strategy", "trial"]).size().eq(1).all()


def test_resume_after_truncated_point_neither_loses_nor_doubles(tmp_path):
    """A kill inside a point's write leaves its rows without a commit; redoing the point on resume
    supersedes them, and the damaged line stays (append-only) but is only warned about."""
    w = new_run(tmp_path, points=("p1",))
    w.write_point("p2", make_rows("p2", step_ms=100.0), make_timelines("p2"))
    w.close()
    data = w.path.read_bytes()
    w.path.write_bytes(data[: data.rindex(b'{"kind":"row"') + 30])  # p2's last row cut, no commit
    with pytest.warns(DataWarning):
        r = RunWriter.open(w.path)
    assert r.is_complete("p1") and not r.is_complete("p2")
    r.write_point("p2", make_rows("p2", step_ms=200.0), make_timelines("p2"))
    r.close()
    with pytest.warns(DataWarning, match="truncated|corrupted"):
        rows, timelines, _ = read_back(w.path)
    assert rows.groupby(["point_id", "strategy", "trial"]).size().eq(1).all()
    assert len(rows) == 8
    assert set(rows.loc[rows.point_id == "p2", "step_ms"]) == {200.0, 201.0}  # the committed attempt
    assert len(timelines) == 8


def test_retried_failed_point_supersedes_its_failed_rows(tmp_path):
    w = RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep=SWEEP, run_kind="single_point")
    w.write_point("p1", make_rows("p1", trials=1, status="failed"))
    assert w.points["p1"] == "failed"
    assert w.is_complete("p1") and not w.is_complete("p1", retry_failed=True)
    w.write_point("p1", make_rows("p1"))
    w.close()
    rows, _, _ = load_quiet(w.path)
    assert len(rows) == 4 and rows["status"].eq("ok").all()
    assert RunWriter.open(w.path).points == {"p1": "ok"}


def test_rows_of_several_files_and_folders(tmp_path):
    a = new_run(tmp_path / "a", points=("p1",))
    b = new_run(tmp_path / "b", points=("p1", "p2"))
    a.close(), b.close()
    rows, _, headers = load_quiet([tmp_path / "a", b.path, tmp_path])  # duplicates collapse
    assert len(headers) == 2 and len(rows) == 12
    assert rows.groupby("run_id").size().to_dict() == {a.run_id: 4, b.run_id: 8}


def test_sigint_during_a_write_waits_until_the_point_is_on_disk(tmp_path):
    w = RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep=SWEEP, run_kind="single_point")
    with pytest.raises(KeyboardInterrupt):
        with store._sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            w._append(b'{"kind":"point","point_id":"x","status":"ok"}\n')
    w.close()
    assert RunWriter.open(w.path).points == {"x": "ok"}


def test_last_modified_run_and_machine_differences(tmp_path):
    a = new_run(tmp_path, points=())
    a.close()
    os.utime(a.path, (1, 1))
    b = RunWriter.create(tmp_path / "runs", fingerprint=FP, sweep=SWEEP, run_kind="single_point", run_id="zzz")
    b.close()
    assert store.last_modified_run(tmp_path / "runs") == b.path
    with pytest.raises(FileNotFoundError):
        store.last_modified_run(tmp_path / "empty")
    assert store.machine_differences(FP, dict(FP, python="3.12")) == []
    assert store.machine_differences(FP, dict(FP, gpu="Other", driver="2")) == ["gpu", "driver"]
