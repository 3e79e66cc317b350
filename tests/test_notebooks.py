"""The notebooks run top to bottom, headless, in recorded mode (no GPU needed), on a fixed
input: the committed runs under data/runs/. The headline (the reference point's numbers and the
rule that chose them) is the same in `dspark-lab main` (what `bash lab.sh` runs without a GPU),
the HTML report, notebook 01 and notebook 03."""
from __future__ import annotations

import html
import os
import re
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"  # the committed runs, explicitly
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
GALLERY_DIR = ROOT / "data" / "gallery"


@pytest.fixture(scope="module")
def recorded_env(tmp_path_factory):
    """Kernel environment: recorded mode, the committed data, the package importable, exports to a temp folder."""
    env = {"DSPARK_LAB_MODE": "recorded", "DSPARK_OUT": str(tmp_path_factory.mktemp("out")), "DSPARK_DATA": str(DATA),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
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


@pytest.fixture(scope="module")
def executed(recorded_env):
    """Each notebook executed once: name -> (notebook, seconds)."""
    out = {}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(path.parent)}})
        t0 = time.perf_counter()
        client.execute()  # raises CellExecutionError naming the cell on any error
        out[path.name] = (nb, time.perf_counter() - t0)
    return out


def headline_lines(text: str) -> list[str]:
    """The headline's lines ("headline: ..." and "rule: ...") in printed text or HTML."""
    text = html.unescape(re.sub(r"<[^>]+>", "\n", text))
    return [line.strip() for line in text.splitlines() if line.strip().startswith(("headline: ", "rule: "))]


def printed(nb) -> str:
    return "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream")


def test_notebooks_are_stripped():
    assert {p.name[:2] for p in NOTEBOOKS} >= {"01", "02", "03", "04"}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs and c.execution_count is None, f"{path.name}: outputs not stripped"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_headless(path, executed, recorded_env):
    nb, seconds = executed[path.name]
    print(f"{path.name}: {seconds:.1f} s")
    for c in nb.cells:
        for o in c.get("outputs", []):
            assert o.get("output_type") != "error", f"{path.name}: {o.get('ename')}: {o.get('evalue')}"
    if path.name.startswith("03"):
        from plotly.offline import get_plotlyjs

        doc = (Path(recorded_env["DSPARK_OUT"]) / "dspark_report.html").read_text(encoding="utf-8")
        assert doc.count(get_plotlyjs()[:300]) == 1  # plotly.js inline, exactly once: opens offline
        assert doc.count("Plotly.newPlot") >= 4 and headline_lines(doc)


def test_the_headline_is_the_same_in_the_cli_the_report_and_notebooks_01_and_03(executed, tmp_path, capsys):
    import torch

    from dspark_lab.cli import main as cli
    from dspark_lab.results import Runs

    if torch.cuda.is_available():
        pytest.skip("on a CUDA machine `main` runs a sweep first")
    head = Runs.load(DATA).headline()
    want = head.lines() + [head.rule]
    assert head.entries and all(line.startswith("headline: ") for line in want[:-1])
    assert head.rule.startswith("rule: ") and "most recent run" in head.rule and "not pooled" in head.rule

    out = tmp_path / "report.html"
    assert cli.main(["main", "--data", str(DATA), "-o", str(out)]) == 0
    in_cli = headline_lines(capsys.readouterr().out)
    in_report = headline_lines(out.read_text(encoding="utf-8"))
    in_01 = headline_lines(printed(executed["01_onboarding.ipynb"][0]))
    in_03 = headline_lines(printed(executed["03_design_review.ipynb"][0]))
    assert in_cli == in_report == in_01 == in_03 == want
    # and the number printed is the median of that run's own quiet trials of the reference point
    e = head.entries[0]
    runs = Runs.load(DATA)
    rows = runs.ok[(runs.ok.run_id == e["run_id"]) & (runs.ok.point_id == e["point_id"]) & ~runs.ok.disturbed]
    dd = rows[rows.strategy == "device_direct"].step_ms.median()
    assert f"device_direct {dd:.2f} ms" in want[0]
