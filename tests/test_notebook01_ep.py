"""Notebook 01's section "One rank's sync costs every rank": with real-EP runs in the data folder the
whole notebook runs and the section draws the per-rank breakdown, the share table and who waits, for
the most recent real-EP run (the committed runs hold real-EP runs; a run freshly recorded on gloo/CPU
ranks by dspark_lab.parallel is read the same); without one, its cells say in one sentence how to
record one.

The whole notebook, on the committed runs, is executed once per session and checked in
test_notebooks.py; here one kernel runs the notebook's first code cell (imports, backend, headline)
and then the section once per data folder (the section reads nothing else)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import (NOTEBOOKS_DIR, RUNS_DIR, assert_ep_section_drawn, ep_section, errors, execute_notebook,
                     figure_titles, kernel_env, printed)

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

NB01 = NOTEBOOKS_DIR / "01_onboarding.ipynb"
NO_RUN = "no real-EP run recorded: record one with `dspark-lab ep --world 2` on a machine with 2 GPUs (data: {data})"


def _run_section_on(folders: list[Path], tmp_path: Path) -> list[list]:
    """Notebook 01's first code cell, then the section once per data folder (one kernel: the section
    reads the folder from $DSPARK_DATA when it runs); per folder, the section's cells, run."""
    nb = nbformat.read(NB01, as_version=4)
    section = ep_section(nb)
    cells = [next(c for c in nb.cells if c.cell_type == "code")]
    for folder in folders:
        cells += [nbformat.v4.new_code_cell(f"import os\nos.environ['DSPARK_DATA'] = {str(folder)!r}")]
        cells += [nbformat.v4.new_code_cell(c.source) for c in section]
    nb.cells = cells
    execute_notebook(nb, kernel_env(folders[0], tmp_path / "out"))
    assert errors(nb.cells) == []
    n = len(section) + 1
    return [nb.cells[2 + i * n:1 + (i + 1) * n] for i in range(len(folders))]


@pytest.fixture(scope="module")
def ep_data(tmp_path_factory):
    """The committed runs plus one real-EP run recorded on two gloo ranks (tiny sizes): the newest."""
    from dspark_lab.config import LabConfig
    from dspark_lab.parallel.run import run_ep, standard_cases

    data = tmp_path_factory.mktemp("data")
    shutil.copytree(RUNS_DIR, data / "runs")
    cfg = LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=2, batch_size=2, gamma=2)
    cases = standard_cases(2, ["non_blocking", "device_direct"], rank0_delay_ms=1.0, delay_strategies=("non_blocking",))
    res = run_ep(cfg, 2, ["a2a_fixed"], cases, out=data / "runs", backend="gloo", profile_steps=2,
                 fingerprint={"gpu": "none", "driver": "none", "cuda": "none", "torch": "cpu"})
    return data, Path(res["path"])


@pytest.fixture(scope="module")
def sections(ep_data, tmp_path_factory) -> dict:
    """The section run on the data with the gloo run ("with") and on the committed runs less those
    recorded on real ranks ("without"): {case: (data folder, the section's cells)}."""
    without = tmp_path_factory.mktemp("without")
    (without / "runs").mkdir()
    for f in sorted(RUNS_DIR.glob("*.jsonl")):
        if json.loads(f.open().readline()).get("ep_mode") != "real":
            shutil.copy(f, without / "runs" / f.name)
    folders = {"with": ep_data[0], "without": without}
    run = _run_section_on(list(folders.values()), tmp_path_factory.mktemp("nb"))
    return {k: (folder, cells) for (k, folder), cells in zip(folders.items(), run)}


def test_a_real_ep_run_recorded_on_gloo_ranks_is_drawn(ep_data, sections):
    data, cells = sections["with"]
    assert_ep_section_drawn(cells, data, ep_data[1].stem.split(".")[0], "a2a_fixed")


def test_without_a_real_ep_run_the_section_says_how_to_record_one(sections):
    data, cells = sections["without"]
    assert printed(cells).strip() == NO_RUN.format(data=data)
    assert figure_titles(cells) == []
