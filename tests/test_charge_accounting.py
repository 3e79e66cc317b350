"""A gallery case's charge against what its fix saves (results/analyses/charge_accounting.py) on
synthetic records, one per verdict; the step change and both step times from one set of paired rounds
(gallery/step_change.py); the GPU work each step launches (gallery/launched_work.py) on synthetic
traces; and the recorded galleries, old and newest, read without a crash."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from dspark_lab import gallery
from dspark_lab.gallery import cases as C
from dspark_lab.gallery import launched_work, report, step_change
from dspark_lab.measure import trace
from dspark_lab.measure.ranges import STEP_RANGE
from dspark_lab.results.analyses import charge_accounting as A
from dspark_lab.results.analyses import sync_cost_groups as G


def _v(step, charge, *, work, profiled=None, status="ok", readback=0.0):
    """A variant: profiler-free step, charge, launched work (ms per step); profiled = step (no stretch) unless
    given; `readback`: the idle its by-design readback caused."""
    return {"status": status, "error": "" if status == "ok" else "RuntimeError: boom", "step_ms": step,
            "gpu_idle_sync_caused_ms": charge, "gpu_idle_readback_caused_ms": readback, "launched_gpu_ms": work, "profiled_step_ms": profiled or step,
            "host_syncs_per_step": 1.0, "expected_syncs": 1, "matches": True, "host_blocked_ms": 1.0}


def _change(ms, lo, hi):
    return {"pct": ms * 20, "ci_low": lo * 20, "ci_high": hi * 20, "ms": ms, "ms_low": lo, "ms_high": hi,
            "same_rounds": True}


def _rec(*cases, device="cuda"):
    return {"device": device, "cases": [{"name": n, "pr": "p", "shape": "s", "variants": {"case": a, "fix": b},
                                         "change": ch} for n, a, b, ch in cases]}


def _row(*case, device="cuda"):
    return A.table(_rec(case, device=device)).iloc[0].to_dict()


# GPU-bound: 4.8 ms of launched work, the case's wait idles the GPU 0.8 ms, the fix removes the wait
ACCOUNTED = ("a", _v(5.7, 0.8, work=4.8), _v(4.9, 0.0, work=4.8), _change(-0.8, -0.85, -0.75))


def test_a_saving_equal_to_the_net_charge_is_accounted():
    r = _row(*ACCOUNTED)
    assert r["verdict"] == A.ACCOUNTED and r["net charge ms"] == pytest.approx(0.8)
    assert r["saving ms"] == pytest.approx(0.8) and r["off by ms"] == 0.0
    assert "the net charge 0.800 ms lies in the saving 0.800 ms (95% CI 0.750 to 0.850)" in r["reason"]


def test_a_charge_above_the_saving_is_not_accounted_and_says_by_how_much():
    name, a, b, _ = ACCOUNTED
    r = _row(name, a, b, _change(-0.5, -0.55, -0.45))
    assert r["verdict"] == A.NOT_ACCOUNTED and r["off by ms"] == pytest.approx(0.25)
    assert "is 0.250 ms above the saving 0.500 ms" in r["reason"] and "the rest of the step" in r["reason"]


def test_the_work_the_fix_removed_is_taken_off_the_saving_where_both_steps_are_gpu_bound():
    # the fix also launches 0.3 ms less work: the step saves 1.1 ms, of which 0.8 ms is the wait's
    case, fix = _v(6.0, 0.8, work=5.1), _v(4.9, 0.0, work=4.8)
    r = _row("w", case, fix, _change(-1.1, -1.15, -1.05))
    assert r["GPU-bound"] and r["work taken off"] and r["work removed ms"] == pytest.approx(0.3)
    assert r["wait saving ms"] == pytest.approx(0.8) and r["verdict"] == A.ACCOUNTED
    assert "after +0.300 ms of launched work the fix removed" in r["reason"]
    # the same charge against a saving that is the wait's alone fails once the removed work is taken off
    assert _row("w", case, fix, _change(-0.8, -0.85, -0.75))["verdict"] == A.NOT_ACCOUNTED


def test_work_the_fix_added_is_added_back():
    case, fix = _v(5.7, 0.8, work=4.8), _v(5.2, 0.0, work=5.1)  # the fix launches 0.3 ms more
    r = _row("w", case, fix, _change(-0.5, -0.55, -0.45))
    assert r["work removed ms"] == pytest.approx(-0.3) and r["wait saving ms"] == pytest.approx(0.8)
    assert r["verdict"] == A.ACCOUNTED


def test_a_work_change_where_a_step_is_not_gpu_bound_cannot_be_told():
    # the fix's step is host-bound: 1 ms of it is neither launched work nor charged idle
    case, fix = _v(6.0, 0.8, work=5.1), _v(5.8, 0.0, work=4.8)
    r = _row("h", case, fix, _change(-0.2, -0.25, -0.15))
    assert not r["GPU-bound"] and not r["work taken off"] and r["verdict"] == A.CANNOT_TELL
    assert "is not GPU-bound" in r["reason"] and "-0.300 ms per step" in r["reason"]
    # with no work change the host-bound step is compared as it is
    r = _row("h", _v(6.0, 0.8, work=4.8), _v(5.8, 0.0, work=4.8), _change(-0.2, -0.25, -0.15))
    assert not r["work taken off"] and r["verdict"] == A.NOT_ACCOUNTED and r["off by ms"] == pytest.approx(0.55)


def test_the_profiler_stretch_comes_off_each_charge():
    # profiled 0.2 ms longer than profiler-free: the case's 1.0 ms charge is 0.8 ms unprofiled
    case = _v(5.7, 1.0, work=4.8, profiled=5.9)
    r = _row("s", case, _v(4.9, 0.0, work=4.8), _change(-0.8, -0.85, -0.75))
    assert r["case charge less stretch ms"] == pytest.approx(0.8) and r["verdict"] == A.ACCOUNTED


def test_a_fix_that_keeps_a_wait_is_charged_net():
    # moe-like: the case's waits 1.6 ms (0.6 of it stretch), the fix keeps one 0.7 ms wait (0.1 stretch)
    case, fix = _v(5.8, 1.6, work=4.8, profiled=6.4), _v(5.45, 0.7, work=4.8, profiled=5.55)
    r = _row("m", case, fix, _change(-0.35, -0.45, -0.3))
    assert r["net charge ms"] == pytest.approx(1.0 - 0.6) and r["verdict"] == A.ACCOUNTED


def test_a_ci_that_holds_both_zero_and_the_charge_cannot_tell_and_no_charge_no_saving_is_accounted():
    name, a, b, _ = ACCOUNTED
    r = _row(name, a, b, _change(-0.3, -1.0, 0.4))
    assert r["verdict"] == A.CANNOT_TELL and "holds both 0 and the net charge 0.800 ms" in r["reason"]
    r = _row("free", _v(5.0, 0.0, work=4.8), _v(5.0, 0.0, work=4.8), _change(0.01, -0.05, 0.06))
    assert r["verdict"] == A.ACCOUNTED


def test_without_cuda_a_failed_variant_or_a_missing_field_it_cannot_tell_and_says_why():
    name, a, b, ch = ACCOUNTED
    assert "recorded without CUDA" in _row(*ACCOUNTED, device="cpu")["reason"]
    assert "a variant failed: RuntimeError: boom" in _row(name, a, _v(4.9, 0, work=4.8, status="failed"), ch)["reason"]
    old = {k: v for k, v in ch.items() if k not in ("ms", "same_rounds")}
    assert "recorded before the step times and the change were one measurement" in _row(name, a, b, old)["reason"]
    r = _row(name, {**a, "launched_gpu_ms": None}, b, ch)
    assert r["verdict"] == A.CANNOT_TELL and r["reason"] == "recorded before case.launched_gpu_ms existed"
    assert A.summary(_rec(ACCOUNTED, ("b", a, b, old))) == "charges against savings, of 2 cases: 1 accounted, 1 cannot tell"


@pytest.mark.parametrize("path", sorted(report.DATA_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_recorded_gallery_is_accounted_or_says_why_it_cannot_be(path):
    rec = report.load(path)
    t = A.table(rec)
    assert len(t) == len(rec["cases"]) and set(t["verdict"]) <= set(A.VERDICTS)
    assert all(t["reason"].str.len() > 0)
    if not any((c.get("change") or {}).get("same_rounds") for c in rec["cases"]):
        assert set(t["verdict"]) == {A.CANNOT_TELL} and all(t["reason"].str.startswith("recorded before"))
    assert G.groups(rec)["charge vs saving"].tolist() == t.set_index("case").loc[G.groups(rec)["case"], "verdict"].tolist()


# --- the step change and both step times from the same rounds -----------------------------------------
def test_the_change_and_both_step_times_come_from_the_same_rounds():
    case_ms, fix_ms = [5.0, 5.2, 5.1, 7.0], [4.0, 4.3, 4.0, 6.1]
    s = step_change.summarise(case_ms, fix_ms, steps=20)
    assert s["case"]["step_ms"] == np.median(case_ms) and s["fix"]["step_ms"] == np.median(fix_ms)
    ch = s["change"]
    assert ch["ms"] == pytest.approx(np.median(np.subtract(fix_ms, case_ms)))  # -1.0, -0.9, -1.1, -0.9
    assert ch["ms"] == pytest.approx(-0.95) and ch["ms_low"] <= ch["ms"] <= ch["ms_high"] < 0
    assert ch["same_rounds"] and ch["rounds"] == 4 and ch["steps"] == 20 and ch["paired"]
    assert ch["case_trials_ms"] == case_ms and ch["pct"] < 0
    with pytest.raises(ValueError, match="case_ms and fix_ms must be paired rounds"):
        step_change.summarise([1.0, 2.0], [1.0], steps=1)
    with pytest.raises(ValueError, match="rounds must be at least 2"):
        step_change.paired_rounds(lambda: None, lambda: None, rounds=1)


def test_a_cpu_recording_measures_each_case_on_one_state_with_the_change_from_its_rounds(monkeypatch):
    seen, made = {"case": set(), "fix": set()}, []
    real = C.make_state
    monkeypatch.setattr(C, "make_state", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    base = gallery.get("scalar_item")
    spy = dataclasses.replace(base, step=lambda s: seen["case"].add(id(s)) or base.step(s),
                              fix=lambda s: seen["fix"].add(id(s)) or base.fix(s))
    monkeypatch.setitem(report.CASES, "scalar_item", spy)
    rec = report.record(["scalar_item"], device="cpu", steps=2, rounds=3)
    assert len(made) == 1 and seen["case"] == seen["fix"] == {id(made[0])}  # one state: profiled passes and rounds
    c = json.loads(json.dumps(rec))["cases"][0]
    ch, a, b = c["change"], c["variants"]["case"], c["variants"]["fix"]
    assert ch["same_rounds"] and ch["rounds"] == 3 and len(ch["case_trials_ms"]) == 3
    assert a["step_ms"] == pytest.approx(np.median(ch["case_trials_ms"]))
    assert b["step_ms"] == pytest.approx(np.median(ch["fix_trials_ms"]))
    assert a["launched_gpu_ms"] == 0.0  # no GPU op in a CPU trace
    assert rec["rounds"] == 3 and rec["steps"] == 2 and rec["step_change_rule"] == step_change.STEP_CHANGE_RULE
    assert report.table(rec).iloc[0]["change ms"] == pytest.approx(ch["ms"])  # the table's change is the paired one
    assert A.table(rec).iloc[0]["reason"].startswith("recorded without CUDA")


# --- the GPU work each step launches ------------------------------------------------------------------
def _x(name, cat, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def test_launched_work_goes_to_the_step_that_launched_it_wherever_it_ran():
    # step 0 (0..100 us) launches 300 us of kernels that run through step 1's window (the host ran ahead);
    # step 1 launches one 50 us kernel and a 20 us copy overlapping it by 10 us; another thread's kernel is no step's
    ev = [_x(STEP_RANGE, "user_annotation", 0, 100), _x(STEP_RANGE, "user_annotation", 100, 100),
          _x("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1), _x("k", "kernel", 20, 200, pid=0, tid=7, correlation=1),
          _x("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=2), _x("k", "kernel", 220, 100, pid=0, tid=7, correlation=2),
          _x("cudaLaunchKernel", "cuda_runtime", 110, 5, correlation=3), _x("k", "kernel", 320, 50, pid=0, tid=7, correlation=3),
          _x("cudaMemcpyAsync", "cuda_runtime", 120, 5, correlation=4),
          _x("Memcpy DtoD", "gpu_memcpy", 360, 20, pid=0, tid=8, correlation=4),
          _x("cudaLaunchKernel", "cuda_runtime", 130, 5, tid=2, correlation=5), _x("k", "kernel", 400, 80, pid=0, tid=7, correlation=5)]
    df = trace.events({"traceEvents": ev})
    assert launched_work.per_step(df) == pytest.approx([0.3, 0.06])
    assert launched_work.mean_ms(df) == pytest.approx(0.06)  # the first step left out: the profiler's start
    assert launched_work.mean_ms(df, skip_first=0) == pytest.approx(0.18)


def test_the_gallery_tables_change_is_the_recorded_paired_one_where_the_rounds_gave_both():
    for path in sorted(report.DATA_DIR.glob("*.json")):
        rec = report.load(path)
        t = report.table(rec).set_index("case")
        for c in rec["cases"]:
            a, b, ch = c["variants"]["case"], c["variants"]["fix"], c.get("change") or {}
            want = ch["ms"] if ch.get("same_rounds") else b["step_ms"] - a["step_ms"]
            assert t.loc[c["name"], "change ms"] == pytest.approx(want), (path.name, c["name"])


def test_the_stages_last_table_shows_the_change_in_ms_the_net_charge_against_the_saving_and_the_verdict():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_gallery", report.DATA_DIR.parents[1] / "scripts" / "gpu_gallery.py")
    gpu_gallery = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_gallery)
    name, a, b, _ = ACCOUNTED
    rec = _rec(ACCOUNTED, ("b", a, b, _change(-0.5, -0.55, -0.45)))
    *rows, last = gpu_gallery.table_text(rec).splitlines()[1:]
    assert "-0.800 ms [-0.850, -0.750]" in rows[0] and "net 0.800 vs 0.800 [0.750, 0.850]: accounted" in rows[0]
    assert "net 0.800 vs 0.500 [0.450, 0.550]: not accounted by +0.250" in rows[1] and G.COSTS in rows[1]
    assert last == "charges against savings, of 2 cases: 1 accounted, 1 not accounted"


@pytest.mark.cuda
def test_on_a_gpu_a_case_records_its_launched_work_and_its_change_from_the_rounds_that_give_its_step_times():
    rec = report.record(["scalar_item"], scale="queued", steps=5, rounds=3)
    c = rec["cases"][0]
    ch, a, b = c["change"], c["variants"]["case"], c["variants"]["fix"]
    assert a["status"] == b["status"] == "ok", (a["error"], b["error"])
    assert ch["same_rounds"] and a["step_ms"] == pytest.approx(np.median(ch["case_trials_ms"]))
    assert b["step_ms"] == pytest.approx(np.median(ch["fix_trials_ms"]))
    # both launch the queued work and the verify layers; the case also its sum and its copy
    assert a["launched_gpu_ms"] > 0 and b["launched_gpu_ms"] > 0
    row = A.table(rec).iloc[0]
    assert row["verdict"] in A.VERDICTS and row["reason"] and row["net charge ms"] == row["net charge ms"]


def test_a_fix_that_moves_its_wait_into_the_readback_is_charged_there():
    # the case's wait idles the GPU 0.33 ms; the fix waits in its by-design readback instead, which idles
    # it 0.08 ms: the step saves 0.25 ms, which the charges account for only with the readback's
    case, fix = _v(5.2, 0.33, work=4.8), _v(4.95, 0.0, work=4.8, readback=0.08)
    r = _row("moved", case, fix, _change(-0.25, -0.27, -0.23))
    assert r["fix readback charge ms"] == pytest.approx(0.08) and r["net charge ms"] == pytest.approx(0.25)
    assert r["verdict"] == A.ACCOUNTED
    assert _row("moved", case, _v(4.95, 0.0, work=4.8), _change(-0.25, -0.27, -0.23))["verdict"] == A.NOT_ACCOUNTED


def test_a_record_without_the_readback_charge_cannot_tell_and_says_which_field():
    name, a, b, ch = ACCOUNTED
    old = {k: v for k, v in a.items() if k != "gpu_idle_readback_caused_ms"}
    r = _row(name, old, b, ch)
    assert r["verdict"] == A.CANNOT_TELL and "case.gpu_idle_readback_caused_ms" in r["reason"]


def test_a_gallery_recorded_later_the_same_day_is_the_one_shown(tmp_path):
    from dspark_lab.results.record.paths import machine_file_name

    fp = {"gpu": "NVIDIA H200"}
    assert machine_file_name(fp, "2026-12-04T19:45:12+00:00", "gallery", with_time=True) == "h200-gallery-20261204-1945.json"
    assert machine_file_name(fp, "2026-12-04T19:45:12+00:00", "gallery") == "h200-gallery-20261204.json"
    with pytest.raises(ValueError, match="recorded must be an ISO time"):
        machine_file_name(fp, "2026-12-04", "gallery", with_time=True)
    for name in ("h200-gallery-20261203.json", "h200-gallery-20261204.json", "h200-gallery-20261204-0930.json",
                 "h200-gallery-20261204-1945.json"):
        (tmp_path / name).write_text("{}")
    assert report.find_recorded(tmp_path).name == "h200-gallery-20261204-1945.json"
    (tmp_path / "h200-gallery-20261205.json").write_text("{}")  # a later day, named by its day only
    assert report.find_recorded(tmp_path).name == "h200-gallery-20261205.json"


def test_the_charges_own_cis_widen_the_saving_and_a_record_without_them_says_so():
    # a net charge 3 µs above the saving's CI: outside it by the saving's CI alone, inside once the two
    # charges' own 95% CIs over their profiled steps (±0.004 and ±0.002 ms) are added
    case, fix = _v(5.2, 0.33, work=4.8), _v(4.95, 0.0, work=4.8, readback=0.08)
    ch = _change(-0.24, -0.247, -0.233)
    alone = _row("near", case, fix, ch)
    assert alone["verdict"] == A.NOT_ACCOUNTED and alone["off by ms"] == pytest.approx(0.003)
    assert alone["net charge CI half ms"] is None and "judged by the saving's CI alone" in alone["reason"]
    with_ci = _row("near", dict(case, charge_ci_half_width_ms=0.004), dict(fix, charge_ci_half_width_ms=0.002), ch)
    assert with_ci["net charge CI half ms"] == pytest.approx(0.006) and with_ci["verdict"] == A.ACCOUNTED
    assert "widened by the charges' own 95% CIs over the profiled steps (±0.006 ms)" in with_ci["reason"]
    # a miss larger than both is still one, by its distance past the widened interval
    far = _row("far", dict(case, charge_ci_half_width_ms=0.004), dict(fix, charge_ci_half_width_ms=0.002),
               _change(-0.2, -0.207, -0.193))
    assert far["verdict"] == A.NOT_ACCOUNTED and far["off by ms"] == pytest.approx(0.25 - 0.207 - 0.006)
