"""Notebook 01's section "One rank's sync costs every rank": with real-EP runs in the data folder the
whole notebook runs and the section draws the per-rank breakdown, the share table and who waits, for
the most recent real-EP run (the committed runs hold real-EP runs; a run freshly recorded on gloo/CPU
ranks by dspark_lab.parallel is read the same); without one, its cells say in one sentence how to
record one.

The whole notebook is executed once per session (conftest.executed_notebooks, shared with
test_notebooks.py); on the other two data folders one kernel runs the notebook's first code cell
(imports, backend, headline) and then the section once per folder (the section reads nothing else)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dspark_lab.results import Runs
from helpers import (COMMITTED_DATA, NOTEBOOK_GROUP, NOTEBOOKS_DIR, RUNS_DIR, errors, execute_notebook, kernel_env,
                     printed)

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

pytestmark = pytest.mark.xdist_group(NOTEBOOK_GROUP)

NB01 = NOTEBOOKS_DIR / "01_onboarding.ipynb"
SECTION = "## One rank's sync costs every rank"
NO_RUN = "no real-EP run recorded in {data}: record one with `dspark-lab ep --world 2` on a machine with 2 GPUs"


def _section(nb) -> list:
    """The section's code cells (from its heading to the next heading of its level)."""
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(SECTION))
    end = next((i for i in range(start + 1, len(nb.cells))
                if nb.cells[i].cell_type == "markdown" and nb.cells[i].source.startswith("## ")), len(nb.cells))
    return [c for c in nb.cells[start:end] if c.cell_type == "code"]


def _run_section_on(folders: list[Path], tmp_path: Path) -> list[list]:
    """Notebook 01's first code cell, then the section once per data folder (one kernel: the section
    reads the folder from $DSPARK_DATA when it runs); per folder, the section's cells, run."""
    nb = nbformat.read(NB01, as_version=4)
    section = _section(nb)
    cells = [next(c for c in nb.cells if c.cell_type == "code")]
    for folder in folders:
        cells += [nbformat.v4.new_code_cell(f"import os\nos.environ['DSPARK_DATA'] = {str(folder)!r}")]
        cells += [nbformat.v4.new_code_cell(c.source) for c in section]
    nb.cells = cells
    execute_notebook(nb, kernel_env(folders[0], tmp_path / "out"))
    assert errors(nb.cells) == []
    n = len(section) + 1
    return [nb.cells[2 + i * n:1 + (i + 1) * n] for i in range(len(folders))]


def _figure_titles(cells) -> list[str]:
    out = []
    for c in cells:
        for o in c.get("outputs", []):
            fig = o.get("data", {}).get("application/vnd.plotly.v1+json")
            if fig:
                t = fig["layout"]["title"]
                out.append(t["text"] if isinstance(t, dict) else t)
    return out


def _share_tables(cells) -> list[str]:
    return [o["data"]["text/html"] for c in cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})]


def _assert_draws_the_section(cells, data: Path, run_id: str, dispatch: str) -> str:
    """The section drew its two figures and its share table for `run_id`; returns what it printed."""
    titles = _figure_titles(cells)
    assert any(t.startswith("One rank's sync costs every rank") for t in titles), titles
    assert any(t.startswith("Who waits for whom") for t in titles), titles
    text = printed(cells)
    assert f"run {Runs.load(data).labels()[run_id]}; dispatch {dispatch}" in text  # the run is named by its label
    assert f"{dispatch}, 2 ranks:" in text  # the share table read out, from the run's numbers
    assert "no real-EP run recorded" not in text
    tables = _share_tables(cells)
    assert tables and "only rank 0 device_direct" in tables[0]
    return text


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


def test_the_whole_notebook_draws_the_section_for_the_newest_committed_real_ep_run(executed_notebooks):
    nb, _ = executed_notebooks[NB01.name]
    runs = Runs.load(COMMITTED_DATA)
    real = runs.ok[runs.ok["ep_mode"] == "real"]
    assert not real.empty, "the committed runs hold real-EP runs"
    newest = [r for r in runs.run_ids() if r in set(real.run_id)][-1]
    modes = list(dict.fromkeys(real[real.run_id == newest].dispatch))
    _assert_draws_the_section(_section(nb), COMMITTED_DATA, newest, "a2a_fixed" if "a2a_fixed" in modes else modes[0])


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
    _assert_draws_the_section(cells, data, ep_data[1].stem.split(".")[0], "a2a_fixed")


def test_without_a_real_ep_run_the_section_says_how_to_record_one(sections):
    data, cells = sections["without"]
    assert printed(cells).strip() == NO_RUN.format(data=data)
    assert _figure_titles(cells) == []
