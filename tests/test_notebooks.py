"""The notebooks run top to bottom, headless, in recorded mode (no GPU needed)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from test_figures import RUNS_DIR, write_synthetic_runs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
GALLERY_DIR = ROOT / "data" / "gallery"


@pytest.fixture(scope="module")
def recorded_env(tmp_path_factory):
    """Kernel environment: recorded mode, the package importable, exports to a temp folder.
    Data: the real recorded runs when data/runs/ holds any, else a synthetic set."""
    env = {"DSPARK_LAB_MODE": "recorded", "DSPARK_OUT": str(tmp_path_factory.mktemp("out")),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if not (RUNS_DIR.is_dir() and any(RUNS_DIR.glob("*.jsonl"))):
        env["DSPARK_DATA"] = str(write_synthetic_runs(tmp_path_factory.mktemp("data")))
    if not (GALLERY_DIR.is_dir() and any(GALLERY_DIR.glob("*.json"))):
        # Notebook 04 reads a recorded gallery: record a tiny one on this machine.
        from dspark_lab.gallery import report as gallery_report

        rec = gallery_report.record(device="cpu", steps=2, trials=1)
        env["DSPARK_GALLERY_DATA"] = str(gallery_report.save(rec, tmp_path_factory.mktemp("gallery") / "cpu.json"))
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_notebooks_are_stripped():
    assert {p.name[:2] for p in NOTEBOOKS} >= {"01", "02", "03", "04"}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs and c.execution_count is None, f"{path.name}: outputs not stripped"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_headless(path, recorded_env):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the cell on any error
    print(f"{path.name}: {time.perf_counter() - t0:.1f} s")
    for c in nb.cells:
        for o in c.get("outputs", []):
            assert o.get("output_type") != "error", f"{path.name}: {o.get('ename')}: {o.get('evalue')}"
    if path.name.startswith("03"):
        report = Path(recorded_env["DSPARK_OUT"]) / "dspark_report.html"
        assert report.is_file() and report.stat().st_size > 1_000_000  # plotly.js inline
