"""The main job ends on a headline with a CI: `dspark-lab main` measures the reference point to the
headline's own standard (noise.MIN_QUIET_ROUNDS quiet rounds, then its CI target), and the headline
takes the newest run of a machine that meets that standard, naming each newer run it passed over.
On recorded H200 runs and, for the CUDA branch of `main`, a fake measure (nothing is timed)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dspark_lab.results import Runs
from dspark_lab.results.query.headline import DETAIL, FIRST_LINE_MAX
from dspark_lab.results.record import schema
from dspark_lab.results.rules import noise
from dspark_lab.results.rules.selection import REFERENCE
from dspark_lab.run import sweep_spec
from dspark_lab.run.point import point_id  # the point's own id, as measure_point's rows carry it

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
REFERENCE_RUNS = sorted(RUNS.glob("h200-reference-adaptive-after-spin-fix-run*.jsonl"))
SWEEP = RUNS / "h200-default-sweep-20261130-171206-3e7c5c.jsonl"  # 4 trials per strategy a point


def restamped(src: Path, folder: Path, run_id: str, created_at: str) -> Path:
    """A copy of a recorded run file, started at `created_at` (newer than every recorded run)."""
    lines = src.read_text().splitlines()
    header = json.loads(lines[0])
    header.update(run_id=run_id, created_at=created_at)
    out = folder / f"restamped-{src.name}"
    out.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return out


@pytest.fixture
def newest_sweep_after_references(tmp_path):
    assert len(REFERENCE_RUNS) == 3 and SWEEP.exists(), "the committed H200 runs"
    folder = tmp_path / "runs"
    folder.mkdir()
    for f in REFERENCE_RUNS:
        (folder / f.name).write_text(f.read_text())
    restamped(SWEEP, folder, "20261202-001000-aaaaaa", "2026-12-02T00:10:00+00:00")
    return folder


def test_the_headline_passes_over_a_newer_run_without_a_ci_and_names_it(newest_sweep_after_references):
    runs = Runs.load(newest_sweep_after_references)
    sweep_label = runs.label_of("20261202-001000-aaaaaa")
    newest_reference = runs.newest_started([r for r in runs.run_ids() if r != "20261202-001000-aaaaaa"])[0]
    head = runs.headline()
    (entry,) = head.entries
    assert entry["run_id"] == newest_reference and entry["skipped_runs"] == []
    assert entry["ratio"]["quiet_rounds"] >= noise.MIN_QUIET_ROUNDS and entry["ratio"]["ci_low"] is not None
    (passed,) = entry["passed_over"]
    sweep_rounds = noise.headline(runs.reference(run_id="20261202-001000-aaaaaa"))["quiet_rounds"]
    assert passed == {"run_id": "20261202-001000-aaaaaa", "label": sweep_label, "quiet_rounds": sweep_rounds}
    assert sweep_rounds < noise.MIN_QUIET_ROUNDS
    (block,) = head.blocks()
    assert "95% CI" in block[0] and block[0].endswith(runs.label_of(newest_reference))
    assert f"{DETAIL}passed over {sweep_label} (newer, {sweep_rounds} quiet rounds: no CI)" in block[1:]
    assert "passed over" in head.rule and str(noise.MIN_QUIET_ROUNDS) in head.rule


def first_lines(text: str) -> list[str]:
    """The headline's first lines in printed text: one a machine."""
    return [line for line in text.splitlines() if line.startswith("headline: ")]


def test_the_first_line_is_the_pair_s_ratio_its_ci_and_rounds_and_the_run_the_rest_below():
    runs = Runs.load(RUNS)
    head = runs.headline()
    (block,) = head.blocks()
    (entry,) = head.entries
    r = entry["ratio"]
    assert FIRST_LINE_MAX == 160 and len(block[0]) <= FIRST_LINE_MAX
    assert block[0] == (f"headline: {r['a']} / {r['b']} step time = {r['ratio']:.3f} (95% CI {r['ci_low']:.3f}–"
                        f"{r['ci_high']:.3f}, ±{r['half_width_pct']:.1f}%) over {r['quiet_rounds']} quiet rounds"
                        f" · {entry['label']}")
    below = block[1:]
    assert below and all(line.startswith(DETAIL) and not line.startswith(DETAIL + " ") for line in below)
    assert below[0] == f"{DETAIL}at {entry['point']}: median step " + ", ".join(
        f"{s['strategy']} {s['median_ms']:.2f} ms" for s in entry["strategies"])
    assert f"{DETAIL}{entry['comparison']['verdict']}" in below  # the secondary comparison: on a line of its own
    assert entry["comparison"]["verdict"] not in block[0]
    assert head.lines() == block and head.text() == "\n".join(block + [head.rule])


def test_a_run_label_too_long_for_the_first_line_is_cut_there_and_nothing_else_moves(newest_sweep_after_references):
    head = Runs.load(newest_sweep_after_references).headline()
    (entry,) = head.entries
    entry["label"] = "H200 · " + "a run named at great length " * 8
    (block,) = head.blocks()
    assert len(block[0]) == FIRST_LINE_MAX and block[0].endswith("…") and "95% CI" in block[0]
    assert block[0].startswith(f"headline: {entry['ratio']['a']} / {entry['ratio']['b']} step time = ")


def test_a_machine_with_no_ratio_and_one_withheld_open_on_a_short_first_line_too(newest_sweep_after_references):
    from dspark_lab.results.query.headline import Headline

    head = Runs.load(newest_sweep_after_references).headline()
    (entry,) = head.entries
    lone = {**entry, "ratio": None, "comparison": None}
    withheld = {"label": entry["label"], "skipped_runs": [{"label": entry["label"], "reason": "x" * 300}]}
    blocks = Headline(head.rule, [lone], [withheld]).blocks()
    assert [len(b[0]) <= FIRST_LINE_MAX for b in blocks] == [True, True]
    assert blocks[0][0].startswith("headline: no headline ratio (needs device_direct and another strategy)")
    assert blocks[1][1] == f"{DETAIL}skipped {entry['label']}: {'x' * 300}"


def test_where_no_run_meets_the_standard_the_newest_stands_without_a_ci(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    restamped(SWEEP, folder, "20261202-001000-aaaaaa", "2026-12-02T00:10:00+00:00")
    (entry,) = Runs.load(folder).headline().entries
    assert entry["run_id"] == "20261202-001000-aaaaaa" and entry.get("passed_over", []) == []
    assert noise.TOO_FEW_QUIET in entry["ratio"]["text"] and entry["ratio"]["ci_low"] is None


def test_the_reference_spec_is_the_headline_point_at_the_sweep_s_largest_ep():
    ref = sweep_spec.reference_spec(sweep_spec.DEFAULT_SWEEP)
    assert (ref.ep_sizes, ref.batch_sizes, ref.gammas) == ((8,), (REFERENCE.batch_size,), (REFERENCE.gamma,))
    assert ref.base.workload == REFERENCE.workload and ref.strategies == sweep_spec.DEFAULT_SWEEP.strategies
    assert sweep_spec.run_kind(ref, adaptive=True) == "reference"
    with pytest.raises(sweep_spec.SweepSpecError, match="EP size above 1") as e:
        sweep_spec.reference_spec(sweep_spec.DEFAULT_SWEEP.with_(ep_sizes=(1,)))
    assert e.value.field == "ep_size"


def fake_measure(calls: list):
    """measure_point's stand-in: the asked trials, or, asked for a CI target, the rounds the stop rule
    would take on a quiet machine (MIN_QUIET_ROUNDS + 2); device_direct ~1.4x non_blocking."""
    rng = np.random.default_rng(0)

    def measure(cfg, strategies=None, *, on_progress=None, target_ci_pct=None, time_cap_s=None):
        calls.append((cfg, target_ci_pct, time_cap_s))
        trials = cfg.trials if target_ci_pct is None else noise.MIN_QUIET_ROUNDS + 2
        rows = []
        for t in range(trials):
            for s in strategies:
                r = {c: None for c in schema.ROW_COLUMNS}
                r.update(point_id=point_id(cfg), ep_size=cfg.ep_size, batch_size=cfg.batch_size, gamma=cfg.gamma, strategy=s,
                         model=cfg.model, workload=cfg.workload, status="ok", error="", trial=t, steps=cfg.steps,
                         step_ms=(7.0 if s == "device_direct" else 5.0) * (1 + rng.normal(0, 0.01)))
                rows.append(r)
        from types import SimpleNamespace

        return SimpleNamespace(rows=rows, timelines=[], traces={})

    return measure


def test_the_main_job_measures_the_reference_point_to_the_headline_s_standard(tmp_path, monkeypatch, capsys):
    """`dspark-lab main` on CUDA (stubbed): the sweep, then the reference point to its CI target, so
    the headline it prints has a CI, from the run the main job made."""
    import torch

    from dspark_lab.cli import main as cli
    from dspark_lab.measure import probe
    from dspark_lab.run import point

    pytest.importorskip("dspark_lab.views.report")
    calls: list = []
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(point, "measure_point", fake_measure(calls))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(probe, "fingerprint", lambda: {"gpu": "Fake GPU", "driver": "1", "cuda": "13.0", "torch": "2.x"})
    monkeypatch.setattr(probe, "run_probe", lambda: {"available": True, "pageable_nonblocking_blocks": False})
    code = cli.main(["main", "--preset", "quick", "--no-progress", "-o", str(tmp_path / "report.html")])
    out = capsys.readouterr().out
    assert code == 0
    adaptive = [(cfg, ci, cap) for cfg, ci, cap in calls if ci is not None]
    assert [(c.ep_size, c.batch_size, c.gamma, c.workload) for c, _, _ in adaptive] == [
        (8, REFERENCE.batch_size, REFERENCE.gamma, REFERENCE.workload)]
    assert adaptive[0][1:] == (sweep_spec.REFERENCE_TARGET_CI_PCT, sweep_spec.REFERENCE_TIME_CAP_S)
    runs = Runs.load(tmp_path / "data")
    (ref,) = runs.runs_of_kind("reference")
    (entry,) = runs.headline().entries
    assert entry["run_id"] == ref and entry["ratio"]["ci_low"] is not None
    assert "95% CI" in entry["ratio"]["text"] and noise.TOO_FEW_QUIET not in out
    (first,) = first_lines(out)  # what the main job prints: the ratio, its CI and rounds, the run, short
    assert len(first) <= FIRST_LINE_MAX and "95% CI" in first and first.endswith(runs.label_of(ref))
    assert first_lines(out) == [head[0] for head in runs.headline().blocks()]
    header = next(h for h in runs.headers if h["run_id"] == ref)
    assert header["adaptive"] == {"target_ci_pct": sweep_spec.REFERENCE_TARGET_CI_PCT,
                                  "time_cap_s": sweep_spec.REFERENCE_TIME_CAP_S}


def test_a_cpu_only_run_is_not_headlined_unless_asked_and_is_named():
    """A CPU run copied in among the recorded ones: its step times say nothing of a GPU's syncs, so the
    headline leaves its machine out and names the run; asked with cpu_runs=True, it is headlined."""
    from helpers import synthetic_runs

    rows, tl, headers = synthetic_runs(runs=(("run-a", "SYNTH-GPU-A", "1.0"), ("run-cpu", "none", "none")))
    runs = Runs(rows, tl, headers)
    head = runs.headline()
    labels = [e["label"] for e in head.entries]
    assert len(labels) == 1 and "SYNTH-GPU-A" in labels[0]
    assert len(head.cpu_only) == 1 and "CPU only" in head.cpu_only[0]
    text = head.text()
    assert "1 CPU-only run(s) not headlined" in text and "cpu_runs=True" in text
    asked = runs.headline(cpu_runs=True)
    assert len(asked.entries) == 2 and asked.cpu_only == []
    alone = Runs(*synthetic_runs(runs=(("run-cpu", "none", "none"),))).headline()
    assert alone.entries == [] and "no recorded run holds" not in alone.text() and alone.cpu_only
