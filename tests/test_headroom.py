"""The read stub's site matching, the headroom of a served read against its charge, the race check on
steps that simulate a stream on the CPU, and `diff`'s verdict on a wait that moved. CPU tensors stand
in for device ones (ReadStub(devices=("cpu",))); made-up inspect records (tests/helpers.py)."""
from __future__ import annotations

import time

import pytest
from pathlib import Path
import torch

from dspark_lab.measure import races
from dspark_lab.measure.read_stub import ReadStub
from dspark_lab.results.analyses import headroom as H
from dspark_lab.results.analyses import step_diff
from dspark_lab.run.headroom import headroom
from helpers import FakeStream, inspect_record, stream_hooks

STATE = {"x": torch.arange(4.0)}


def two_reads():
    x = STATE["x"]
    a = x.sum().item()  # site A
    b = x.max().item()  # site B
    return a, b


def _site(fn, offset: int) -> str:
    return f"tests/test_headroom.py:{fn.__code__.co_firstlineno + offset} {fn.__name__}"


def test_only_the_chosen_site_is_served_the_recorded_value():
    with ReadStub(devices=("cpu",)) as stub:
        reads = stub.record(two_reads, steps=2)
        assert set(reads) == {_site(two_reads, 2), _site(two_reads, 3)}
        assert {r.kind for r in reads.values()} == {"item"}
        STATE["x"] = torch.arange(4.0) + 10  # the real values change after the warm-up
        served_a = stub.step(two_reads, _site(two_reads, 2))()
        served_b = stub.step(two_reads, _site(two_reads, 3))()
        real = stub.step(two_reads, None)()
    STATE["x"] = torch.arange(4.0)
    assert served_a == (6.0, 13.0)  # A from the warm-up, B real
    assert served_b == (46.0, 3.0)  # A real, B from the warm-up
    assert real == (46.0, 13.0)


def test_the_wrappers_are_removed_and_a_host_tensor_is_not_a_device_read():
    before = {n: n in torch.Tensor.__dict__ for n in ("item", "__bool__", "__getitem__", "to")}
    with ReadStub() as stub:  # devices=("cuda",): nothing on the CPU is a device read
        assert stub.record(two_reads) == {}
        with pytest.raises(RuntimeError, match="already entered"):
            ReadStub().__enter__()
    assert {n: n in torch.Tensor.__dict__ for n in before} == before


def varying_mask():
    x = STATE["x"]
    return x[x > STATE.get("cut", 1.5)]


def test_a_mask_whose_shape_changes_between_steps_is_not_servable():
    def step():
        STATE["cut"] = 1.5 if STATE.get("cut") != 1.5 else 2.5
        return varying_mask()
    with ReadStub(devices=("cpu",)) as stub:
        (read,) = stub.record(step, steps=2).values()
    assert read.kind == "mask" and read.shape_varies and "shape" in read.unservable()
    STATE.pop("cut")


FLAG = {"real": torch.tensor(False)}


def slow_when_flag():
    if FLAG["real"]:  # the read: bool() of a tensor
        time.sleep(0.003)
    return 1


def test_the_headroom_is_the_paired_difference_the_served_read_makes():
    """Warm-up sees False; afterwards the real read says True and sleeps 3 ms, the served one does not."""
    orig = ReadStub.record

    def record_then_flip(self, fn, steps=2):
        out = orig(self, fn, steps)
        FLAG["real"] = torch.tensor(True)
        return out
    try:
        ReadStub.record = record_then_flip
        rec = headroom(slow_when_flag, steps=3, trials=5, warmup=0, devices=("cpu",))
    finally:
        ReadStub.record = orig
        FLAG["real"] = torch.tensor(False)
    (row,) = rec["sites"]
    assert row["kind"] == "bool" and row["stubbed"]
    assert 1.5 < row["headroom_lo"] <= row["headroom_ms"] <= row["headroom_hi"] < 30.0  # 3 ms of sleep, on shared cores
    assert row["charge_ms"] is None and row["agree"] is None  # no CUDA: nothing charged
    assert "no charge" in H.verdict(row)


def _row(site, med, lo, hi):
    return {"site": site, "kind": "item", "per_step": 1.0, "varies": False, "stubbed": True, "why_not": "",
            "headroom_ms": med, "headroom_lo": lo, "headroom_hi": hi}


def test_charges_match_by_line_and_the_agreement_is_the_ci():
    base = inspect_record("b", [("app/m.py:10 f", 1.0, True, 0.5, 0.40, None),
                                ("app/m.py(20): g", 1.0, False, 0.3, 0.30, None)])
    rows = H.with_charges([_row("app/m.py:10 f", 0.41, 0.35, 0.45), _row("app/m.py:24 g", 0.05, 0.0, 0.1),
                           _row("app/m.py:99 h", 0.0, -0.01, 0.01)], base)
    assert [(r["charged_site"], r["charge_ms"], r["agree"]) for r in rows] == [
        ("app/m.py:10 f", 0.40, True), ("app/m.py(20): g", 0.30, False), (None, None, None)]
    unseen = H.with_unseen(rows[:1], base)
    assert unseen[-1]["site"] == "app/m.py(20): g" and not unseen[-1]["stubbed"] and unseen[-1]["why_not"] == H.UNSEEN


def test_a_charge_over_the_headroom_by_the_profiler_s_host_time_is_put_down_to_the_profiler():
    """One wait, nothing moved: the charge (from the profiled step) exceeds the profiler-free headroom by
    the real step's profiled time over its profiler-free time, the split's profiler term."""
    base = inspect_record("b", [("app/m.py:10 f", 1.0, True, 0.5, 0.4, None)])
    stub = inspect_record("s", [])
    stub["parts"] = {**base["parts"], "gpu_idle_sync_caused_ms": 0.0, "gpu_idle_ms": base["parts"]["gpu_idle_ms"] - 0.4}
    row = H.with_charges([_row("app/m.py:10 f", 0.28, 0.26, 0.30)], base)[0]
    profiled = base["parts"]["profiled_step_ms"]
    why = H.explain(base, stub, row, step_ms=profiled - 0.11)
    assert why["terms"]["profiler"] == pytest.approx(-0.11) and why["reason"] == "profiler"
    assert sum(why["terms"].values()) == pytest.approx(why["gap_ms"])
    assert "the profiler's own host time" in H.verdict({**row, "why": why})
    # a record made before the term existed gets it from its own numbers, the rest smaller by as much
    old = {**why, "terms": {k: v for k, v in why["terms"].items() if k != "profiler"}}
    old["terms"]["rest"] += why["terms"]["profiler"]
    again = H.with_profiler_term(old, profiled, profiled - 0.11)
    assert again["terms"] == pytest.approx(why["terms"]) and again["reason"] == "profiler"
    assert H.profiler_term(1.0, 1.2) == 0.0 and H.profiler_term(None, 1.0) == 0.0


def test_a_disagreement_is_split_and_a_moved_wait_named():
    base = inspect_record("b", [("app/m.py:10 f", 1.0, True, 0.5, 0.4, None), ("app/m.py:30 k", 1.0, True, 0.1, 0.0, None)])
    stub = inspect_record("s", [("app/m.py:30 k", 1.0, True, 0.45, 0.35, None)])
    row = H.with_charges([_row("app/m.py:10 f", 0.04, 0.0, 0.08)], base)[0]
    why = H.explain(base, stub, row)
    assert why["reason"] == "moved" and why["terms"]["moved"] == pytest.approx(-0.35)
    assert sum(why["terms"].values()) == pytest.approx(why["gap_ms"]) == pytest.approx(0.04 - 0.4)
    assert [w["site"] for w in why["new_waits"]] == ["app/m.py:30 k"]
    assert "moved" in H.verdict({**row, "why": why}) and "app/m.py:30 k" in H.verdict({**row, "why": why})




def _h2d(stream, reuse: bool):
    def make():
        shared = torch.zeros(1)

        def step(i):
            buf = shared if reuse else torch.zeros(1)
            buf.fill_(i)  # the host fills the staging buffer
            out = torch.zeros(1)
            stream.enqueue(lambda: out.copy_(buf))  # the copy reads buf when the stream gets there
            return out
        return step
    return make


def test_a_reused_buffer_read_later_is_a_race_and_a_fresh_one_is_not():
    s = FakeStream()
    racy = races.check(_h2d(s, reuse=True), steps=6, hooks=stream_hooks(s))
    clean = races.check(_h2d(s, reuse=False), steps=6, hooks=stream_hooks(s))
    assert [r["step"] for r in racy["races"]] == [0, 1, 2, 3, 4] and not racy["clean"]
    assert {r["output"] for r in racy["races"]} == {"output"} and racy["races"][0]["wrong"] == 1
    assert clean["clean"] and clean["races"] == []
    assert "5 output(s) differ" in races.describe(racy) and "none in 6 steps" in races.describe(clean)


def test_outputs_are_named_by_their_place_and_a_step_index_is_passed():
    assert [p for p, _ in races.flatten({"a": torch.ones(1), "b": [1, torch.zeros(2)]})] == ["a", "b.0", "b.1"]
    seen = []
    races.check(lambda: (lambda i: seen.append(i)), steps=3, hooks=races.Hooks(ahead=lambda: None, sync=lambda: None))
    assert seen == [0, 1, 2, 0, 1, 2]  # the reference run, then the checked run


def test_the_copy_log_names_the_copy_and_can_make_it_blocking():
    dst, src = torch.zeros(3), torch.ones(3)
    with races.copy_log(force_blocking=True) as log:
        log.steps.append([])
        dst.copy_(src, non_blocking=True)
        line = test_the_copy_log_names_the_copy_and_can_make_it_blocking.__code__.co_firstlineno + 4
    (site, d, s), = log.steps[0]
    assert site == f"tests/test_headroom.py:{line} test_the_copy_log_names_the_copy_and_can_make_it_blocking"
    assert d == dst.untyped_storage().data_ptr() and races._raced_copy(log.steps[0], d) == site
    assert "copy_" not in torch.Tensor.__dict__


def test_without_cuda_and_hooks_nothing_is_checked():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    rep = races.check(lambda: (lambda: 1), steps=2)
    assert not rep["checked"] and "nothing was checked" in rep["note"]
    with pytest.raises(ValueError, match="steps must be an integer >= 2"):
        races.check(lambda: (lambda: 1), steps=1)


def _diff(before_sites, after_sites):
    b, a = inspect_record("before", before_sites), inspect_record("after", after_sites)
    return step_diff.diff(b, a)


def test_diff_says_a_wait_moved_when_another_site_gained_it():
    read = ("app/m.py:10 f", 1.0, True, 0.8, 0.6, "n = int(x.sum())")
    moved_to = ("app/m.py:14 f", 1.0, True, 0.7, 0.5, "y = torch.repeat_interleave(t, r)")
    d = _diff([read], [moved_to])
    w = d["waits"]
    assert w["verdict"] == "moved" and w["lost_ms"] == pytest.approx(0.8) and w["gained_ms"] == pytest.approx(0.7)
    assert [x["site"] for x in w["new_waits"]] == ["app/m.py:14 f"]
    assert w["host_wait_ms"] == (0.8, 0.7) and w["charged_idle_ms"] == (0.6, 0.5)
    assert "moved rather than went" in step_diff.text(d) and "app/m.py:14 f" in step_diff.markdown(d)
    gone = _diff([read], [])["waits"]
    assert gone["verdict"] == "went" and gone["new_waits"] == []
    part = _diff([read], [("app/m.py:14 f", 1.0, True, 0.2, 0.1, "y = torch.repeat_interleave(t, r)")])["waits"]
    assert part["verdict"] == "partly moved"
    assert _diff([], [moved_to])["waits"]["verdict"] == "none removed"


def test_a_recorded_study_is_found_and_its_parts_read(tmp_path):
    rec = {"kind": H.KIND, "schema": H.SCHEMA, "case": "decode_step", "label": "slow_step", "target": "t",
           "device": "cuda", "fingerprint": {"gpu": "SYNTHETIC"}, "options": {"trials": 5}, "step_ms": 1.0,
           "step_ms_lo": 0.9, "step_ms_hi": 1.1, "sites": [{**_row("app/m.py:10 f", 0.4, 0.3, 0.5), "charge_ms": 0.1,
                                                            "agree": False}]}
    race = {"checked": True, "clean": False, "steps": 4, "note": "",
            "races": [{"step": 1, "output": "0", "wrong": 2, "of": 8, "copy": "app/m.py:12 f"}]}
    study = {"kind": H.STUDY_KIND, "headroom": [rec, {"case": "x", "error": "E"}],
             "race_cases": [{"name": "decode_step", "variant": "fix", "report": race}]}
    assert H.recorded_study(tmp_path) is None
    (tmp_path / "headroom").mkdir()
    (tmp_path / "headroom" / "synthetic-headroom-20260101.json").write_text(__import__("json").dumps(study))
    got = H.recorded_study(tmp_path)
    assert H.case_record(got, "decode_step")["label"] == "slow_step" and H.case_record(got, "x") is None
    assert "step 1, output 0: 2 of 8 wrong; copy: app/m.py:12 f" in H.races_text(H.study_races(got, "decode_step"))
    assert "disagree: headroom above the charge" in H.text(H.case_record(got, "decode_step"))
    (tmp_path / "headroom" / "synthetic-headroom-20260102.json").write_text('{"kind": "other"}')
    with pytest.raises(ValueError, match="kind must be 'dspark_headroom_study'"):
        H.recorded_study(tmp_path)


def test_floating_outputs_differ_only_beyond_the_tolerance():
    w = torch.tensor([1.0, 2.0, float("nan")])
    assert races._wrong(w * (1 + races.FLOAT_RTOL / 10), w) == (0, 3)
    assert races._wrong(torch.tensor([1.0, 3.0, float("nan")]), w) == (1, 3)
    assert races._wrong(torch.tensor([1, 2]), torch.tensor([1, 2, 3])) == (3, 3)  # a shape change: every element


def test_which_calls_are_device_reads_or_waits():
    from dspark_lab.measure import read_stub as R

    st = R.ReadStub()  # devices=("cuda",): judged on the arguments alone, no device needed
    host = torch.ones(2)
    assert R._to_kind(st, (host, "cuda"), {}) == "upload"  # a pageable upload blocks
    assert R._to_kind(st, (host, torch.float16), {}) is None  # a dtype change moves nothing
    assert R._tensor_kind(st, ([1, 2],), {"device": "cuda:0"}) == "upload"
    assert R._tensor_kind(st, ([1, 2],), {}) is None
    assert R._repeat_kind(st, (host, 2), {}) is None  # an int repeat: the size is known on the host
    assert R._sync_kind(st, (), {}) == "sync" and R._sync_kind(R.ReadStub(devices=("cpu",)), (), {}) is None
    cpu = R.ReadStub(devices=("cpu",))
    assert R._mask_kind(cpu, (host, host > 0), {}) == "mask" and R._mask_kind(cpu, (host, (slice(None), host > 0)), {}) == "mask"
    assert R._mask_kind(cpu, (host, torch.tensor([0])), {}) is None  # an integer index: the shape is known


def test_a_stubbed_step_that_runs_ahead_has_its_window_artefact_read_as_one_term():
    """GPU busy and the rest of opposite signs, each larger than the gap: the stubbed step's profiled
    window is the host's; they become one term, never the reason while another term pulls the gap's way."""
    why = {"gap_ms": -0.42, "terms": {"moved": 0.01, "gpu_work": 3.5, "host_after": 0.0, "rest": -3.93},
           "reason": "rest", "reason_text": "", "new_waits": [], "host_wait_ms": {}}
    fixed = H.with_profiler_term(why, profiled_step_ms=5.6, step_ms=5.22)
    assert set(fixed["terms"]) == {"moved", "host_after", "profiler", "window"}
    assert fixed["reason"] == "profiler" and fixed["terms"]["profiler"] == pytest.approx(-0.38)
    assert sum(fixed["terms"].values()) == pytest.approx(sum(why["terms"].values()))
    near = {**why, "terms": {"moved": -0.3, "gpu_work": 0.1, "host_after": 0.0, "rest": -0.22}}
    assert "window" not in H.with_profiler_term(near, 5.0, 5.0)["terms"]  # small, same-size terms stay apart


# --- the charge less the profiler's stretch of the step ------------------------------------------------
from dspark_lab.results.rules import profiler_stretch as PS  # noqa: E402


def test_the_stretch_is_the_profiled_step_over_the_profiler_free_one_and_never_negative():
    assert PS.stretch_ms(5.3, 5.1) == pytest.approx(0.2)
    assert PS.stretch_ms(5.0, 5.2) == 0.0 and PS.stretch_ms(None, 5.0) is None and PS.stretch_ms(5.0, float("nan")) is None


def test_each_wait_loses_its_share_of_the_stretch_by_its_charge_and_never_goes_below_zero():
    # Two waits charged 0.3 and 0.1 ms of a 0.4 ms step charge; a 0.2 ms stretch: 0.15 and 0.05 off.
    assert PS.less_stretch(0.3, 0.4, 0.2) == pytest.approx(0.15)
    assert PS.less_stretch(0.1, 0.4, 0.2) == pytest.approx(0.05)
    assert PS.less_stretch(0.1, 0.1, 0.5) == 0.0
    assert PS.less_stretch(None, 0.4, 0.2) is None and PS.less_stretch(0.3, 0.4, None) is None


def test_a_record_gets_each_sites_charge_less_the_stretch_and_its_test_against_the_ci():
    rec = {"step_ms": 5.0, "inspect": {"parts": {"profiled_step_ms": 5.2, "gpu_idle_sync_caused_ms": 0.5}},
           "sites": [{"site": "a.py:1 f", "stubbed": True, "charge_ms": 0.5, "headroom_ms": 0.31,
                      "headroom_lo": 0.28, "headroom_hi": 0.33, "agree": False}]}
    out = H.with_profiler_stretch(rec)
    site = out["sites"][0]
    assert out["profiler_stretch_ms"] == pytest.approx(0.2)
    assert site["charge_less_profiler_ms"] == pytest.approx(0.3) and site["agree_less_profiler"] is True
    assert "less the profiler's stretch of the step 0.300 ms, inside the CI" in H.verdict(site)


def _one_wait_counts(path):
    study = H.load_study(path)
    steps = [[s for s in r["sites"] if s["stubbed"] and s.get("charge_ms") is not None] for r in study["headroom"]
             if "error" not in r]
    one = [s[0] for s in steps if len(s) == 1]
    return sum(bool(s["agree"]) for s in one), sum(bool(s["agree_less_profiler"]) for s in one), len(one)


def test_the_docs_counts_of_charges_inside_the_headroom_ci_are_the_recorded_studies():
    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "headroom.md").read_text().split())
    data = Path(__file__).resolve().parents[1] / "data" / "headroom"
    a = _one_wait_counts(data / "h200-headroom-20261204-0405.json")
    b = _one_wait_counts(data / "h200-headroom-20261204-0120.json")
    assert (f"the charge was inside the headroom's CI in {a[0]} of {a[2]} in `data/headroom/h200-headroom-20261204-0405.json` "
            f"and {b[0]} of {b[2]} in `data/headroom/h200-headroom-20261204-0120.json`; less the stretch, in "
            f"{a[1]} of {a[2]} and {b[1]} of {b[2]}") in text
