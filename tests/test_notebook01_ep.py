"""Notebook 01's section "One rank's sync costs every rank": with a real-EP run in the data folder
(recorded here on gloo/CPU ranks by dspark_lab.parallel) the whole notebook runs and the section draws
the per-rank breakdown, the share table and who waits; without one, its cells say in one sentence how
to record one."""
from __future__ import annotations

import os
import json
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NB01 = ROOT / "notebooks" / "01_onboarding.ipynb"
SECTION = "## One rank's sync costs every rank"


def _execute(nb, data_dir: Path, tmp_path: Path):
    env = {"DSPARK_LAB_MODE": "recorded", "DSPARK_DATA": str(data_dir), "DSPARK_OUT": str(tmp_path / "out"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(NB01.parent)}}).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return nb


def _section(nb) -> list:
    """The section's code cells (from its heading to the next heading of its level)."""
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(SECTION))
    end = next((i for i in range(start + 1, len(nb.cells))
                if nb.cells[i].cell_type == "markdown" and nb.cells[i].source.startswith("## ")), len(nb.cells))
    return [c for c in nb.cells[start:end] if c.cell_type == "code"]


def _figure_titles(cells) -> list[str]:
    out = []
    for c in cells:
        for o in c.get("outputs", []):
            fig = o.get("data", {}).get("application/vnd.plotly.v1+json")
            if fig:
                t = fig["layout"]["title"]
                out.append(t["text"] if isinstance(t, dict) else t)
    return out


def _printed(cells) -> str:
    return "".join(o.get("text", "") for c in cells for o in c.get("outputs", []) if o.get("output_type") == "stream")


def _errors(nb) -> list:
    return [f"{o.ename}: {o.evalue}" for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]


@pytest.fixture(scope="module")
def ep_data(tmp_path_factory):
    """The committed runs plus one real-EP run recorded on two gloo ranks (tiny sizes)."""
    from dspark_lab.config import LabConfig
    from dspark_lab.parallel.run import run_ep, standard_cases

    data = tmp_path_factory.mktemp("data")
    shutil.copytree(ROOT / "data" / "runs", data / "runs")
    cfg = LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=2, batch_size=2, gamma=2)
    cases = standard_cases(2, ["non_blocking", "device_direct"], rank0_delay_ms=1.0, delay_strategies=("non_blocking",))
    res = run_ep(cfg, 2, ["a2a_fixed"], cases, out=data / "runs", backend="gloo", profile_steps=2,
                 fingerprint={"gpu": "none", "driver": "none", "cuda": "none", "torch": "cpu"})
    return data, Path(res["path"])


def test_with_a_real_ep_run_notebook_01_draws_the_section(ep_data, tmp_path):
    data, path = ep_data
    nb = _execute(nbformat.read(NB01, as_version=4), data, tmp_path)
    assert _errors(nb) == []
    cells = _section(nb)
    titles = _figure_titles(cells)
    assert any(t.startswith("One rank's sync costs every rank") for t in titles), titles
    assert any(t.startswith("Who waits for whom") for t in titles), titles
    text = _printed(cells)
    from dspark_lab.results import Runs

    runs = Runs.load(data)
    rid = path.stem.split(".")[0]
    assert f"run {runs.labels()[rid]}; dispatch a2a_fixed" in text  # the run is named by its label
    assert "a2a_fixed, 2 ranks:" in text  # the share table read out, from the run's numbers
    assert "no real-EP run recorded" not in text
    share_tables = [o for c in cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})]
    assert share_tables and "only rank 0 device_direct" in share_tables[0]["data"]["text/html"]


def test_without_a_real_ep_run_the_section_says_how_to_record_one(tmp_path):
    """The notebook's first code cell (imports, backend, headline) and the section, on the committed
    runs less those recorded on real ranks."""
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    for f in sorted((ROOT / "data" / "runs").glob("*.jsonl")):
        if json.loads(f.open().readline()).get("ep_mode") != "real":
            shutil.copy(f, data / "runs" / f.name)
    nb = nbformat.read(NB01, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    nb.cells = [first] + _section(nb)
    nb = _execute(nb, data, tmp_path)
    assert _errors(nb) == []
    text = _printed(nb.cells[1:])
    assert text.strip() == (f"no real-EP run recorded in {data}: record one with `dspark-lab ep --world 2` "
                            "on a machine with 2 GPUs")
    assert _figure_titles(nb.cells[1:]) == []
