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


# -- the stored first view (views/first_view.py) ---------------------------------------------------

def _run_file(folder: Path, name: str = "a.jsonl") -> Path:
    """One committed run file copied under folder/runs/, dated an hour back (not racy)."""
    src = sorted((ROOT / "data" / "runs").glob("*.jsonl"))[0]
    dst = folder / "runs" / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())
    os.utime(dst, ns=(dst.stat().st_mtime_ns - 3600 * 10**9,) * 2)
    return dst


def test_the_first_view_key_follows_the_run_files_the_kit_s_source_and_the_data_folder(tmp_path, monkeypatch):
    from dspark_lab.views import first_view

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    monkeypatch.setattr(first_view, "PACKAGE_DIR", src)
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "one"))
    run = _run_file(tmp_path / "one")
    k0 = first_view.key()
    assert k0 == first_view.key(), "the same files, the same key"
    (tmp_path / "one" / "notes.txt").write_text("not a run file")
    assert first_view.key() == k0, "only what the run loading reads is keyed"

    with run.open("ab") as f:
        f.write(b"\n")
    k1 = first_view.key()
    assert k1 != k0, "a run file changed"
    _run_file(tmp_path / "one", "b.jsonl")
    k2 = first_view.key()
    assert k2 != k1, "a run file added"

    (src / "pkg" / "mod.py").write_text("X = 22\n")
    k3 = first_view.key()
    assert k3 != k2, "the kit's source changed"

    _run_file(tmp_path / "two")
    _run_file(tmp_path / "two", "b.jsonl")
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "two"))
    assert first_view.key() != k3, "DSPARK_DATA names another data folder"


def test_the_first_view_finds_the_folders_and_the_secret_where_results_does(tmp_path, monkeypatch):
    """key() and load() run before pandas, so before any module of results: their few lines that
    name the data folder, the cache folder and the secret agree with those results decides by."""
    import stat

    from dspark_lab.results.loading import cache
    from dspark_lab.results.record import paths, records, regular_files
    from dspark_lab.views import first_view

    assert (first_view.RUN_SUFFIX, first_view.CACHE_OFF, first_view.FILE_LIMIT, first_view.PACKAGE_DIR) == (
        records.RUN_SUFFIX, paths.OFF, regular_files.JSON_FILE_LIMIT, paths.PACKAGE_DIR)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("DSPARK_DATA", "DSPARK_CACHE", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    for data in (None, str(tmp_path / "data"), "~/data"):
        if data is not None:
            monkeypatch.setenv("DSPARK_DATA", data)
        assert first_view.data_dir() == paths.default_data_dir()
    for env in ({}, {"XDG_CACHE_HOME": str(tmp_path / "xdg")}, {"DSPARK_CACHE": str(tmp_path / "c")},
                {"DSPARK_CACHE": "~/c"}, {"DSPARK_CACHE": "off"}, {"DSPARK_CACHE": " None "}):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert first_view.cache_dir() == cache.default_dir(), env
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(cache, "_secrets", {})
    assert first_view._secret() is None, "no secret until results makes one"
    made = cache.secret()
    assert made is not None and first_view._secret() == made
    cache.key_file().chmod(0o644)
    monkeypatch.setattr(cache, "_secrets", {})
    assert cache.secret() is None and first_view._secret() is None, "readable by others: trusted by neither"
    assert stat.S_IMODE(cache.key_file().stat().st_mode) == 0o644


@pytest.fixture
def drawn(recorded):
    """A recorded panel drawn over the committed runs (what the notebook's cold start draws)."""
    from dspark_lab.views import panel

    p = panel.make_panel(recorded)
    yield p
    p.close()


def test_a_snapshot_is_written_whole_inside_the_cache_folder_and_read_only_for_its_key(drawn, tmp_path, monkeypatch):
    from dspark_lab.results.loading import cache
    from dspark_lab.views import first_view

    folder = tmp_path / "cache"
    monkeypatch.setenv("DSPARK_CACHE", str(folder))
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(cache.os, "replace", lambda a, b: (renames.append((Path(a), Path(b))), real_replace(a, b)))
    key = first_view.key()
    path = first_view.save(drawn, key)
    assert path == folder / first_view.FILE_NAME and sorted(folder.iterdir()) == [path]
    (tmp, dst), = renames
    assert tmp.parent == folder and dst == path, "written beside it, then renamed into place"
    view = first_view.load()
    assert view == json.loads(json.dumps(first_view.view_of(drawn)))
    assert [f["name"] for f in view["figures"]] == list(drawn.figs)
    assert view["figures"][0]["bundle"] == json.loads(json.dumps(drawn.figs["comparison"].bundle))
    assert first_view.load("another key") is None, "another key: not shown"

    # A rename that fails leaves the stored view as it was and no temporary file.
    def failing(a, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.os, "replace", failing)
    before = path.read_bytes()
    assert first_view.save(drawn, key) is None
    assert path.read_bytes() == before and sorted(folder.iterdir()) == [path]

    monkeypatch.setenv("DSPARK_CACHE", "off")
    assert first_view.save(drawn, key) is None and first_view.load() is None


def test_a_damaged_planted_or_odd_snapshot_reads_as_none(drawn, tmp_path, monkeypatch):
    from dspark_lab.results.loading import cache
    from dspark_lab.views import first_view

    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path))
    key = first_view.key()
    path = first_view.save(drawn, key)
    good = path.read_bytes()
    mac, body = good.split(b"\n", 1)
    digit = next(i for i, c in enumerate(body) if chr(c).isdigit())
    edited = body[:digit] + (b"1" if body[digit:digit + 1] != b"1" else b"2") + body[digit + 1:]
    assert json.loads(edited), "still JSON: only the keyed hash tells"

    def signed(data: bytes) -> bytes:  # what only this module (this user's secret) can write
        return first_view._mac(cache.secret(), data) + b"\n" + data

    other = json.dumps({"format": first_view.FORMAT, "key": key, "view": {"banner": "x"}}).encode()
    for damaged in (good[: len(good) // 2], b"", b"not json at all", mac + b"\n" + edited,
                    b"0" * 64 + b"\n" + body,  # planted: a hash of its own
                    signed(b"{not json"), signed(b"[1, 2]"), signed(other), b"\xff\xfe" + good):
        path.write_bytes(damaged)
        assert first_view.load() is None, damaged[:80]
    path.unlink()
    assert first_view.load() is None
    path.mkdir()
    assert first_view.load() is None and first_view.save(drawn, key) is None
    path.rmdir()
    path.write_bytes(good)
    assert first_view.load() is not None


def test_the_stored_first_view_is_shown_at_once_and_the_recorded_panel_takes_its_place(drawn, recorded, tmp_path,
                                                                                      monkeypatch):
    from dspark_lab.views import cold_start, first_view, panel

    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path))
    first_view.save(drawn, first_view.key())
    gate = threading.Event()

    def held():  # the recorded runs, loaded once the test opens the gate
        assert gate.wait(30), "the test never opened the gate"
        return recorded

    monkeypatch.setattr(panel, "recorded_or_error", held)
    ex = cold_start.open_panel(lambda: None)
    try:
        shown = ex.box.children[0]
        assert shown is ex._first.widget and "first_view_shown" in ex.marks and "recorded_drawn" not in ex.marks
        assert first_view.REFRESHING in ex._first.note.value
        assert [o.outputs[0]["data"] for o in ex._first.figures] == [f["bundle"] for f in first_view.load()["figures"]]
        assert ex._first.figures[0].outputs[0]["data"][first_view.MIME]["data"], "the figures hold their traces"
        gate.set()
        assert ex.backend(30) is recorded and ex.box.children == (ex.recorded.widget,) and ex.shown is ex.recorded
        assert ex.marks["first_view_shown"] < ex.marks["recorded_drawn"] and ex.recorded.redraws == 1
    finally:
        gate.set()
        ex.close()


def test_a_failed_build_behind_the_first_view_is_said_in_the_output(drawn, recorded, tmp_path, monkeypatch):
    from dspark_lab.views import cold_start, first_view, panel

    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path))
    first_view.save(drawn, first_view.key())
    monkeypatch.setattr(panel, "recorded_or_error", lambda: recorded)

    def broken(backend):
        raise RuntimeError("the panel broke")

    monkeypatch.setattr(panel, "make_panel", broken)
    ex = cold_start.open_panel(lambda: None)
    assert ex.wait_live(30) is False  # the thread is done: the build failed, no live backend
    assert isinstance(ex.error, RuntimeError) and ex.box.children == (ex._first.widget,)
    assert "the panel broke" in ex._first.note.value and "dspark-error" in ex._first.note.value
    with pytest.raises(RuntimeError, match="could not be drawn"):
        ex.backend(30)
    ex.close()


CELL_CHILD = r"""
import json, sys
from studies.live_panel.cold_start import first_code_cell
ns = {"display": lambda *a, **k: None, "__name__": "__main__"}
exec(compile(first_code_cell(), "notebook 01, first code cell", "exec"), ns)
ex = ns["explorer"]
ex.backend(120)
seen = {"marks": ex.marks, "imported_at_first_view": ex.imported_at_first_view,
        "recorded_in_box": ex.box.children == (ex.recorded.widget,), "mode": ex.mode,
        "recorded_bundles": [json.loads(json.dumps(b.bundle)) for b in ex.recorded.figs.values()]}
if ex._first is not None:
    seen["first_view_bundles"] = [o.outputs[0]["data"] for o in ex._first.figures]
ex.close()
print(json.dumps(seen))
"""


def test_notebook_01_s_first_cell_shows_the_stored_first_view_before_pandas_or_plotly_in_a_fresh_process(tmp_path):
    from dspark_lab.views import first_view

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "DSPARK_CACHE": str(tmp_path / "cache"), "DSPARK_LAB_MODE": "recorded"}

    def cell() -> dict:
        r = subprocess.run([sys.executable, "-c", CELL_CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    # No stored view: drawn as before, in the cell, and its first view stored for the next start.
    cold = cell()
    assert "first_view_shown" not in cold["marks"] and cold["imported_at_first_view"] is None
    assert cold["recorded_in_box"] and cold["mode"] == "recorded"
    assert (tmp_path / "cache" / first_view.FILE_NAME).is_file()
    # The next fresh process: the stored view first, with none of pandas, numpy, plotly or torch
    # imported at that moment; then the recorded panel in its place, drawing what was stored.
    warm = cell()
    assert warm["imported_at_first_view"] == []
    assert warm["marks"]["first_view_shown"] < warm["marks"]["recorded_started"] < warm["marks"]["recorded_drawn"]
    assert warm["recorded_in_box"] and warm["mode"] == "recorded"
    assert warm["first_view_bundles"] == cold["recorded_bundles"] == warm["recorded_bundles"]


def test_prepare_stores_the_first_view_once_and_only_where_there_is_a_cache(tmp_path, monkeypatch):
    """What `bash lab.sh` runs beside the server: the view stored before the first kernel asks for it."""
    from dspark_lab.views import first_view

    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path / "cache"))
    assert first_view.load() is None
    assert first_view.prepare() == "stored"
    view = first_view.load()
    assert view is not None and [f["name"] for f in view["figures"]]
    stored = (tmp_path / "cache" / first_view.FILE_NAME).read_bytes()
    assert first_view.prepare() == "current"
    assert (tmp_path / "cache" / first_view.FILE_NAME).read_bytes() == stored, "a current view is not drawn again"
    monkeypatch.setenv("DSPARK_CACHE", "off")
    assert first_view.prepare() == "not stored"


def test_prepare_runs_as_a_module_and_says_what_it_did(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "DSPARK_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "dspark_lab.views.first_view"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "the recorded panel's first view: stored"
    assert (tmp_path / "cache" / "first-view.json").is_file()
