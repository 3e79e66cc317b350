"""The notebooks run top to bottom, headless, in recorded mode (no GPU needed), on a fixed
input: the committed runs under data/runs/. The headline (the reference point's numbers and the
rule that chose them) is the same in `dspark-lab main` (what `bash lab.sh` runs without a GPU),
the HTML report, notebook 01 and notebook 03. Notebook 01 draws its EP section for the newest committed
real-EP run (test_notebook01_ep.py runs that section alone on other data)."""
from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from dspark_lab.results import Runs
from helpers import COMMITTED_DATA as DATA, NOTEBOOKS, assert_ep_section_drawn, ep_section, errors, printed, section

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

# The notebooks are executed once per session (conftest.executed_notebooks); only this file uses them,
# so under pytest-xdist `--dist loadfile` they are executed on one worker, once.


def headline_lines(text: str) -> list[str]:
    """The headline's lines ("headline: ..." and "rule: ...") in printed text or HTML."""
    text = html.unescape(re.sub(r"<[^>]+>", "\n", text))
    return [line.strip() for line in text.splitlines() if line.strip().startswith(("headline: ", "rule: "))]


def test_notebooks_are_stripped():
    assert {p.name[:2] for p in NOTEBOOKS} >= {"01", "02", "03", "04", "05"}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs and c.execution_count is None, f"{path.name}: outputs not stripped"


STRIP = ["-m", "nbstripout", "--keep-id", "--extra-keys", "metadata.language_info"]  # scripts/ensure_env.sh's filter


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_saved_with_its_outputs_reads_as_committed_through_the_git_filter(path, executed_notebooks, tmp_path):
    """What JupyterLab's autosave writes after Run All (outputs, counts, the kernel's language_info),
    cleaned by the filter that .gitattributes names, is the committed file byte for byte: git status
    stays clean when a tracked notebook is used."""
    import subprocess
    import sys

    nb, _ = executed_notebooks[path.name]
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "the executed notebook has outputs"
    saved = tmp_path / path.name
    nbformat.write(nb, saved)
    clean = subprocess.run([sys.executable, *STRIP, "-t", str(saved)], capture_output=True, text=True, check=True).stdout
    assert clean == path.read_text(), f"{path.name}: the filter's output differs from the committed notebook"
    assert "notebooks/*.ipynb filter=nbstripout" in (path.parents[1] / ".gitattributes").read_text()


def test_the_environment_set_up_defines_the_notebook_filter_in_this_clone():
    import shlex
    import subprocess

    root = NOTEBOOKS[0].parents[1]
    if subprocess.run(["git", "-C", str(root), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    got = subprocess.run(["git", "-C", str(root), "config", "--get", "filter.nbstripout.clean"],
                         capture_output=True, text=True)
    assert got.returncode == 0, "no nbstripout filter in this clone: run scripts/ensure_env.sh (test.sh does)"
    cmd = shlex.split(got.stdout)
    assert cmd[1:] == STRIP and subprocess.run([cmd[0], "-c", "import nbstripout"]).returncode == 0


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_headless(path, executed_notebooks, recorded_env):
    nb, seconds = executed_notebooks[path.name]
    print(f"{path.name}: {seconds:.1f} s")
    assert errors(nb.cells) == [], path.name
    if path.name.startswith("03"):
        from plotly.offline import get_plotlyjs

        doc = (Path(recorded_env["DSPARK_OUT"]) / "dspark_report.html").read_text(encoding="utf-8")
        assert doc.count(get_plotlyjs()[:300]) == 1  # plotly.js inline, exactly once: opens offline
        assert doc.count("Plotly.newPlot") >= 4 and headline_lines(doc)


def test_the_headline_is_the_same_in_the_cli_the_report_and_notebooks_01_and_03(executed_notebooks, recorded_env,
                                                                                 tmp_path, capsys, monkeypatch):
    import torch

    from dspark_lab.cli import main as cli
    from dspark_lab.results import Runs

    if torch.cuda.is_available():
        pytest.skip("on a CUDA machine `main` runs a sweep first")
    head = Runs.load(DATA).headline()
    want = head.lines() + [head.rule]
    assert head.entries and all(line.startswith("headline: ") for line in want[:-1])
    assert head.rule.startswith("rule: ") and "most recent run" in head.rule and "not pooled" in head.rule

    for k in ("DSPARK_LAB_MODE", "DSPARK_DATA", "DSPARK_OUT"):  # as the notebooks ran
        monkeypatch.setenv(k, recorded_env[k])
    out = tmp_path / "report.html"
    assert cli.main(["main", "--data", str(DATA), "-o", str(out)]) == 0
    in_cli = headline_lines(capsys.readouterr().out)
    in_report = headline_lines(out.read_text(encoding="utf-8"))
    in_01 = headline_lines(printed(executed_notebooks["01_onboarding.ipynb"][0].cells))
    in_03 = headline_lines(printed(executed_notebooks["03_design_review.ipynb"][0].cells))
    assert in_cli == in_report == in_01 == in_03 == want
    # and the number printed is the median of that run's own quiet trials of the reference point
    e = head.entries[0]
    runs = Runs.load(DATA)
    rows = runs.ok[(runs.ok.run_id == e["run_id"]) & (runs.ok.point_id == e["point_id"]) & ~runs.ok.disturbed]
    dd = rows[rows.strategy == "device_direct"].step_ms.median()
    assert f"device_direct {dd:.2f} ms" in want[0]


def test_the_whole_notebook_draws_the_section_for_the_newest_committed_real_ep_run(executed_notebooks):
    nb, _ = executed_notebooks["01_onboarding.ipynb"]
    runs = Runs.load(DATA)
    real = runs.ok[runs.ok["ep_mode"] == "real"]
    assert not real.empty, "the committed runs hold real-EP runs"
    # The newest recording holding a2a_fixed (the committed data: the 17:46 recording, one file per dispatch
    # mode), named by its first file; a2a_fixed drawn first though its newest file is a2a_dynamic's.
    fixed = set(real[real.dispatch == "a2a_fixed"].run_id.astype(str))
    newest = [r for r in runs.run_ids() if r in fixed][-1]
    first = min((r for r in runs.run_ids() if runs.recording_of(r) == runs.recording_of(newest)), key=runs.run_ids().index)
    text = assert_ep_section_drawn(ep_section(nb), DATA, first, "a2a_fixed")
    assert "dispatch modes a2a_fixed, allreduce, a2a_dynamic" in text


def _plotly(cells) -> list[dict]:
    return [o["data"]["application/vnd.plotly.v1+json"] for c in cells for o in c.get("outputs", [])
            if "application/vnd.plotly.v1+json" in o.get("data", {})]


def test_notebook01_ep1_section_draws_an_ep1_point_of_a_grid_run(executed_notebooks):
    cells = section(executed_notebooks["01_onboarding.ipynb"][0], "## At EP 1 nothing reads the scalar")
    text = printed(cells)
    runs = Runs.load(DATA)
    sweep = runs.runs_of_kind("default_sweep")[0]  # the newest default sweep holds EP 1
    assert f"EP-1 point from {runs.label_of(sweep)} (default sweep): EP 1 · batch 8 · gamma 4" in text, text
    assert "nearest recorded" not in text and "holds no point" not in text
    fig = _plotly(cells)[0]
    assert "EP 1 · batch 8 · gamma 4" in fig["layout"]["title"]["subtitle"]["text"]
    assert "between on_demand and non_blocking" in text  # the EP-1 comparison is read out


def test_notebook02_stand_in_is_a_sweep_and_its_figure_has_lines(executed_notebooks):
    nb = executed_notebooks["02_tuning_new_gpu.ipynb"][0]
    text = printed(nb.cells)
    runs = Runs.load(DATA)
    sweep = runs.runs_of_kind("default_sweep")[0]
    assert f"{runs.label_of(sweep)} (default sweep, 24 points) stands in for this machine" in text, text
    sweeps = [f for f in _plotly(nb.cells) if f["layout"]["title"]["text"].startswith("Sweep")]
    assert sweeps and max(len(tr["x"]) for tr in sweeps[0]["data"]) >= 4  # lines over the 4 batch sizes
    assert "EP None" not in text


def test_notebook03_features_the_headline_run_and_draws_every_compared_run(executed_notebooks):
    nb = executed_notebooks["03_design_review.ipynb"][0]
    runs = Runs.load(DATA)
    head = runs.headline().entries[0]
    cells = section(nb, "## The featured point")
    comp = _plotly(cells)[0]
    names = [tr["name"] for tr in comp["data"] if tr["type"] == "bar"]
    chosen = runs.default_selection()
    assert names[0] == head["label"] or head["label"] in names  # the headline run is drawn
    assert sorted(names) == sorted(runs.label_of(r) for r in chosen)  # every compared run is drawn
    assert head["point"] in comp["layout"]["title"]["subtitle"]["text"]
    sweep = _plotly(section(nb, "## Sweeps"))[0]
    assert all(runs.kind_of(r) in ("default_sweep", "sweep", "quick_sweep") for r in runs.grid_runs())
    assert len({tr["name"] for tr in sweep["data"]}) <= 5  # one line per strategy


def test_notebook_05_shows_the_committed_example_or_says_there_is_none_and_grades_a_kata(executed_notebooks):
    from dspark_lab.results.record import inspect_record

    nb, _ = executed_notebooks["05_your_own_code.ipynb"]
    text = printed(nb.cells)
    pair = inspect_record.recorded_pair("scalar_item", DATA)
    if pair is None:
        assert inspect_record.NO_EXAMPLE in text
    else:  # the recorded example: its target, its machine, its figures and the diff's Markdown
        before, _ = pair
        assert before["target"] in text and before["fingerprint"]["gpu"] in text
        shown = [o for c in nb.cells for o in c.get("outputs", []) if "application/vnd.plotly.v1+json" in o.get("data", {})]
        assert len(shown) >= 4
        assert any("Host syncs:" in o.get("data", {}).get("text/markdown", "") for c in nb.cells for o in c.get("outputs", []))
    assert "kata scalar_item:" in text
    assert "lint beside the runtime" in text or pair is None  # the static findings joined with the runtime sites
    hidden = [c for c in nb.cells if c.metadata.get("jupyter", {}).get("source_hidden")]
    assert len(hidden) == 1 and "katas.solution" in hidden[0].source
