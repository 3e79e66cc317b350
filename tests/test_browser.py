"""Notebook 01 in a real JupyterLab, driven by headless Chromium: run all cells, move the panel's
batch-size slider, check that the figure's data changed to the recorded point, save a screenshot.

Run with `pytest -m browser`. Needs Chromium at /usr/bin/chromium (never downloaded by this test).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from test_figures import RUNS_DIR, write_synthetic_runs

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
NOTEBOOK = "01_onboarding.ipynb"
SCREENSHOT = ROOT / "out" / "browser_01_onboarding.png"
PANEL_SHOT = ROOT / "out" / "browser_01_panel.png"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode() or "null")


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on localhost (token auth, random free port, temp root holding a copy of notebook 01),
    its kernels in recorded mode; always shut down."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("jupyterlab")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        DSPARK_LAB_MODE="recorded", DSPARK_OUT=str(tmp_path / "out"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "jcfg"), JUPYTER_RUNTIME_DIR=str(tmp_path / "jrt"),
    )
    if not (RUNS_DIR.is_dir() and any(RUNS_DIR.glob("*.jsonl"))):
        env["DSPARK_DATA"] = str(write_synthetic_runs(tmp_path / "data"))
    # No "get Jupyter news?" prompt over the page.
    (tmp_path / "jcfg" / "labconfig").mkdir(parents=True)
    (tmp_path / "jcfg" / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / "jupyterlab.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly",  # no extension listings fetched from the network
         f"--LabApp.workspaces_dir={tmp_path / 'ws'}", f"--LabApp.user_settings_dir={tmp_path / 'settings'}"]
        + (["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({proc.returncode}):\n{(tmp_path / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                _get(f"{base}/api/status?token={token}")
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("JupyterLab did not start in 90 s")
                time.sleep(0.5)
        yield {"base": base, "token": token, "env": env, "log": tmp_path / "jupyterlab.log"}
    finally:
        try:
            req = urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST")
            urllib.request.urlopen(req, timeout=5).read()
        except OSError:
            pass
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        log.close()


JS_NOTEBOOK = "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget; return w && w.content && w.sessionContext ? w : null; }"
JS_KERNEL_READY = f"""() => {{ const w = ({JS_NOTEBOOK})(); const k = w && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.connectionStatus === 'connected' && k.status === 'idle'; }}"""
JS_ALL_RUN = f"""() => {{ const w = ({JS_NOTEBOOK})(); if (!w) return false;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  const code = w.content.widgets.filter(c => c.model.type === 'code');
  return !!k && k.status === 'idle' && code.every(c => c.model.executionCount !== null); }}"""
JS_ERRORS = f"""() => {{ const w = ({JS_NOTEBOOK})(); const out = [];
  for (const c of w.content.widgets) {{ if (c.model.type !== 'code') continue;
    for (const o of c.model.outputs.toJSON()) if (o.output_type === 'error') out.push(o.ename + ': ' + o.evalue); }}
  return out; }}"""
# The panel's strategy-comparison FigureWidget: a plotly div inside the last cell's widget output.
JS_COMPARISON = """() => { const cells = document.querySelectorAll('.jp-Notebook .jp-CodeCell'); const last = cells[cells.length - 1];
  for (const gd of last.querySelectorAll('.js-plotly-plot')) {
    const t = gd.layout && gd.layout.title && (gd.layout.title.text || gd.layout.title);
    if (t === 'Step time by strategy' && gd.data && gd.data.length) return {x: gd.data[0].x, y: gd.data[0].y,
      sub: gd.layout.title.subtitle ? gd.layout.title.subtitle.text : ''};
  } return null; }"""
JS_POINT = """() => { const s = document.querySelector('.dspark-status[data-point]'); return s ? s.getAttribute('data-point') : null; }"""


def test_notebook_01_runs_and_the_slider_moves_the_figure(lab):
    from playwright.sync_api import sync_playwright

    from dspark_lab import figures, panel, store

    data_dir = lab["env"].get("DSPARK_DATA")
    rows, tl, headers = store.load_runs(data_dir) if data_dir else store.load_runs()
    run = panel.RecordedBackend(rows, tl, headers).defaults()["run"]

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(f"{lab['base']}/lab/tree/{NOTEBOOK}?token={lab['token']}")
            page.wait_for_function(JS_NOTEBOOK, timeout=90_000)
            # Run All before the kernel is idle AND connected is silently lost: wait for both.
            page.wait_for_function(JS_KERNEL_READY, timeout=90_000)
            t0 = time.time()
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(JS_ALL_RUN, timeout=240_000, polling=500)
            print(f"run all: {time.time() - t0:.1f} s")
            errors = page.evaluate(JS_ERRORS)
            assert errors == [], errors

            last = page.locator(".jp-Notebook .jp-CodeCell").last
            last.scroll_into_view_if_needed()
            page.wait_for_function(JS_COMPARISON, timeout=60_000, polling=250)
            before = page.evaluate(JS_COMPARISON)
            point_before = page.evaluate(JS_POINT)
            assert before["sub"] and str(rows[rows.run_id == run].gpu.iloc[0]) in before["sub"]

            # Move the batch-size slider one step with the keyboard (the slider reports on release).
            slider = last.locator(".widget-hslider", has_text="batch size").first
            handle = slider.locator(".noUi-handle").first
            handle.scroll_into_view_if_needed()
            readout_before = slider.locator(".widget-readout").inner_text()
            handle.click()
            key = "ArrowLeft" if readout_before.strip() == str(max(rows.batch_size)) else "ArrowRight"
            page.keyboard.press(key)
            page.wait_for_function(f"() => ({JS_POINT})() !== {json.dumps(point_before)}", timeout=30_000)
            page.wait_for_function(
                f"() => {{ const c = ({JS_COMPARISON})(); return c && JSON.stringify(c.y) !== {json.dumps(json.dumps(before['y']))}; }}",
                timeout=30_000)
            after = page.evaluate(JS_COMPARISON)
            point_after = page.evaluate(JS_POINT)
            readout_after = slider.locator(".widget-readout").inner_text()
            assert readout_after != readout_before

            # The new data are the recorded medians of the point the panel names.
            sel = figures.ok_rows(rows)
            sel = sel[(sel.point_id == point_after) & (sel.run_id == run)]
            assert int(sel.batch_size.iloc[0]) == int(readout_after)
            want = sel.groupby("strategy").step_ms.median()
            assert dict(zip(after["x"], after["y"])) == pytest.approx(want.to_dict())

            last.scroll_into_view_if_needed()
            page.wait_for_timeout(800)
            page.screenshot(path=str(SCREENSHOT), full_page=False)
            page.set_viewport_size({"width": 1500, "height": 2900})  # the whole panel in one shot
            last.evaluate("el => el.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(1000)
            page.screenshot(path=str(PANEL_SHOT), full_page=False)
            page.close()
        finally:
            browser.close()
    assert SCREENSHOT.stat().st_size > 20_000
