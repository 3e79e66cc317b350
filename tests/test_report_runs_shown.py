"""Which runs the report headlines and draws. `report --cpu-runs` and `main --cpu-runs` ask for the
CPU-only headline from the command line: by default a CPU-only run is left out of the headline and
named (with the flag that asks for it); with the flag it is headlined like a GPU's, in the printed
summary and in the HTML report alike. A point's section says how many of the compared runs it draws.
Synthetic runs (made up, clearly not GPU data)."""
from pathlib import Path

import pytest

from dspark_lab.cli import main as cli
from dspark_lab.results.query.catalog import MAX_COMPARED
from dspark_lab.results.record import schema, store
from helpers import synthetic_runs

RUNS = (("run-gpu", "SYNTH-GPU-A", "1.0"), ("run-cpu", "none", "none"))


@pytest.fixture(autouse=True)
def _own_data_dir(tmp_path, monkeypatch):
    """Nothing a test does lands in the repo's data/."""
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))


def _write_runs(folder: Path) -> Path:
    """A GPU run and a CPU-only run (gpu 'none') as run files under folder/runs."""
    rows, _, headers = synthetic_runs(runs=RUNS, eps=(1, 2), batches=(8,), gammas=(4,))
    for h in headers:
        fp = {k: h[k] for k in ("gpu", "driver", "cuda", "torch")}
        with store.RunWriter.create(folder / "runs", fingerprint=fp, sweep={}, run_kind="sweep", run_id=h["run_id"]) as w:
            for pid, g in rows[rows.run_id == h["run_id"]].groupby("point_id", sort=False):
                w.write_point(pid, g.drop(columns=list(schema.FINGERPRINT_COLUMNS)).to_dict("records"), [])
    return folder


def _headlines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("headline: ")]


def test_report_leaves_a_cpu_only_run_out_of_the_headline_unless_asked(tmp_path, capsys):
    pytest.importorskip("dspark_lab.views.report")
    data = _write_runs(tmp_path / "recorded")
    plain, asked = tmp_path / "plain.html", tmp_path / "asked.html"
    assert cli.main(["report", str(data), "-o", str(plain), "--summary"]) == 0
    out = capsys.readouterr().out
    heads = _headlines(out)
    assert any("SYNTH-GPU-A" in h for h in heads) and not any("CPU only" in h and "not headlined" not in h for h in heads)
    assert "1 CPU-only run(s) not headlined" in out and "--cpu-runs" in out
    assert "1 CPU-only run(s) not headlined" in plain.read_text()
    assert cli.main(["report", str(data), "-o", str(asked), "--summary", "--cpu-runs"]) == 0
    out = capsys.readouterr().out
    heads = _headlines(out)
    assert "not headlined" not in out and "not headlined" not in asked.read_text()
    assert len(heads) == 2 and any("SYNTH-GPU-A" in h for h in heads) and any("CPU only" in h for h in heads)


def test_main_takes_the_flag_too_and_both_helps_document_it(tmp_path, capsys):
    data = _write_runs(tmp_path / "recorded")
    code = cli.main(["main", "--data", str(data), "-o", str(tmp_path / "r.html"), "--cpu-runs", "--no-progress"])
    out = capsys.readouterr().out
    if "No CUDA device" not in out:
        pytest.skip("a CUDA machine: main would measure")
    assert code == 0 and "not headlined" not in out and any("CPU only" in h for h in _headlines(out))
    for command in ("report", "main"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--cpu-runs headline CPU-only runs too" in text
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    assert f"(default {MAX_COMPARED})" in " ".join(capsys.readouterr().out.split())


def test_a_point_section_says_how_many_of_the_compared_runs_it_draws():
    """The preface counts the compared runs; a featured point that some of them did not record draws
    fewer: its section says how many and names the others (two runs, only one with the EP-1 twin)."""
    import re

    import pandas as pd

    from dspark_lab.results.query.runs import Runs
    from dspark_lab.views import report

    a = synthetic_runs(runs=(("run-a", "SYNTH-GPU-A", "1.0"),), eps=(1, 2), batches=(8,), gammas=(4,))
    b = synthetic_runs(runs=(("run-b", "SYNTH-GPU-B", "2.0"),), eps=(2,), batches=(8,), gammas=(4,))
    b[2][0]["recorded_at"] = "2026-01-02T10:00:00+00:00"
    runs = Runs(pd.concat([a[0], b[0]]), pd.concat([a[1], b[1]]), a[2] + b[2])
    page = report.build_html(runs)
    assert "Compared in the figures: 2 of 2 run(s)" in page
    sections = dict(re.findall(r"<h2>(EP \d)[^<]*</h2>\s*(.*?)(?=<h2>|$)", page, flags=re.S))
    label_b = runs.labels()["run-b"]
    assert f"Drawn here: 1 of the 2 compared runs; without this point: {label_b}." in sections["EP 1"]
    assert "Drawn here" not in sections["EP 2"]  # both runs hold the reference point
