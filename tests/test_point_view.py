"""results.viewmodels.point_view: one point's trials, verdicts, labels, note and timeline segments, derived once
and drawn the same by every figure (synthetic rows: the numbers are inputs)."""
from __future__ import annotations

import pandas as pd
import pytest

from dspark_lab.results import Runs
from dspark_lab.results.viewmodels.point_view import check_one_point, kept_trials, point_view, trials_note
from dspark_lab.views import figures
from test_figures import synthetic_runs


def one_point(**kw):
    rows, tl, headers = synthetic_runs(runs=(("run-a", "SYNTH-GPU-A", "1.0"),), eps=(2,), batches=(8,), gammas=(4,), **kw)
    return rows, tl, headers


def test_kept_trials_leave_out_the_recorded_verdict_and_the_note_counts_them():
    rows, tl, _ = one_point()
    rows["disturbed"] = (rows.strategy == "device_direct") & (rows.trial == 0)
    rows.loc[rows.strategy == "non_blocking", ["status", "error"]] = ["failed", "CUDA error: out of memory " + "x" * 200]
    view = point_view(rows, tl)
    assert len(view.ok) == len(rows) - 3 and len(view.failed) == 3
    assert view.left_out == 1 and len(view.kept) == len(view.ok) - 1
    assert not ((view.kept.strategy == "device_direct") & (view.kept.trial == 0)).any()
    assert view.note.startswith("1 disturbed trials left out; failed: non_blocking: CUDA error: out of memory")
    assert len(view.note.split("non_blocking: ")[1]) == 120  # the error is cut
    assert view.point == "EP 2 (one GPU, predicate only) · batch 8 · gamma 4 · sglang_profile"
    assert "SYNTH-GPU-A" in view.fingerprint and "2026-01-01" in view.fingerprint
    med = view.per_strategy(["step_ms", "not_recorded_ms"]).set_index("strategy")
    dd = rows[(rows.strategy == "device_direct") & (rows.trial > 0)].step_ms.median()
    assert med.loc["device_direct", "step_ms"] == pytest.approx(dd)
    assert med["not_recorded_ms"].isna().all() and "non_blocking" not in med.index


def test_rows_without_a_verdict_are_judged_by_the_rule():
    rows, _, _ = one_point(trials=5)
    far = (rows.strategy == "on_demand") & (rows.trial == 2)
    rows.loc[far, "step_ms"] += 50.0  # far beyond the rule's bound (a tenth of the step)
    assert "disturbed" not in rows
    kept = kept_trials(rows)
    assert len(kept) == len(rows) - 1 and not ((kept.strategy == "on_demand") & (kept.trial == 2)).any()
    assert trials_note(rows) == "1 disturbed trials left out"


def test_each_run_keeps_the_segments_of_its_own_point():
    rows, tl, headers = synthetic_runs()
    runs = Runs(rows, tl, headers)
    a = runs.rows[(runs.rows.run_id == "run-a") & (runs.rows.point_id == "p2-8-4")]
    b = runs.rows[(runs.rows.run_id == "run-b") & (runs.rows.point_id == "p2-32-4")]
    view = point_view(pd.concat([a, b]), tl)
    assert view.run_ids == ("run-a", "run-b") and view.several_runs
    assert view.labels == {"run-a": f"SYNTH-GPU-A · {runs.kind_name('run-a')} · 01-01 10:00",
                           "run-b": f"SYNTH-GPU-B · {runs.kind_name('run-b')} · 01-02 10:00"}
    pairs = set(zip(view.segments.run_id, view.segments.point_id))
    assert pairs == {("run-a", "p2-8-4"), ("run-b", "p2-32-4")}
    want = len(tl[(tl.run_id == "run-a") & (tl.point_id == "p2-8-4")]) + len(tl[(tl.run_id == "run-b") & (tl.point_id == "p2-32-4")])
    assert len(view.segments) == want
    fig = figures.timeline(view)  # one lane set per run and strategy, none of the other points'
    lanes = fig.layout.yaxis.categoryarray
    assert len(lanes) == 3 * 2 * rows.strategy.nunique()
    assert all(lane.startswith(("SYNTH-GPU-A", "SYNTH-GPU-B")) for lane in lanes)


def test_two_points_of_one_run_are_refused_with_the_viewer_named():
    rows, _, _ = synthetic_runs()
    with pytest.raises(ValueError, match="the panel shows one config point per run.*nearest"):
        point_view(rows[rows.run_id == "run-a"], what="the panel")
    check_one_point(rows[rows.point_id == "p1-1-2"], "x")  # one point per run: fine
    check_one_point(rows.iloc[0:0], "x")


@pytest.mark.parametrize("make", ["sync_counts", "step_breakdown", "sync_cost", "strategy_comparison"])
def test_a_figure_from_the_view_is_the_figure_from_the_rows(make):
    rows, tl, headers = synthetic_runs()
    pt = Runs(rows, tl, headers).nearest(ep_size=2, batch_size=8, gamma=4)
    fig = getattr(figures, make)
    assert fig(point_view(pt)).to_plotly_json() == fig(pt).to_plotly_json()


def test_the_timeline_from_the_view_is_the_timeline_from_segments_and_rows():
    rows, tl, headers = synthetic_runs()
    pt = rows[(rows.run_id == "run-a") & (rows.point_id == "p2-8-4")]
    seg = tl[(tl.run_id == "run-a") & (tl.point_id == "p2-8-4")]
    by_rows = figures.timeline(seg, pt, strategies_shown=["device_direct"])
    assert figures.timeline(point_view(pt, seg), strategies_shown=["device_direct"]).to_plotly_json() == by_rows.to_plotly_json()
    assert by_rows.layout.title.subtitle.text.endswith("EP 2 (one GPU, predicate only) · batch 8 · gamma 4 · sglang_profile")
    with pytest.raises(ValueError, match="pass point_id="):
        figures.timeline(tl[tl.run_id == "run-a"], rows)
