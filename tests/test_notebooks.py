"""The notebooks run top to bottom, headless, in recorded mode (no GPU needed), on a fixed
input: the committed runs under data/runs/. The headline (the reference point's numbers and the
rule that chose them) is the same in `dspark-lab main` (what `bash lab.sh` runs without a GPU),
the HTML report, notebook 01 and notebook 03. Notebook 01 draws its EP section for the newest committed
real-EP run (test_notebook01_ep.py runs that section alone on other data)."""
from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_lab.results import Runs
from helpers import (COMMITTED_DATA as DATA, NOTEBOOKS, STRIP, assert_ep_section_drawn, checkout_with_the_notebook_filter,
                     ep_section, errors, printed, section, unstripped_cells, what_git_commits)

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

# The notebooks are executed once per session (conftest.executed_notebooks), one after another
# (helpers.execute_notebooks says why); only this file uses them, so under pytest-xdist
# `--dist loadfile` they are executed on one worker, once.


def headline_lines(text: str, details: list[str]) -> list[str]:
    """The headline's lines in printed text or HTML, stripped: each "headline: ..." and "rule: ..." line
    and each line that is one of `details` (the lines below a machine's first, as the headline has them)."""
    text = html.unescape(re.sub(r"<[^>]+>", "\n", text))
    wanted = {d.strip() for d in details}
    return [line.strip() for line in text.splitlines()
            if line.strip().startswith(("headline: ", "rule: ")) or line.strip() in wanted]


def test_notebooks_are_stripped():
    assert {p.name[:2] for p in NOTEBOOKS} >= {"01", "02", "03", "04", "05"}
    for path in NOTEBOOKS:
        assert unstripped_cells(what_git_commits(path)) == [], f"{path.name}: git would commit its outputs"


def test_a_used_notebook_is_judged_by_what_git_would_commit(executed_notebooks, tmp_path):
    """A notebook saved with its outputs in a git checkout whose filter is configured as
    scripts/ensure_env.sh configures it: the working-tree file holds outputs, what git would commit
    holds none, and the check reads the latter (so `bash test.sh` stays green after Run All)."""
    checkout_with_the_notebook_filter(tmp_path)
    saved = tmp_path / "notebooks" / NOTEBOOKS[0].name
    nbformat.write(executed_notebooks[NOTEBOOKS[0].name][0], saved)
    assert unstripped_cells(saved.read_text()), "the saved copy holds outputs, as autosave leaves it"
    assert unstripped_cells(what_git_commits(saved)) == []
    assert what_git_commits(saved) == what_git_commits(NOTEBOOKS[0])
    subprocess.run(["git", "-C", str(tmp_path), "add", "notebooks"], check=True)  # and git itself stores exactly that
    blob = subprocess.run(["git", "-C", str(tmp_path), "show", f":notebooks/{saved.name}"], capture_output=True,
                          text=True, check=True).stdout
    assert blob == what_git_commits(saved)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_saved_with_its_outputs_reads_as_committed_through_the_git_filter(path, executed_notebooks, tmp_path):
    """What JupyterLab's autosave writes after Run All (outputs, counts, the kernel's language_info),
    cleaned by the filter that .gitattributes names, is what git would commit of the tracked notebook,
    byte for byte: git status stays clean when a tracked notebook is used."""
    nb, _ = executed_notebooks[path.name]
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "the executed notebook has outputs"
    saved = tmp_path / path.name
    nbformat.write(nb, saved)
    clean = subprocess.run([sys.executable, *STRIP, "-t", str(saved)], capture_output=True, text=True, check=True).stdout
    assert clean == what_git_commits(path), f"{path.name}: the filter's output differs from the committed notebook"
    assert "notebooks/*.ipynb filter=nbstripout" in (path.parents[1] / ".gitattributes").read_text()


def test_every_notebook_names_the_kernelspec_ipykernel_installs():
    """One kernelspec for all notebooks, the one JupyterLab writes back on save (ipykernel's own):
    a notebook committed with another display name makes a diff every time it is saved."""
    from ipykernel.kernelspec import KERNEL_NAME, get_kernel_dict

    want = {"display_name": get_kernel_dict()["display_name"], "language": "python", "name": KERNEL_NAME}
    specs = {p.name: dict(nbformat.reads(what_git_commits(p), as_version=4).metadata.get("kernelspec", {}))
             for p in NOTEBOOKS}
    assert {name: spec for name, spec in specs.items() if spec != want} == {}, want


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
        assert doc.count("Plotly.newPlot") >= 4 and headline_lines(doc, [])


def test_the_headline_is_the_same_in_the_cli_the_report_and_notebooks_01_and_03(executed_notebooks, recorded_env,
                                                                                 tmp_path, capsys, monkeypatch):
    import torch

    from dspark_lab.cli import main as cli
    from dspark_lab.results import Runs

    if torch.cuda.is_available():
        pytest.skip("on a CUDA machine `main` runs a sweep first")
    head = Runs.load(DATA).headline()
    want = head.lines() + [head.rule]
    assert head.entries and all(b[0].startswith("headline: ") and len(b) > 1 for b in head.blocks())
    details = [line for b in head.blocks() for line in b[1:]]
    assert head.rule.startswith("rule: ") and "most recent run" in head.rule and "not pooled" in head.rule

    for k in ("DSPARK_LAB_MODE", "DSPARK_DATA", "DSPARK_OUT"):  # as the notebooks ran
        monkeypatch.setenv(k, recorded_env[k])
    out = tmp_path / "report.html"
    assert cli.main(["main", "--data", str(DATA), "-o", str(out)]) == 0
    in_cli = headline_lines(capsys.readouterr().out, details)
    in_report = headline_lines(out.read_text(encoding="utf-8"), details)
    in_01 = headline_lines(printed(executed_notebooks["01_onboarding.ipynb"][0].cells), details)
    in_03 = headline_lines(printed(executed_notebooks["03_design_review.ipynb"][0].cells), details)
    assert in_cli == in_report == in_01 == in_03 == [line.strip() for line in want]
    # and the number printed is the median of that run's own quiet trials of the reference point
    e = head.entries[0]
    runs = Runs.load(DATA)
    rows = runs.ok[(runs.ok.run_id == e["run_id"]) & (runs.ok.point_id == e["point_id"]) & ~runs.ok.disturbed]
    dd = rows[rows.strategy == "device_direct"].step_ms.median()
    assert f"device_direct {dd:.2f} ms" in want[1]  # the line below the first: the point's medians


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
