"""`dspark-lab verify`: each check's verdict rule on synthetic and recorded numbers (CPU), the record,
the command without CUDA; on CUDA, every group's checks pass (the suite reuses verify's checks)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_lab.results.analyses import card as card_results
from dspark_lab.results.analyses import verification as V
from dspark_lab.results.record import verify_record as VR

REPO = Path(__file__).resolve().parents[1]


# --- syncs ------------------------------------------------------------------------------------------
def test_a_sync_check_passes_only_when_counts_lines_and_records_are_exact():
    ok = V.sync_check("x", 2, [10, 12], counted_per_step=2.0, debug_lines=[10, 12], guard_records=4,
                      guard_lines=[10, 12, 10, 12], steps=2)
    assert ok.passed
    assert not V.sync_check("x", 2, [10, 12], counted_per_step=1.0, debug_lines=[10, 12], guard_records=4,
                            guard_lines=[10, 12], steps=2).passed
    twice = V.sync_check("x", 1, [10], counted_per_step=1.0, debug_lines=[10], guard_records=4,
                         guard_lines=[10, 9], steps=2)  # a second record per sync, at the def line
    assert not twice.passed and "4 records for 2 syncs" in twice.detail and "lines [9, 10]" in twice.detail


def test_the_known_sync_lines_are_read_from_the_marker_in_the_source():
    from dspark_lab.verify import known_syncs as KS  # torch is imported; the functions are not run

    src = Path(KS.__file__).read_text().splitlines()
    for c in KS.CASES:
        assert len(c.lines()) == (1 if c.per_step else 0) or c.name == "item_on_two_lines"
        assert all(src[n - 1].rstrip().endswith(KS.MARK) for n in c.lines())
    assert len(KS.CASES) >= 10 and {c.per_step for c in KS.CASES} >= {0, 1, 2, 3}


# --- cost --------------------------------------------------------------------------------------------
def test_the_cost_tolerance_sums_the_two_ci_half_widths_the_profiled_host_time_and_the_sync_calls():
    tol = V.cost_tolerance((1.90, 2.00), (1.84, 1.86), -0.03, 2, 0.012)
    assert tol["loss_ci_half_width_ms"] == pytest.approx(0.05) and tol["charge_ci_half_width_ms"] == pytest.approx(0.01)
    assert tol["tolerance_ms"] == pytest.approx(0.05 + 0.01 + 0.03 + 0.024)


COST = dict(charge_ci=(1.87, 1.91), loss_ms=1.95, loss_ci=(1.93, 1.97), profiler_host_ms=0.02, syncs_per_step=2,
            sync_call_ms=0.01)  # allowed ±0.08


def test_a_charge_within_the_tolerance_passes_and_one_outside_it_fails_both_ways():
    assert V.cost_check("two_syncs", "w", charged_ms=1.89, **COST).passed
    # the pooled chain budget of old: the last step starved, a mean of 1.80
    short = V.cost_check("two_syncs", "w", charged_ms=1.80, **COST)
    assert not short.passed and "+0.150" in short.detail and "±0.080" in short.detail
    assert not V.cost_check("two_syncs", "w", charged_ms=2.05, **COST).passed


def test_a_sync_on_an_idle_gpu_is_charged_nothing_and_the_case_says_what_was_lost():
    c = V.cost_check("idle_gpu_sync", "w", charged_ms=0.0, charge_ci=(0.0, 0.0), loss_ms=0.046, loss_ci=(0.03, 0.05),
                     profiler_host_ms=0.03, syncs_per_step=1, sync_call_ms=0.012)
    assert c.passed and "the sync call's own host time" in c.detail


def test_the_recorded_two_sync_traces_are_charged_within_their_tolerance_since_chains_stay_in_their_step():
    """The H200 traces of two syncs per step (tests/fixtures/known_idle_h200/) read by the rule."""
    import gzip

    from dspark_lab.measure import breakdown, trace

    with gzip.open(REPO / "tests" / "fixtures" / "known_idle_h200" / "two_syncs.json.gz", "rt") as f:
        per = breakdown.per_step(trace.events(json.load(f)))
    charged = per.gpu_idle_sync_caused_ms.iloc[1:]
    # every step charged alike: no step starved by a budget the earlier ones spent
    assert charged.max() - charged.min() < 0.1 * charged.mean()
    assert charged.mean() == pytest.approx(per.host_blocked_ms.iloc[1:].mean(), rel=0.03)


# --- the card -----------------------------------------------------------------------------------------
def _card(host_us: dict) -> dict:
    cells = []
    for (src, size, q), us in host_us.items():
        cells.append({"direction": card_results.SOURCES[src][0], "source": src, "size_bytes": size, "queued_ms": q,
                      "host_us": [us] * 5, "copy_gpu_us": 5.0 if size < 1 << 20 else 3000.0})
    return {"kind": card_results.CARD_KIND, "schema": card_results.CARD_SCHEMA, "fingerprint": {"gpu": "G"},
            "queued_ms": [0.0, 10.0], "cells": cells}


GOOD = {("pageable_to_nb", 4, 0.0): 8.0, ("pageable_to_nb", 4, 10.0): 9.0,
        ("pageable_to_nb", 64 << 20, 0.0): 4000.0, ("pageable_to_nb", 64 << 20, 10.0): 14000.0,
        ("pinned_to_nb", 64 << 20, 0.0): 10.0, ("pinned_to_nb", 64 << 20, 10.0): 11.0,
        ("pinned_to_nb", 4, 0.0): 7.0, ("pinned_to_nb", 4, 10.0): 7.0,
        ("tensor_device", 4, 0.0): 20.0, ("tensor_device", 4, 10.0): 10020.0}


def test_the_card_checks_pass_on_a_card_whose_cells_have_their_known_answers():
    checks = V.card_checks(_card(GOOD))
    assert len(checks) == len(V.KNOWN_CELLS) and all(c.passed for c in checks), [c.line() for c in checks]


def test_a_pinned_copy_that_waits_fails_its_card_check_naming_why_it_should_not():
    bad = dict(GOOD)
    bad[("pinned_to_nb", 64 << 20, 10.0)] = 10500.0
    failed = [c for c in V.card_checks(_card(bad)) if not c.passed]
    assert [c.name for c in failed] == ["pinned_to_nb 64 MB queued"] and "pinned and non-blocking" in failed[0].detail


# --- hazards, katas, clocks -------------------------------------------------------------------------------
def test_a_race_must_reproduce_and_a_fix_must_give_zero():
    assert V.hazard_check("pinned_reused", 199, 200, must_race=True).passed
    assert not V.hazard_check("pinned_reused", 0, 200, must_race=True).passed
    assert V.hazard_check("pinned_fresh", 0, 200, must_race=False).passed
    assert not V.hazard_check("pinned_fresh", 1, 200, must_race=False).passed


def test_the_hazard_forms_measured_are_the_documented_ones():
    from dspark_lab.results.analyses.hazards import FORMS

    src = (REPO / "dspark_lab" / "verify" / "checks.py").read_text()
    assert "hazards.FORM_FUNCTIONS" in src and "FORMS[name][2]" in src and len(FORMS) >= 7


def test_a_kata_passes_on_output_and_guard_and_says_when_this_machine_does_not_show_its_speed():
    res = {"output": (True, "equals"), "guard": (True, "no host sync"), "faster": (False, "10.5% slower")}
    c = V.kata_check("pageable_copy", res, "no slower than the pitfall")
    assert c.passed and "does not show the speed criterion" in c.detail and "10.5% slower" in c.detail
    res["guard"] = (False, "host sync at x.py:3")
    assert not V.kata_check("pageable_copy", res, "no slower").passed
    res["guard"], res["races"] = (True, "no host sync"), (False, "races: 7 output(s) differ")
    raced = V.kata_check("pageable_copy", res, "no slower")
    assert not raced.passed and "races: 7 output(s) differ" in raced.detail
    assert V.kata_check("k", {"output": (True, ""), "guard": (None, "needs CUDA"), "faster": (None, "")}, "").passed is None


def test_the_clocks_agree_when_the_host_time_is_the_events_time_plus_a_launch_and_a_sync():
    assert V.clock_check(5.0, [4.63] * 9, [4.67] * 9).passed  # a sleep 7% short of the asked is reported only
    assert not V.clock_check(5.0, [4.63] * 9, [5.2] * 9).passed
    assert not V.clock_check(5.0, [4.63] * 9, [4.0] * 9).passed


# --- the record and the command -------------------------------------------------------------------------------
def _record(passed=(True, True, False)) -> dict:
    checks = [VR.Check("cost", f"c{i}", p, "d") for i, p in enumerate(passed)] + [VR.Check("clocks", "all", None, "n/a")]
    return VR.record(checks, {"gpu": "NVIDIA H200", "driver": "580"}, "2026-12-02T01:00:00+00:00", 42.0)


def test_the_summary_line_counts_the_checks_made_and_names_the_failures():
    line = VR.summary_line(_record())
    assert line.startswith("verified on this GPU: 2 of 3 checks (NVIDIA H200, driver 580, 2026-12-02)")
    assert "failed: cost/c2" in line and "1 could not be checked here" in line
    assert VR.summary_line(None).startswith("not verified on this GPU")


def test_a_record_round_trips_and_the_newest_of_this_gpu_is_found(tmp_path):
    (tmp_path / "machines").mkdir()
    old, new = _record(), _record((True, True, True))
    new["recorded"] = "2026-12-03T00:00:00+00:00"
    VR.save(old, tmp_path / "machines" / "a.json")
    VR.save(new, tmp_path / "machines" / "b.json")
    got = VR.newest_for({"gpu": "NVIDIA H200", "driver": "580"}, tmp_path)
    assert got["recorded"].startswith("2026-12-03") and VR.counts(got)["failed"] == 0
    assert VR.newest_for({"gpu": "NVIDIA A100", "driver": "580"}, tmp_path) is None


@pytest.mark.parametrize("field,value,message", [("kind", "x", "field 'kind'"), ("checks", [], "field 'checks'"),
                                                 ("checks", [{"group": "nope", "name": "a", "passed": True, "detail": ""}],
                                                  "group must be one of")])
def test_a_damaged_record_is_refused_naming_the_field(field, value, message):
    rec = _record()
    rec[field] = value
    with pytest.raises(ValueError, match=message):
        VR.validate(rec)


def test_the_recorded_h200_verify_record_has_thirty_checks_or_more_all_passing():
    recs = [r for r in VR.recorded(REPO / "data") if "H200" in r["fingerprint"]["gpu"]]
    assert recs, "an H200 verify record is committed under data/machines/"
    newest = max(recs, key=lambda r: r["recorded"])
    n = VR.counts(newest)
    assert n["checked"] >= 30 and n["failed"] == 0 and n["not_checked"] == 0, VR.summary_line(newest)


def test_verify_without_cuda_prints_a_line_per_group_and_exits_six(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: verify would measure")
    env = {**os.environ, "PYTHONPATH": str(REPO), "DSPARK_DATA": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "dspark_lab.cli", "verify"], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert p.returncode == 6, p.stderr
    lines = p.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines] == [f"[n/a ] {g}/all" for g in VR.GROUPS]
    assert "nothing saved" in p.stderr and not (tmp_path / "machines").exists()


# --- on CUDA: the suite reuses verify's checks ------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("group", [g for g in VR.GROUPS if g != "cost"])
def test_cuda_every_check_of_the_group_passes(group):
    from dspark_lab.verify.checks import GROUP_RUNNERS

    checks = GROUP_RUNNERS[group]()
    assert checks and all(c.passed is not False for c in checks), "\n".join(c.line() for c in checks if not c.passed)


def test_doctor_says_how_much_of_the_kit_was_verified_on_this_gpu(tmp_path, monkeypatch, capsys):
    from dspark_lab.cli import main as cli
    from dspark_lab.measure import probe

    (tmp_path / "machines").mkdir()
    VR.save(_record(), tmp_path / "machines" / "h200-verify-20261202.json")
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path))
    monkeypatch.setattr(probe, "fingerprint", lambda: {"gpu": "NVIDIA H200", "driver": "580"})
    assert cli.main(["doctor", "--no-probe"]) == 0
    out = capsys.readouterr().out
    assert "verified on this GPU: 2 of 3 checks" in out and "failed: cost/c2" in out
    monkeypatch.setattr(probe, "fingerprint", lambda: {"gpu": "NVIDIA L4", "driver": "580"})
    assert cli.main(["doctor", "--no-probe"]) == 0
    assert "not verified on this GPU" in capsys.readouterr().out


def test_the_charge_over_captures_is_their_mean_with_a_ci_as_wide_as_their_spread():
    """Two captures of one step a few steps each, 0.16 ms apart (as `.item()`'s step on an H200): the
    CI holds both; one capture: the bootstrap CI of its steps."""
    steady = [[3.05, 3.06, 3.07, 3.06], [3.21, 3.22, 3.23, 3.22]]
    mean, lo, hi = V.charge_over_captures(steady)
    assert mean == pytest.approx(3.14) and lo < 3.06 and hi > 3.22
    one, lo1, hi1 = V.charge_over_captures(steady[:1])
    assert one == pytest.approx(3.06) and 3.05 <= lo1 < hi1 <= 3.07
    with pytest.raises(ValueError, match="per_capture"):
        V.charge_over_captures([[]])
