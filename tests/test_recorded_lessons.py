"""Recorded mode that teaches: every run says its kind, views pick the runs their lesson
needs and say what they picked. On the committed H200 runs (a fixed input) and on synthetic headers."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from dspark_lab.results import Runs
from dspark_lab.results.facts import run_kinds
from dspark_lab.results.query import kinds
from dspark_lab.results.viewmodels import picks
from dspark_lab.results.viewmodels.backend import ALL_RUNS, RecordedBackend
from dspark_lab.run.sweep import PRESETS
from dspark_lab.views import figures, report
from helpers import COMMITTED_DATA as DATA


@pytest.fixture(scope="module")
def runs():
    return Runs.load(DATA)


def test_preset_grids_match_the_sweep_presets():
    for name, key in (("default", "default_sweep"), ("quick", "quick_sweep")):
        spec = PRESETS[name]
        assert kinds.PRESET_GRIDS[key] == (spec.ep_sizes, spec.batch_sizes, spec.gammas)


@pytest.mark.parametrize("header, rows, kind", [
    ({"run_kind": "live"}, None, "live"),
    ({"ep_mode": "predicted"}, None, "ep_predicted"),
    ({"ep_mode": "real", "world_size": 2}, None, "ep_real"),
    ({"ep_mode": "predicate_only", "world_size": 1}, None, "ep_one_gpu"),
    ({"sweep": {"stage": "gpu_sync_cost", "points": [{}, {}]}}, None, "sync_cost"),
    ({"sweep": {"preset": "sglang_profile", "ep_size": [1, 8], "batch_size": [8], "gamma": [4]}}, None, "preset_check"),
    ({"sweep": {"ep_size": [1, 8], "batch_size": [1, 8, 32, 128], "gamma": [2, 4, 8]}}, None, "default_sweep"),
    ({"sweep": {"ep_size": [1, 8], "batch_size": [1, 32], "gamma": [4]}}, None, "quick_sweep"),
    ({"sweep": {"ep_size": [2], "batch_size": [8, 16], "gamma": [4]}}, None, "sweep"),
    ({"adaptive": {}, "sweep": {"ep_size": [8], "batch_size": [8], "gamma": [4]}}, None, "reference"),
    ({"sweep": {"ep_size": [8], "batch_size": [8], "gamma": [4]}}, None, "single_point"),
    ({}, pd.DataFrame({"ep_mode": ["real"], "ep_size": [2], "batch_size": [8], "gamma": [4]}), "ep_real"),
])
def test_a_run_kind_is_derived_from_its_recorded_shape(header, rows, kind):
    assert kinds.derive_kind(header, rows) == kind


def test_an_unknown_kind_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="run_kind 'nightly' is not known; allowed: default_sweep"):
        run_kinds.check_kind("nightly")


def test_every_committed_label_is_unique_names_its_kind_and_no_run_id(runs):
    labels = runs.labels()
    assert len(set(labels.values())) == len(labels)
    for rid, lab in labels.items():
        assert runs.kind_name(rid) in lab, lab
        assert rid not in lab and "[" not in lab
    assert labels["20261130-171206-3e7c5c"] == "H200 · default sweep · 11-30 17:12"
    assert labels["20261130-174726-ad724d"] == "H200 ×2 · EP real a2a_fixed · 11-30 17:47"


def test_an_ep_recordings_files_are_one_recording_with_parts(runs):
    info = runs.run_info()
    late = info[(info["created"] >= "2026-11-30T17:46") & (info["created"] < "2026-12-01")]
    ep = late[late["kind"].str.startswith("EP")]
    assert len(ep) == 5 and len({runs.recording_of(r) for r in ep["run_id"]}) == 1
    assert set(ep["part"]) == {"allreduce", "a2a_fixed", "a2a_dynamic", "one-GPU twin", "prediction"}
    early = info[(info["created"] < "2026-11-30T17:00") & info["kind"].str.startswith("EP")]
    assert len(early) == 5 and {runs.recording_of(r) for r in early["run_id"]}.isdisjoint(
        {runs.recording_of(r) for r in ep["run_id"]})


def test_the_run_table_says_the_kind_and_never_none_for_the_grid(runs):
    t = runs.table()
    assert "kind" in t.columns and (t["kind"] != "").all()
    assert not t["sweep"].str.contains("None").any(), t[t["sweep"].str.contains("None")]


def test_the_recorded_panel_opens_on_the_latest_default_sweep_and_moves_over_its_points(runs):
    b = RecordedBackend(runs)
    d = b.defaults()
    assert runs.kind_of(d["run"]) == "default_sweep" and d["run"] == runs.runs_of_kind("default_sweep")[0]
    o = b.options()
    assert (o["ep_size"], o["batch_size"], o["gamma"]) == ([1, 8], [1, 8, 32, 128], [2, 4, 8])
    assert o["run"][1][1] == d["run"]  # listed first after "side by side"
    seen = set()
    for ep in o["ep_size"]:
        for batch in o["batch_size"]:
            for gamma in o["gamma"]:
                got = b.get({**d, "ep_size": ep, "batch_size": batch, "gamma": gamma})
                r0 = got.rows.iloc[0]
                assert (r0.ep_size, r0.batch_size, r0.gamma) == (ep, batch, gamma)  # exactly the asked point
                assert "holds no point" not in got.note
                seen.add(r0.point_id)
    assert len(seen) == 24


def test_a_one_point_run_offers_its_one_value_and_a_missing_setting_is_a_sentence(runs):
    b = RecordedBackend(runs)
    ref = runs.runs_of_kind("reference")[0]
    o = b.options(ref)
    assert (o["ep_size"], o["batch_size"], o["gamma"]) == ([8], [8], [4])
    got = b.get({**b.defaults(), "run": ref, "ep_size": 1, "batch_size": 32})
    assert got.note.endswith(f"({runs.label_of(ref)} holds no point at ep size 1, batch size 32; "
                             "this is the nearest it holds)")


def test_side_by_side_takes_only_runs_holding_the_point_and_says_which_it_left_out(runs):
    b = RecordedBackend(runs)
    b.side_by_side = 6  # the four default sweeps, the quick sweep and a reference run
    pool = b.side_by_side_runs()
    got = b.get({**b.defaults(), "run": ALL_RUNS, "ep_size": 1, "batch_size": 8, "gamma": 4})
    hold = runs.holding(pool, ep_size=1, batch_size=8, gamma=4, workload="sglang_profile")
    assert 0 < len(hold) < len(pool)
    assert set(got.rows.run_id.astype(str)) == set(hold)
    assert f"side by side: {len(hold)} of {len(pool)} runs; left out, without a point at EP 1 · batch 8 · gamma 4:" in got.note
    for r in set(pool) - set(hold):
        assert runs.label_of(r) in got.note


def test_picks_name_the_point_and_the_kind(runs):
    ep1 = picks.ep1_point(runs)
    assert set(ep1.rows.ep_size) == {1} and ep1.kind == "default_sweep"
    real = picks.real_ep(runs)
    assert real.dispatch == "a2a_fixed" and set(real.rows.dispatch) == {"a2a_fixed", "allreduce", "a2a_dynamic"}
    assert real.rows.run_id.nunique() == 3  # the newest recording's three real-rank files
    stand = picks.stand_in_sweep(runs)
    assert stand.kind == "default_sweep" and runs.grid_size(stand.run_ids[0]) == 24


def test_picks_without_the_data_they_need_say_so():
    empty = Runs(pd.DataFrame({"run_id": ["a"], "ep_size": [8], "batch_size": [8], "gamma": [4], "workload": ["w"],
                               "model": ["m"], "strategy": ["device_direct"], "status": ["ok"], "step_ms": [1.0],
                               "point_id": ["p"], "trial": [0]}), None, [])
    assert picks.ep1_point(empty).empty and "no EP-1 point recorded" in picks.ep1_point(empty).note
    assert picks.real_ep(empty).empty and "no real-EP run recorded" in picks.real_ep(empty).note


def test_the_report_features_the_headline_run_and_draws_every_compared_run(runs):
    text = report.build_html(runs)
    head = runs.headline().entries[0]
    chosen = runs.default_selection()
    assert chosen[0] == head["run_id"]
    first_point = text.index("<h2>" + head["point"].split(" · sglang")[0])
    comparison = text[first_point:text.index("Step time by strategy", first_point) + 20000]
    for rid in chosen:
        assert runs.label_of(rid) in comparison, runs.label_of(rid)
    sweeps = text[text.index("<h2>Sweeps</h2>"):]
    assert all(runs.label_of(r) in sweeps for r in runs.grid_runs())


def test_the_sweep_figure_draws_only_runs_with_lines_and_at_most_five_per_facet(runs):
    ok = runs.ok[runs.ok.run_id.astype(str).isin(runs.grid_runs() + runs.runs_of_kind("reference")[:2])]
    fig = figures.sweep(ok, workload="sglang_profile")
    per_facet: dict = {}
    for tr in fig.data:
        per_facet.setdefault((tr.xaxis, tr.yaxis), set()).add(tr.name)
    assert per_facet and max(len(v) for v in per_facet.values()) <= 5
    assert "2 run(s) with one batch size per EP not drawn" in fig.layout.annotations[-1].text
    assert all(a.textangle in (None, 0) for a in fig.layout.annotations)
    assert re.search(r"gamma 4 \(of 2, 4, 8\)", fig.layout.title.subtitle.text)


def test_a_slide_has_text_of_at_least_18_px_and_its_legend_clear_of_the_edge(runs):
    from dspark_lab.views.figures.render import SLIDE_TEXT_PX, slide_figure

    pt = runs.rows[runs.rows.run_id.astype(str).isin(runs.default_selection())]
    pt = pt[pt.point_id == pt.point_id.iloc[0]]
    fig = slide_figure(figures.strategy_comparison(pt), "slide")
    lay = fig.layout
    assert SLIDE_TEXT_PX >= 18 and (lay.width, lay.height) == (1600, 900)
    assert lay.font.size >= 18 and lay.legend.font.size >= 18 and lay.title.font.size > 18
    assert lay.title.subtitle.font.size >= 18 and lay.xaxis.tickfont.size >= 18 and lay.yaxis.title.font.size >= 18
    assert all(a.font.size >= 18 for a in lay.annotations)
    assert lay.legend.x * 1600 >= 16  # not flush with the left edge


def test_run_colours_stay_distinct_past_ten_runs_and_bar_labels_sit_at_the_foot(runs):
    from dspark_lab.views.figures.style import run_color

    assert len({run_color(i).lower() for i in range(24)}) == 24
    pt = runs.rows[runs.rows.run_id.astype(str).isin(runs.default_selection())]
    fig = figures.strategy_comparison(pt[pt.point_id == pt.point_id.iloc[0]])
    bars = [tr for tr in fig.data if tr.type == "bar"]
    assert bars and all(tr.insidetextanchor == "start" and tr.textposition == "inside" for tr in bars)
    assert len({tr.marker.color for tr in bars}) == len(bars)


def test_a_profiled_pass_far_longer_than_its_step_is_flagged_in_the_rank_figure(runs):
    from dspark_lab.results.analyses.profile_checks import overrun_profiles
    from dspark_lab.views.figures import ranks

    allreduce = [r for r in runs.runs_of_kind("ep_real") if runs.part_of(r) == "allreduce"][0]
    rows = runs.ok[runs.ok.run_id.astype(str) == allreduce]
    over = overrun_profiles(rows)
    # The recorded case: rank 0's first rank case, profiled at ~45 ms against a ~8.6 ms step.
    assert list(zip(over["rank_case"], over["rank"])) == [("device_direct,device_direct", 0)]
    fig = ranks.per_rank_breakdown(rows, "allreduce")
    assert "profiled pass not this step's (rank 0 in device_direct,device_direct" in fig.layout.annotations[-1].text
    assert any("⚠" in str(t) for t in fig.data[0].x[1])
    quiet = runs.ok[runs.ok.run_id.astype(str) == runs.runs_of_kind("default_sweep")[0]]
    assert overrun_profiles(quiet).empty  # one-process sweeps: profiled within 2x everywhere


def test_rank_case_labels_read_as_words():
    from dspark_lab.views.figures.ranks import case_label

    assert case_label("device_direct,device_direct") == "all device_direct"
    assert case_label("device_direct,non_blocking") == "r0 device_direct<br>r1 non_blocking"
    assert case_label("non_blocking,non_blocking delay=1,0") == "all non_blocking<br>+1 ms on r0"


def test_the_step_model_moves_the_penalty_with_the_exposed_host_work():
    from dspark_lab.results.analyses.step_model import StepModel

    m = StepModel.from_costs(1600, 1000, 1200, target_verify_ms=4.8, launch_ms=0.8, draft_gpu_ms=0.3)
    assert m.device_direct_ms() == pytest.approx(1.6 + 4.8 + 1.2 + 0.8)  # config.py's 8.4 ms
    assert m.sync_free_ms() == pytest.approx(max(4.6, 5.1))
    m8 = m.scaled(1.0, verify_ms=8.0)  # GPU-bound enough that the host still runs ahead sync-free
    assert m8.scaled(1.5).penalty_ms() == pytest.approx(m8.penalty_ms() + 0.5 * (1.6 + 1.2))  # follows exposed host work
    host_bound = m.scaled(3.0, verify_ms=0.5)
    assert host_bound.penalty_ms() == pytest.approx(0.0)  # the GPU idles anyway
    gpu_bound = m.scaled(0.1, verify_ms=10.0)
    assert gpu_bound.penalty_ms() / gpu_bound.sync_free_ms() < 0.1


def test_the_step_model_is_checked_against_the_recorded_sync_cost_run(runs):
    import dataclasses

    from dspark_lab.config import WORKLOAD_PRESETS
    from dspark_lab.results.analyses.step_model import check

    pts = runs.ok[runs.ok.run_id.astype(str) == runs.runs_of_kind("sync_cost")[0]]
    t = check(pts, {k: dataclasses.asdict(v) for k, v in WORKLOAD_PRESETS.items()})
    assert set(t.workload) == {"sglang_profile", "gpu_bound", "host_bound"}
    sp = t[t.workload == "sglang_profile"].iloc[0]
    # device_direct within 10% of the measured step on the preset it was calibrated for
    assert abs(sp["model device_direct ms"] / sp["measured device_direct ms"] - 1) < 0.10


def test_the_readme_table_of_recorded_runs_by_kind_is_the_data_s(runs):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert kinds.kind_table_markdown(runs) in readme, "README's kinds table is stale: regenerate it"
    for shot in re.findall(r"\((docs/screenshots/[^)]+\.png)\)", readme):
        assert (Path(__file__).resolve().parents[1] / shot).stat().st_size > 10_000, shot
