"""The panel's cold start (views/cold_start.py, notebook 01's first code cell): the recorded panel
is drawn before torch is imported, and a live panel made on a thread takes its place in the same
output at its first drawn update; the notebook's first point is that measurement, not a second one
beside it. A fake measurer on CPU; the H200 timings are studies/live_panel/cold_start.py's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from dspark_lab.views import cold_start
seen = {}
drawn_by = cold_start.panel_mod.make_panel
def make_panel(*a, **k):  # what was imported when the recorded panel had drawn
    p = drawn_by(*a, **k)
    seen["heavy_at_draw"] = sorted(m for m in ("plotly.basewidget", "anywidget", "nbformat") if m in sys.modules)
    return p
cold_start.panel_mod.make_panel = make_panel
def make_live():
    seen["make_live_at"] = time.perf_counter()
    seen["torch_loaded_when_live_starts"] = "torch" in sys.modules
    import torch  # what the live backend's import does first
    return None
ex = cold_start.open_panel(make_live)
ex.backend(60)
seen.update(marks=ex.marks, traces=len(ex.recorded.figs["comparison"].data), redraws=ex.recorded.redraws,
            mode=ex.mode, torch_loaded_at_end="torch" in sys.modules)
print(json.dumps(seen))
"""


def test_the_first_figure_is_drawn_from_recorded_runs_before_torch_is_imported(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "DSPARK_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["redraws"] == 1 and seen["traces"] > 0, "the recorded comparison is drawn"
    assert seen["marks"]["recorded_drawn"] < seen["make_live_at"], "drawn before the live backend is asked for"
    assert seen["torch_loaded_when_live_starts"] is False, "the recorded panel imported torch"
    assert seen["heavy_at_draw"] == [], "the recorded panel imported plotly's widgets (and nbformat with them)"
    assert seen["torch_loaded_at_end"] is True and seen["mode"] == "recorded"


def test_a_recorded_figure_is_drawn_as_plotly_mime_json_with_the_kits_config_and_its_subtitle_folded():
    import plotly.graph_objects as go

    from dspark_lab.views import figures

    from dspark_lab.views.figures.layout import titled

    fig = titled(go.Figure(go.Bar(x=["a", "b"], y=[1.0, 2.0])), "Title", "the subtitle")
    bundle = figures.figure_bundle(fig)
    spec = bundle[figures.FigureBox.MIME]
    json.dumps(bundle)  # plain JSON: what the kernel sends
    assert spec["config"] == figures.PLOTLY_CONFIG and spec["data"][0]["y"] == [1.0, 2.0]
    assert "the subtitle" in spec["layout"]["title"]["text"] and bundle["text/plain"].startswith("<figure: Title")
    box = figures.FigureBox("comparison", 300)
    box.show(fig)  # no kernel here: kept, not drawn
    assert box.layout.title.text == spec["layout"]["title"]["text"] and list(box.data[0].y) == [1.0, 2.0]
    assert {"dspark-figure", "dspark-figure-comparison"} <= set(box.widget._dom_classes)


@pytest.fixture
def recorded():
    from dspark_lab.results.viewmodels.backend import load_recorded

    return load_recorded()


def gated_live(gate: threading.Event):
    """A live backend over the fake measurer whose measurements wait for `gate`, and its call log."""
    from test_live_stream import BASE, FP, FakeMeasurer

    from dspark_lab.run import live

    fake = FakeMeasurer()

    def measure(cfg, names, **kw):
        assert gate.wait(30), "the test never opened the gate"
        return fake(cfg, names, **kw)

    return (lambda: live.LiveBackend(BASE, measure=measure, fingerprint=FP)), fake


def test_the_live_panel_replaces_the_recorded_one_at_its_first_drawn_update(recorded):
    from dspark_lab.views import cold_start

    gate = threading.Event()
    make_live, fake = gated_live(gate)
    ex = cold_start.open_panel(make_live, recorded)
    try:
        backend = ex.backend(30)
        assert backend.mode == "live" and ex.mode == "live"
        # Measuring (held at the gate): the recorded figures stay in the output, and say why.
        assert ex.box.children == (ex.recorded.widget,) and ex.shown is ex.recorded
        assert ex.live.redraws == 0 and ex.recorded.redraws == 1
        assert "LIVE mode is starting" in ex.recorded.mode_html.value
        gate.set()
        point = ex.point(backend.defaults(), timeout=30)
        assert ex.box.children == (ex.live.widget,) and ex.shown is ex.live
        assert ex.marks["recorded_drawn"] < ex.marks["first_live_drawn"] <= ex.marks["first_live_complete"]
        assert point is ex.live.last and len(fake.calls) == 1, "the notebook's point is the panel's measurement"
        assert (point.rows["gpu"] == "FAKE-GPU").all()
    finally:
        gate.set()
        ex.close()
    assert not any(t.name in ("dspark-go-live", "dspark-live") and t.is_alive() for t in threading.enumerate())


def test_without_a_live_backend_or_when_it_fails_the_recorded_panel_stays(recorded):
    from dspark_lab.views import cold_start

    ex = cold_start.open_panel(lambda: None, recorded)
    assert ex.backend(30) is recorded and ex.mode == "recorded" and ex.box.children == (ex.recorded.widget,)
    s = recorded.defaults()
    assert ex.point(s).rows.equals(recorded.get(s).rows)
    ex.close()

    def broken():
        raise RuntimeError("CUDA driver too old")

    ex = cold_start.open_panel(broken, recorded)
    assert ex.backend(30) is recorded and isinstance(ex.error, RuntimeError)
    assert "CUDA driver too old" in ex.recorded.error.value and "recorded runs are shown" in ex.recorded.error.value
    ex.close()


def test_the_cold_start_study_times_the_notebook_s_own_first_cell_and_judges_each_process():
    from studies.live_panel import cold_start as study

    assert "cold_start.open_panel(" in study.first_code_cell() and "display(explorer)" in study.first_code_cell()
    marks = {"start": 10.1, "recorded_loaded": 10.4, "recorded_drawn": 11.0, "backend_made": 14.0, "first_live_drawn": 15.6,
             "first_live_complete": 17.0}
    t = study.timings(10.0, 14.5, marks, warm_end=15.0)
    assert t == pytest.approx({"first_figure_s": 1.0, "cell_s": 4.5, "imports_s": 0.1, "runs_loaded_s": 0.3,
                               "panel_drawn_s": 0.6, "backend_made_s": 4.0, "warm_end_s": 5.0,
                               "first_live_after_warm_s": 0.6, "live_complete_after_warm_s": 2.0})
    recorded_only = study.timings(10.0, 14.5, {"recorded_drawn": 11.0}, warm_end=None)
    assert recorded_only["first_live_after_warm_s"] is None and recorded_only["warm_end_s"] is None
    slow = {**t, "first_live_after_warm_s": 1.2}
    s = study.summarise({"cold": slow, "warm 1": t, "warm 2": t, "warm 3": {**t, "first_figure_s": 1.4}})
    assert s["first_figure_s"] == {"cold": 1.0, "warm_median": 1.0}
    assert s["checks"] == {"first_figure_s": True, "first_live_after_warm_s": False}  # the cold process missed
    assert "MISSED" in study.table(s) and "met" in study.table(s)
    assert study.summarise({"cold": recorded_only})["checks"]["first_live_after_warm_s"] is False
