"""Notebooks 04 and 06 as a user gets them: `bash lab.sh` (recorded mode), headless Chromium runs all
cells of each with no error, every figure on every screen drawn (screenshots under out/,
browser_04_page_NN.png and browser_06_page_NN.png). Notebook 06 reads the committed investigation,
or, until a GPU has recorded one, a record made from synthetic numbers, and says which it shows.
Tracked notebooks are left as they were.

Run with `pytest -m browser`. Needs Chromium at /usr/bin/chromium (never downloaded by this test)."""
from __future__ import annotations

import os

import pytest

from dspark_lab.results.record import investigation
from helpers import COMMITTED_DATA
from test_browser import JS_SHUTDOWN, OUT, ROOT, _git_status, _open_and_run_all, _page_through, lab  # noqa: F401
from test_notebook06 import synthetic_investigation

pytestmark = pytest.mark.browser
NOTEBOOKS = ("04_sync_gallery.ipynb", "06_investigation.ipynb")


@pytest.fixture(scope="module", autouse=True)
def investigation_record(tmp_path_factory):
    """The record notebook 06 reads, set before `lab` starts (its kernels inherit the environment)."""
    committed = investigation.find(COMMITTED_DATA)
    path = committed or investigation.save(synthetic_investigation(), tmp_path_factory.mktemp("inv") / "synth.json")
    old = os.environ.get(investigation.DATA_ENV)
    os.environ[investigation.DATA_ENV] = str(path)
    yield {"path": path, "synthetic": committed is None}
    if old is None:
        os.environ.pop(investigation.DATA_ENV, None)
    else:
        os.environ[investigation.DATA_ENV] = old


def test_notebooks_04_and_06_run_all_in_the_browser_and_06_says_what_it_shows(lab, investigation_record):
    from playwright.sync_api import sync_playwright

    from test_browser import CHROMIUM, CHROMIUM_ARGS

    OUT.mkdir(parents=True, exist_ok=True)
    committed = {p: p.read_bytes() for p in (ROOT / "notebooks").glob("*.ipynb")}
    status_before = _git_status()
    shown = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for name in NOTEBOOKS:
                page = browser.new_page(viewport={"width": 1500, "height": 1100})
                took = _open_and_run_all(page, lab, name)  # asserts no cell error
                pages = _page_through(page, name.split("_")[0])  # waits until each screen's figures are drawn
                print(f"{name}: run all {took:.1f} s, {pages} screens")
                shown[name] = page.inner_text(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook")
                page.evaluate(JS_SHUTDOWN)
                page.close()
        finally:
            browser.close()
    text06 = shown["06_investigation.ipynb"]
    assert "RECORDED: measured on" in text06 and str(investigation_record["path"]) in text06
    assert "verdict:" in text06 and "costs most" in text06 and "guard, allow=" in text06
    assert "syncs that cost" in shown["04_sync_gallery.ipynb"]
    assert _git_status() == status_before, _git_status()
    assert all(p.read_bytes() == b for p, b in committed.items()), "the browser run wrote into a tracked notebook"
