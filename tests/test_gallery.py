"""The gallery: every case beside its fix computes the same values, the registry documents each,
device-to-host copies are counted, a recording round-trips; on CUDA, measured counts match the
documented ones and name the gallery's lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dspark_lab import gallery
from dspark_lab.gallery import cases as C
from dspark_lab.gallery import compiled_cases, counter_cases, spec_cases
from dspark_lab.gallery import field_cases as F
from dspark_lab.gallery import report
from dspark_lab.measure import syncs, trace
from dspark_lab.measure.ranges import STEP_RANGE

ROOT = Path(__file__).resolve().parents[1]


def _same(a, b) -> bool:
    if torch.is_tensor(a):
        return a.shape == b.shape and torch.allclose(a.float().cpu(), b.float().cpu(), rtol=1e-4, atol=1e-5)
    return a == b


@pytest.mark.parametrize("name", gallery.names())
@pytest.mark.parametrize("seed", [0, 1])
def test_case_and_fix_compute_the_same_values(name, seed):
    case = gallery.get(name)
    s = C.make_state("cpu", "smoke", seed=seed)
    a = case.step(s)
    b = case.fix(s)
    assert _same(a, b), f"{name}: {a} != {b}"


def test_the_gallery_covers_the_six_shapes_and_more():
    shapes = {c.shape for c in gallery.CASES.values()}
    assert len(gallery.CASES) >= 6 and len(shapes) == len(gallery.CASES)
    for needle in (".item()", "bool()", "boolean-mask", "planning", "Python list", "split sizes", "pageable"):
        assert any(needle in s for s in shapes), needle


@pytest.mark.parametrize("name", gallery.names())
def test_each_case_is_documented(name):
    c = gallery.get(name)
    assert c.pr and "#" in c.pr or "DeepEP" in c.pr or "no single PR" in c.pr or "no checked PR" in c.pr
    assert len(c.why) > 200 and "fix" in c.why  # a paragraph that says why and what fixes it
    if c.shape.startswith("counter-example") and c.name in KEEPS_OR_ADDS:  # the lesson: a wait kept, or added
        assert c.fix_expected_syncs >= c.expected_syncs
    else:
        assert c.expected_syncs >= 1 and c.fix_expected_syncs < c.expected_syncs  # the fix removes syncs
    assert c.expected_d2h >= 0 and c.fix_expected_d2h >= 0
    # one `# sync:` line per documented sync, in the gallery's own file
    sites = c.sites()
    assert len(sites) * F.LINE_RUNS.get(name, 1) == c.expected_syncs  # a line in a loop runs LINE_RUNS times
    assert all(s.startswith(tuple(f"gallery/{m.__name__.rsplit('.', 1)[1]}.py:" for m in CASE_MODULES)) for s in sites)
    assert {s.split(" ")[1] for s in sites} <= {f.__name__ for f in (c.step,) + c.helpers}
    assert c.step is not c.fix and c.step.__module__ == c.fix.__module__ in {m.__name__ for m in CASE_MODULES}


CASE_MODULES = (C, F, spec_cases, counter_cases, compiled_cases)
KEEPS_OR_ADDS = {"deferred_event_sync", "race_fix_price"}  # counter-examples whose fix keeps or adds a wait


def test_bad_names_are_refused_naming_the_allowed_values():
    with pytest.raises(ValueError, match=r"case must be one of scalar_item, .*; got 'nope'"):
        gallery.get("nope")
    with pytest.raises(ValueError, match=r"scale must be one of gpu, queued, smoke; got 'huge'"):
        C.make_state("cpu", "huge")
    with pytest.raises(ValueError, match="variant must be one of case, fix"):
        report.measure_variant(gallery.get("scalar_item"), "both", C.make_state("cpu"))


# --- device-to-host copies as their own counted kind ----------------------------------------------
def _x(name, cat, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def test_d2h_copies_are_counted_per_step_by_destination():
    ev = [_x(STEP_RANGE, "user_annotation", 0, 100), _x(STEP_RANGE, "user_annotation", 100, 100)]
    for k, (ts, dest) in enumerate([(10, "Pageable"), (20, "Pinned"), (110, "Pageable"), (250, "Pageable")], start=1):
        ev.append(_x("cudaMemcpyAsync", "cuda_runtime", ts, 2, correlation=k))
        ev.append(_x(f"Memcpy DtoH (Device -> {dest})", "gpu_memcpy", ts + 5, 1, pid=0, tid=7, correlation=k))
    ev.append(_x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 30, 1, pid=0, tid=7, correlation=99))
    c = syncs.counts_per_step(trace.events({"traceEvents": ev}))
    assert c["d2h_per_step"] == 1.5  # the copy issued after the last step is not the steps'
    assert c["d2h_pageable_per_step"] == 1.0


def _pageable_d2h_events() -> list:
    """Two steps; each copies into pageable memory with no sync call (20 us in cudaMemcpyAsync) and
    the GPU then idles until the next kernel; the second step also has a `.item()`-like copy+sync."""
    ev = []
    for k, t0 in enumerate((0, 100)):
        ev += [_x(STEP_RANGE, "user_annotation", t0, 100),
               _x("kernel", "kernel", t0 + 0, 30, pid=0, tid=7, correlation=100 + k),
               _x("aten::copy_", "cpu_op", t0 + 10, 30),
               _x("cudaMemcpyAsync", "cuda_runtime", t0 + 15, 20, correlation=10 + k),
               _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", t0 + 31, 2, pid=0, tid=7, correlation=10 + k),
               _x("kernel", "kernel", t0 + 60, 30, pid=0, tid=7, correlation=200 + k)]
    ev += [_x("aten::_local_scalar_dense", "cpu_op", 145, 12),
           _x("cudaMemcpyAsync", "cuda_runtime", 146, 2, correlation=50),
           _x("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 147, 1, pid=0, tid=7, correlation=50),
           _x("cudaStreamSynchronize", "cuda_runtime", 149, 6, correlation=51)]
    return ev


def test_a_blocking_pageable_copy_counts_as_a_host_sync_and_its_wait_as_blocked_time():
    r = report.analyse({"traceEvents": _pageable_d2h_events()})
    # Every host wait is a sync: the pageable copy's wait is counted with the `.item()`.
    assert r["blocking_copies_per_step"] == 1.0 and r["syncs_per_step"] == 1.5
    assert r["host_syncs_per_step"] == 1.5 and r["d2h_per_step"] == 1.5 and r["d2h_pageable_per_step"] == 1.0
    # The second step (the first is skipped as the profiler's start): 20 us in the pageable copy +
    # 6 us in the stream sync blocked; GPU gaps 133..147 and 148..160 hold the ends of the two waits
    # (135 and 155): 14 + 12 us starved.
    assert r["host_blocked_ms"] == pytest.approx(0.026)
    assert r["gpu_idle_after_sync_ms"] == pytest.approx(0.026)


def test_every_count_of_a_trace_has_a_row_column():
    """measure_point keeps a trace's counts that are row columns and drops the rest: a count the
    sync accounting derives but the schema lacks would vanish from every row in silence."""
    from dspark_lab.measure import syncs, trace
    from dspark_lab.results.record import schema

    counts = syncs.counts_per_step(trace.events({"traceEvents": _pageable_d2h_events()}))
    assert counts["d2h_per_step"] == 1.5 and counts["d2h_pageable_per_step"] == 1.0
    assert sorted(set(counts) - {"steps_in_trace"} - set(schema.ROW_COLUMNS)) == []


# --- recording, loading, showing ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_recording(tmp_path_factory):
    rec = report.record(["scalar_item", "pageable_copy"], device="cpu", steps=3, rounds=2)
    return rec, report.save(rec, tmp_path_factory.mktemp("gallery") / "cpu.json")


def test_a_recording_round_trips_and_is_shown(cpu_recording, monkeypatch):
    rec, path = cpu_recording
    assert set(rec) >= {"kind", "schema", "fingerprint", "recorded_at", "scale", "device", "cases"}
    for c in rec["cases"]:
        for v in report.VARIANTS:
            r = c["variants"][v]
            assert set(r) == set(report.VARIANT_KEYS) and r["status"] == "ok", r["error"]
            assert r["matches"] is None  # nothing can sync without CUDA, so nothing was checked
    monkeypatch.setenv(report.DATA_ENV, str(path))
    b = report.backend()
    assert b.mode == "recorded" and b.names() == ["scalar_item", "pageable_copy"]
    t = b.table()
    assert t["case"].tolist() == ["scalar_item", "pageable_copy"]
    assert t["syncs case (doc)"].tolist() == [1, 1]
    text = b.text("scalar_item")
    assert "SGLang #20266" in text and "gallery/cases.py:" in text and "zero by construction" in text
    assert report.check(rec) == []
    with pytest.raises(ValueError, match="case must be one of"):
        b.text("list_to_device")


def test_check_reports_mismatches(cpu_recording):
    rec = json.loads(json.dumps(cpu_recording[0]))
    r = rec["cases"][0]["variants"]["case"]
    r.update(matches=False, host_syncs_per_step=2.0)
    assert report.check(rec) == ["scalar_item/case: host syncs 2 (documented 1), D2H 0 (documented 1)"]


def test_load_refuses_what_is_not_a_gallery(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"kind": "other"}))
    with pytest.raises(ValueError, match="kind must be 'dspark_gallery'"):
        report.load(tmp_path / "x.json")
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match="no recorded gallery"):
        report.load(tmp_path / "sub")
    with pytest.raises(ValueError, match="neither a gallery JSON file"):
        report.load(tmp_path / "missing.json")


def test_gpu_stage_runs_on_cpu_and_writes_the_format_the_notebook_reads(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_gallery.py"), "--steps", "2",
                        "--rounds", "2", "--cases", "list_to_device,host_plan"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    [path] = (tmp_path / "data" / "gallery").glob("*-gallery-*.json")
    rec = report.load(path)
    assert [c["name"] for c in rec["cases"]] == ["list_to_device", "host_plan"]
    assert all(set(c["change"]) >= {"pct", "ci_low", "ci_high"} for c in rec["cases"])
    [verify] = (tmp_path / "data" / "verify").glob("*-verify-compiled-*.json")
    assert {c["group"] for c in json.loads(verify.read_text())["checks"]} == {"compiled", "capture"}
    assert rec["fingerprint"]["torch"] == torch.__version__
    *_, last_case, last = p.stdout.strip().splitlines()  # the table is printed last, the accounting's summary under it
    assert last_case.split()[0] == "host_plan" and last == "charges against savings, of 2 cases: 2 cannot tell"


# --- on a GPU: measured counts equal the documented ones, with the gallery's lines ------------------
@pytest.mark.cuda
@pytest.mark.parametrize("name", gallery.names())
def test_measured_counts_match_the_documented_ones_and_name_the_lines(name):
    case = gallery.get(name)
    s = C.make_state("cuda", "smoke")
    a = report.measure_variant(case, "case", s)
    b = report.measure_variant(case, "fix", s)
    assert a["status"] == b["status"] == "ok", (a["error"], b["error"])
    assert a["host_syncs_per_step"] == case.expected_syncs and a["d2h_per_step"] == case.expected_d2h
    assert b["host_syncs_per_step"] == case.fix_expected_syncs and b["d2h_per_step"] == case.fix_expected_d2h
    if name == "pageable_copy":  # no sync call: only the trace's copy kind sees it
        assert not a["debug_sites"]
        assert [g[:3] for g in a["guard_sites"]] == [[g[0], "pageable_copy", "trace copies"] for g in a["guard_sites"]]
        assert a["guard_sites"][0][0].startswith("gallery/cases.py:") and a["guard_sites"][0][0].endswith(case.step.__name__)
    elif name in CUPTI_ONLY:  # an explicit event sync: sync debug mode does not flag it, CUPTI does
        assert not a["debug_sites"] and [g[1] for g in a["guard_sites"]] == ["event"], a["guard_sites"]
    elif name in COMPILED:  # compiled code: the count is the check; Dynamo may run the read from another frame
        assert sum(a["debug_sites"].values()) == case.expected_syncs
    else:
        assert set(a["debug_sites"]) == set(case.sites())
        assert sum(a["debug_sites"].values()) == case.expected_syncs


CUPTI_ONLY = {"deferred_event_sync"}
COMPILED = {"compiled_item", "compiled_item_captured"}


# --- the scale where a sync waits, and the split of the fix's change ------------------------------------
def test_the_gpu_scale_queues_work_ahead_and_is_the_default_on_cuda_only():
    assert C.default_scale("cpu") == C.CPU_SCALE == "smoke"
    assert C.default_scale("cuda") == C.GPU_SCALE == "queued"
    assert C.scale(C.GPU_SCALE).queued_gpu_ms > 0 and C.scale("smoke").queued_gpu_ms == 0
    s = C.make_state("cpu", "queued")
    C.queue_gpu_work(s)  # no CUDA: nothing to queue, and no error
    rec = report.record(["scalar_item"], device="cpu", steps=1, rounds=2)
    assert rec["scale"] == "smoke"  # the device's default when none is asked


def test_an_inspect_target_measures_at_the_scale_the_gallery_records_at(monkeypatch):
    from dspark_lab.gallery import targets

    monkeypatch.delenv(targets.SCALE_ENV, raising=False)
    monkeypatch.setattr(C.torch.cuda, "is_available", lambda: True)
    assert targets.default_scale() == C.GPU_SCALE
    monkeypatch.setattr(C.torch.cuda, "is_available", lambda: False)
    assert targets.default_scale() == C.CPU_SCALE
    monkeypatch.setenv(targets.SCALE_ENV, "gpu")
    assert targets.default_scale() == "gpu"
    monkeypatch.setenv(targets.SCALE_ENV, "huge")
    with pytest.raises(ValueError, match="DSPARK_GALLERY_SCALE must be one of"):
        targets.default_scale()


def _variant(**kw):
    base = {k: None for k in report.VARIANT_KEYS}
    return {**base, "status": "ok", "expected_syncs": 1, "host_syncs_per_step": 1.0, "matches": True, **kw}


def test_the_step_change_is_split_into_the_syncs_cost_and_the_fixs_other_changes():
    a = _variant(step_ms=6.0, gpu_idle_sync_caused_ms=1.5, host_launch_ms=0.6, host_other_ms=2.6, host_prep_ms=0.2)
    b = _variant(step_ms=4.0, gpu_idle_sync_caused_ms=0.0, host_launch_ms=0.4, host_other_ms=1.6, host_prep_ms=0.2)
    sp = report.split(a, b)
    assert sp["step_change_ms"] == pytest.approx(-2.0) and sp["sync_cost_ms"] == pytest.approx(-1.5)
    assert sp["other_changes_ms"] == pytest.approx(-0.5)  # what the sync's idle does not explain
    assert sp["launch_change_ms"] == pytest.approx(-0.2) and sp["host_work_change_ms"] == pytest.approx(-1.0)
    line = report.split_lines(sp)[0]
    assert "the case's waits' caused idle -1.500 ms" in line and "other changes -0.500 ms" in line
    rec = {"device": "cuda", "cases": [{"name": "x", "shape": "s", "pr": "SGLang #34782", "why": "w", "documented_sites": [],
                                        "variants": {"case": a, "fix": b}}]}
    row = report.table(rec).iloc[0]
    assert row["idle the sync caused ms case"] == 1.5 and row["of it the case's waits ms"] == pytest.approx(-1.5)
    assert "GPU starved ms case" not in report.table(rec).columns


def test_a_fixs_own_waits_are_not_credited_as_its_other_changes():
    # the fix keeps a wait charged 0.4 ms, and a by-design read-back (charged nothing) that idles the GPU 0.5 ms more
    a = _variant(step_ms=6.0, gpu_idle_sync_caused_ms=1.5, gpu_idle_ms=1.6)
    b = _variant(step_ms=5.6, gpu_idle_sync_caused_ms=0.4, gpu_idle_ms=1.0, readback_syncs_per_step=1.0)
    sp = report.split(a, b)
    assert sp["case_waits_ms"] == pytest.approx(-1.5) and sp["fix_waits_ms"] == pytest.approx(0.4)
    assert sp["no_wait_idle_ms"] == pytest.approx(0.5)  # 0.6 ms charged to no wait in the fix, 0.1 in the case
    assert sp["other_changes_ms"] == pytest.approx(-0.4 + 1.5 - 0.4 - 0.5)
    assert sum(sp[k] for k in ("case_waits_ms", "fix_waits_ms", "no_wait_idle_ms", "other_changes_ms")) == \
        pytest.approx(sp["step_change_ms"])
    line = report.split_lines(sp)[0]
    assert "the fix's own waits' caused idle +0.400 ms (still in its step)" in line and "charged to no wait +0.500 ms" in line


def test_a_gallery_recorded_before_the_caused_idle_says_the_split_needs_a_new_recording():
    old = {k: v for k, v in _variant(step_ms=3.0).items() if k != "gpu_idle_sync_caused_ms"}
    sp = report.split(old, _variant(step_ms=2.0))
    assert sp["sync_cost_ms"] is None and sp["other_changes_ms"] is None
    assert "record it again" in report.split_lines(sp)[0]


def test_a_recorded_case_is_explained_by_the_registrys_current_text():
    # data/gallery/ recordings keep the texts of their day; the view shows the corrected ones
    rec = report.load(sorted((ROOT / "data" / "gallery").glob("*.json"))[0])
    text = report.case_text(rec, "list_to_device")
    assert "fill a persistent pinned buffer and copy it" not in text
    assert "a fresh pinned tensor each step" in text and gallery.get("list_to_device").why in text
