"""The widget panel: controls drive the FigureWidgets to the right recorded point, quickly; live
requests coalesce (latest wins); a failed measurement shows its message in the panel."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pandas as pd
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")

from dspark_lab import config, strategies
from dspark_lab.results import Runs
from dspark_lab.results.viewmodels.backend import ALL_RUNS, RecordedBackend
from dspark_lab.results.query.runs import ok_rows
from dspark_lab.run import live
from dspark_lab.views import figures, panel
from dspark_lab.results.record import schema  # noqa: E402
from dspark_lab.config import LabConfig  # noqa: E402
from dspark_lab.results.rules.stats import median_ci  # noqa: E402
from helpers import synthetic_runs  # noqa: E402


@pytest.fixture(scope="module")
def recorded_panel(data):
    rows, tl, headers, _ = data
    return panel.Panel(RecordedBackend(Runs(rows, tl, headers)))


def expected_medians(rows, run_id, ep, bs, g, workload):
    sel = ok_rows(rows)
    sel = sel[(sel.run_id == run_id) & (sel.ep_size == ep) & (sel.batch_size == bs) & (sel.gamma == g)
              & (sel.workload == workload)]
    return {s: median_ci(grp.step_ms.tolist())[0] for s, grp in sel.groupby("strategy")}, sel


def test_controls_move_figures_to_the_recorded_point(recorded_panel, data):
    rows = data[0]
    p = recorded_panel
    s = p.settings()
    run = s["run"]
    opts = p.backend.options()
    mine = rows[(rows.run_id == run) & (rows.workload == s["workload"]) & (rows.ep_size == s["ep_size"])]
    batches = sorted(set(mine.batch_size))
    assert len(batches) >= 2, "need two recorded batch sizes to move the slider"
    before = list(p.figs["comparison"].data[0].y)
    target = [b for b in batches if b != s["batch_size"]][0]
    gamma = sorted(set(mine[mine.batch_size == target].gamma))[0]
    p.set(batch_size=target, gamma=gamma)
    want, sel = expected_medians(rows, run, s["ep_size"], target, gamma, s["workload"])
    tr = p.figs["comparison"].data[0]
    assert list(tr.y) != before
    assert dict(zip(tr.x, tr.y)) == pytest.approx(want)
    # Every panel figure shows this point: its syncs, its breakdown, its label and fingerprint.
    syncs = {t.name: t for t in p.figs["syncs"].data}["stream sync"]
    assert dict(zip(syncs.x, syncs.y)) == pytest.approx(sel.groupby("strategy").stream_syncs_per_step.median().to_dict())
    blocked = {t.name: t for t in p.figs["breakdown"].data}[figures.PART_NAMES["host_blocked_ms"]]
    assert dict(zip(blocked.x, blocked.y)) == pytest.approx(sel.groupby("strategy").host_blocked_ms.median().to_dict())
    r0 = sel.iloc[0]
    assert f"batch {target}" in p.status.value and r0.point_id in p.status.value
    sub = p.figs["comparison"].layout.meta["dspark_subtitle"]  # drawn as the title's second line
    assert sub.split("<br>")[0] in p.figs["comparison"].layout.title.text
    assert str(r0.gpu) in sub and str(r0.recorded_at)[:10] in sub
    assert p.error.value == ""
    assert "RECORDED" in p.mode_html.value
    assert set(opts) >= set(panel.CONTROLS)


def test_a_control_change_redraws_once_and_the_same_value_not_at_all(recorded_panel):
    p = recorded_panel
    opts = list(p.controls["batch_size"].options)
    start = p.controls["batch_size"].value
    other = next(v for v in opts if v != start)
    before = p.redraws
    p.controls["batch_size"].value = other
    assert p.redraws == before + 1
    assert f"batch {other}" in p.status.value or "nearest recorded" in p.status.value
    p.controls["batch_size"].value = other  # unchanged: ipywidgets sends no event, nothing redraws
    assert p.redraws == before + 1
    p.set(batch_size=start, gamma=p.controls["gamma"].value)  # several controls: one redraw
    assert p.redraws == before + 2 and p.last_redraw_s is not None


def test_strategy_control_picks_the_timeline(recorded_panel):
    p = recorded_panel
    lanes = p.figs["timeline"].layout.yaxis.categoryarray
    assert any("persistent_fill" in lane for lane in lanes)  # the default: the last fix vs the baseline
    p.controls["strategy"].value = "on_demand"
    lanes = p.figs["timeline"].layout.yaxis.categoryarray
    assert any("on_demand" in lane for lane in lanes) and any("device_direct" in lane for lane in lanes)
    assert not any("persistent_fill" in lane or "non_blocking" in lane for lane in lanes)
    comp = p.figs["comparison"].data[0]
    widths = dict(zip(comp.x, comp.marker.line.width))
    assert widths["on_demand"] > 0 and widths["device_direct"] == 0


def test_nearest_recorded_point_is_named():
    rows, tl, headers = synthetic_runs()
    b = RecordedBackend(Runs(rows, tl, headers))
    d = b.get({"ep_size": 2, "batch_size": 10, "gamma": 4, "workload": "sglang_profile", "run": "run-a"})
    assert set(d.rows.batch_size) == {8} and "holds no point at batch size 10; this is the nearest it holds" in d.note
    d = b.get({"ep_size": 2, "batch_size": 8, "gamma": 4, "workload": "sglang_profile", "run": ALL_RUNS})
    assert set(d.rows.run_id) == {"run-a", "run-b"}


class Boom:
    mode = "recorded"
    capabilities = frozenset()

    def options(self):
        return panel._ErrorBackend(None).options()

    def defaults(self):
        return panel._ErrorBackend(None).defaults()

    def describe(self):
        return "test backend"

    def get(self, settings, on_progress=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def close(self):
        pass


def test_error_shows_in_panel_not_a_traceback():
    p = panel.Panel(Boom())
    assert "illegal memory access" in p.error.value and "RuntimeError" in p.error.value
    assert "Traceback" not in p.error.value


def test_all_failed_point_shows_its_error():
    rows, tl, headers = synthetic_runs(runs=(("run-a", "SYNTH-GPU-A", "1.0"),), eps=(2,), batches=(8,), gammas=(4,))
    rows["status"], rows["error"] = "failed", "OutOfMemoryError: CUDA out of memory"
    p = panel.Panel(RecordedBackend(Runs(rows, tl, headers)))
    assert "out of memory" in p.error.value


def test_no_recorded_data_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path))
    monkeypatch.setenv(config.MODE_ENV, "recorded")
    (tmp_path / "runs").mkdir()
    p = panel.make_panel()
    assert "no recorded rows" in p.error.value


# -- live mode --------------------------------------------------------------------------------------

def fake_measure(fail=False, gate=None):
    """A measure_point stand-in over synthetic rows; `gate()` (if given) is called as each
    measurement starts, so a test can hold a measurement while it moves the controls."""
    rows, tl, _ = synthetic_runs(runs=(("x", "FAKE", "0"),), eps=(1, 2), batches=(1, 8, 32), gammas=(2, 4))
    calls = []

    def measure(cfg, strategies=None, *, on_progress=None, on_trial=None):
        calls.append((cfg.ep_size, cfg.batch_size, cfg.gamma))
        if gate is not None:
            gate()
        for i in range(3):
            if on_progress:
                on_progress(f"trial {i + 1}/3", (i + 1) / 3)
        if fail:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        sel = rows[(rows.ep_size == cfg.ep_size) & (rows.batch_size == cfg.batch_size) & (rows.gamma == cfg.gamma)]
        t = tl[tl.point_id == sel.point_id.iloc[0]]
        recs = sel.drop(columns=list(schema.FINGERPRINT_COLUMNS)).to_dict("records")
        tls = [{"kind": "timeline", "point_id": sel.point_id.iloc[0], "strategy": s,
                "segments": g[["lane", "part", "start_ms", "end_ms", "label"]].values.tolist()}
               for s, g in t.groupby("strategy")]
        return SimpleNamespace(rows=recs, timelines=tls)

    return measure, calls, rows


FP = {"gpu": "FAKE-GPU", "driver": "0.0", "cuda": "0", "torch": "0"}


def test_live_drag_coalesces_to_the_latest():
    """A drag while a measurement runs: exactly the running one and the latest value are measured."""
    running, release = threading.Event(), threading.Event()
    release.set()  # the first measurements (the panel's first draw) run through

    def gate():
        running.set()
        assert release.wait(10), "the test never released the measurement"

    measure, calls, rows = fake_measure(gate=gate)
    p = panel.Panel(live.LiveBackend(LabConfig(batch_size=1, gamma=2, ep_size=2), measure=measure, fingerprint=FP),
                    debounce_s=0.01)
    assert "LIVE" in p.mode_html.value and "FAKE-GPU" in p.mode_html.value
    p.set(ep_size=2, batch_size=1, gamma=2)
    assert p._worker.wait(10)
    n0 = len(calls)
    running.clear()
    release.clear()
    p.controls["batch_size"].value = 2  # the drag starts: this one is measured ...
    assert running.wait(10)  # ... and held while the slider moves on
    for v in (4, 8, 16, 32, 8, 32):
        p.controls["batch_size"].value = v
    release.set()
    assert p._worker.wait(10)
    assert calls[n0:] == [(2, 2, 2), (2, 32, 2)]  # the one running, then only the latest
    tr = p.figs["comparison"].data[0]
    want = rows[(rows.ep_size == 2) & (rows.batch_size == 32) & (rows.gamma == 2)].groupby("strategy").step_ms.median()
    assert dict(zip(tr.x, tr.y)) == pytest.approx(want.to_dict())
    assert p.progress.value == 1.0 and "FAKE-GPU" in p.figs["comparison"].layout.title.text


def test_live_failure_shows_message():
    measure, calls, _ = fake_measure(fail=True)
    p = panel.Panel(live.LiveBackend(measure=measure, fingerprint=FP), debounce_s=0.01)
    assert p._worker.wait(10)
    assert "CUDA out of memory" in p.error.value and "Traceback" not in p.error.value


def test_live_backend_measures_on_this_machine():
    """The real runner, on whatever device this machine has (CPU here), tiny settings."""
    cfg = LabConfig(model="tiny", workload="tiny", steps=8, warmup=2, trials=2, device="auto")
    b = live.LiveBackend(cfg)
    d = b.get({"ep_size": 2, "batch_size": 4, "gamma": 2, "workload": "tiny"})
    assert set(d.rows.strategy) == set(strategies.names())
    assert (d.rows.gpu == b.fingerprint["gpu"]).all() and d.rows.recorded_at.notna().all()
    assert not d.timelines.empty and {"lane", "part", "start_ms", "end_ms"} <= set(d.timelines.columns)
    figures.strategy_comparison(d.rows)
    figures.timeline(d.timelines, d.rows)


def test_make_panel_says_live_when_cuda(monkeypatch):
    measure, _, _ = fake_measure()
    monkeypatch.setattr(live, "choose_mode", lambda: "live")
    real = live.LiveBackend
    monkeypatch.setattr(live, "LiveBackend", lambda: real(measure=measure, fingerprint=FP))
    p = panel.make_panel(live.open_backend())
    assert p.mode == "live" and "LIVE" in p.mode_html.value and "FAKE-GPU" in p.mode_html.value
    assert p._worker.wait(10)


def test_make_panel_says_recorded_without_cuda(monkeypatch, tmp_path):
    from helpers import write_synthetic_runs

    monkeypatch.setenv("DSPARK_DATA", str(write_synthetic_runs(tmp_path)))
    monkeypatch.delenv(config.MODE_ENV, raising=False)
    monkeypatch.setattr(live, "choose_mode", lambda: "recorded")
    p = panel.make_panel(live.open_backend())
    assert p.mode == "recorded" and "RECORDED" in p.mode_html.value and "SYNTH-GPU" in p.mode_html.value
    assert p.error.value == "" and len(p.figs["comparison"].data) == 1


def test_live_panel_measures_on_its_worker_thread():
    """The real runner (profiler included) run from the panel's worker thread, on this machine."""
    cfg = LabConfig(model="tiny", workload="tiny", steps=8, warmup=2, trials=2, device="auto")
    p = panel.Panel(live.LiveBackend(cfg), debounce_s=0.01)
    p.set(ep_size=2, batch_size=4, gamma=2, workload="tiny")
    assert p._worker.wait(120)
    assert p.error.value == "", p.error.value
    assert p.last is not None and set(p.last.rows.strategy) == set(strategies.names())
    assert not p.last.timelines.empty and len(p.figs["timeline"].data) > 0
    assert p.progress.value == 1.0 and "measured now: EP 2 (one GPU, predicate only) · batch 4 · gamma 2" in p.status.value


def test_all_runs_are_set_side_by_side_never_stacked(data):
    rows, tl, headers, _ = data
    p = panel.Panel(RecordedBackend(Runs(rows, tl, headers)))
    labels = [lab for lab, _ in p.controls["run"].options]
    assert len(labels) == len(set(labels)) == 1 + rows.run_id.nunique()
    p.set(run=ALL_RUNS, ep_size=2, batch_size=8, gamma=4)
    total = [tr for tr in p.figs["syncs"].data if tr.name == "total (syncs_per_step)"][0]
    cats = list(zip(*total.x))  # [run label, strategy] pairs
    assert len(cats) == len(set(cats)) == rows.run_id.nunique() * rows.strategy.nunique()
    # each run's device_direct shows its own 1.00 sync per step, not the runs summed on one bar
    dd = [float(t) for (run, s), t in zip(cats, total.text) if s == "device_direct"]
    assert dd == [1.0] * rows.run_id.nunique()


@pytest.fixture(scope="module")
def committed_backend():
    """The recorded data in data/ (the filter is checked on what a design review would filter)."""
    runs = Runs.load()
    if runs.rows.empty:
        pytest.skip("no recorded runs in data/")
    return RecordedBackend(runs)


def _with_one_process_rows(backend) -> set:
    from dspark_lab.results.query.runs import one_process
    return set(one_process(backend.runs.rows)["run_id"].astype(str))


@pytest.mark.parametrize("text", ["since=2026-12-01", "name=reference"])
def test_a_run_filter_lists_exactly_the_runs_it_matches(committed_backend, text):
    b = committed_backend
    info = b.runs.run_info()
    key, value = text.split("=")
    if key == "since":
        match = info[info["created"].astype(str).str[:10] >= value]
    else:
        hay = (info["label"].astype(str) + " " + info["name"].astype(str) + " " + info["file"].astype(str)).str.lower()
        match = info[hay.str.contains(value)]
    want = set(match["run_id"].astype(str)) & _with_one_process_rows(b)
    if not want:
        pytest.skip(f"data/ holds no run for {text}")
    b.filter_runs(text)
    try:
        assert set(b.selection) == want
        assert len(b.selection) == len(want)  # each run listed once
        assert f"{len(want)} of {len(b.runs.run_ids())} run(s) selected" in b.selection_note()
        # The run the panel opens on is one the filter matched, not the richest run overall.
        assert b.defaults()["run"] in want or "defaults" not in b._views
    finally:
        b.filter_runs("")


def test_the_unfiltered_selection_still_opens_on_the_latest_default_sweep(committed_backend):
    b = committed_backend
    b.filter_runs("")
    assert b.selection[0] == b.runs.richest_grid_run()
    assert len(b.selection) == len(set(b.selection)) == len(_with_one_process_rows(b) & set(b.runs.run_ids()))


def test_notebook_02_draws_at_most_four_runs_side_by_side_this_machines_first(committed_backend):
    from dspark_lab.results.query.runs import MAX_COMPARED
    from dspark_lab.results.viewmodels import picks

    runs = committed_backend.runs
    mine = picks.stand_in_sweep(runs).run_ids[0]
    r0 = runs.ok[runs.ok.run_id.astype(str) == mine].iloc[0]
    holding = runs.nearest(ep_size=int(r0.ep_size), batch_size=int(r0.batch_size), gamma=int(r0.gamma), workload=r0.workload)
    held = set(holding.run_id.astype(str))
    drawn = picks.compared_at_point(holding, runs, mine)
    assert drawn.run_ids[0] == mine and len(drawn.run_ids) == min(MAX_COMPARED, len(held))
    assert set(drawn.rows.run_id.astype(str)) == set(drawn.run_ids) <= held
    left = len(held) - len(drawn.run_ids)
    assert drawn.note.startswith(f"{len(drawn.run_ids)} of the {len(held)} runs holding")
    assert (f"; {left} left out" in drawn.note) is (left > 0)


def test_two_cards_of_one_machine_are_set_side_by_side_and_said_to_be_so():
    from dspark_lab.results.analyses import card as card_results
    from dspark_lab.results.viewmodels import picks
    from helpers import synthetic_card

    a, b = synthetic_card(), synthetic_card()
    a["recorded"], b["recorded"] = "2026-12-01T14:00:00+00:00", "2026-12-01T12:00:00+00:00"
    other, why = picks.card_beside([a, b], a, card_results.same_machine)
    assert other is b and why.startswith("all 2 recorded cards are of this machine")
    c = synthetic_card(gpu="SYNTH-GPU-B")
    assert picks.card_beside([a, b, c], a, card_results.same_machine) == (c, "another machine's card")
    assert picks.card_beside([a], a, card_results.same_machine)[0] is None


def test_notebook_03s_panel_sets_the_compared_runs_side_by_side(committed_backend):
    runs = committed_backend.runs
    chosen = runs.default_selection()
    b = RecordedBackend(runs, compare=chosen)
    assert b.side_by_side_runs() == chosen[:b.side_by_side]
    drawn = b.get({**b.defaults(), "run": ALL_RUNS})
    held = runs.holding(chosen, ep_size=drawn.rows.ep_size.iloc[0], batch_size=drawn.rows.batch_size.iloc[0],
                        gamma=drawn.rows.gamma.iloc[0], workload=drawn.rows.workload.iloc[0])
    assert set(drawn.rows.run_id.astype(str)) == set(held or chosen)
    assert "runs compared" in b.selection_note()
    b.filter_runs("name=sweep")  # a typed filter sets its own runs side by side
    assert b.side_by_side_runs() == b.selection[:b.side_by_side]
    with pytest.raises(ValueError, match="compare: run 'nope' is not a recorded run"):
        RecordedBackend(runs, compare=["nope"])
