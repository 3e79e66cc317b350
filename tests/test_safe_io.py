"""Imports flow one way (the results layer, figures and report load without torch), one writer per
run file, and the report's output never harms recorded data and fails with one line and its own code."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dspark_lab.cli import main as cli
from dspark_lab.results.loading import load as run_load
from dspark_lab.results.record import store

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
FP = {"gpu": "TEST-GPU", "driver": "1.0", "cuda": "13.0", "torch": "2.x"}


def _figure_modules() -> list[str]:
    """The views' figure modules, found on disk (figures*.py, and figures/ if it is a package)."""
    views = ROOT / "dspark_lab" / "views"
    files = sorted(views.glob("figures*.py")) + sorted(views.glob("figures/*.py"))
    return [".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for f in files]


@pytest.mark.parametrize("module,absent", [
    ("dspark_lab.results", ("torch", "plotly")), ("dspark_lab.results.query.runs", ("torch", "plotly")),
    ("dspark_lab.results.record.store", ("torch", "plotly")), ("dspark_lab.measure", ("torch",)),
    ("dspark_lab.measure.ranges", ("torch",)), ("dspark_lab.views.report", ("torch",)),
    *((m, ("torch",)) for m in _figure_modules()),
])
def test_views_and_the_results_layer_do_not_import_torch(module, absent):
    """In a fresh process: the results layer loads neither torch nor plotly, the views' figures no torch."""
    code = f"import {module}, sys; print(sorted(m for m in {absent!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"{module} imports {out.stdout.strip()}"


def test_the_headline_and_a_report_need_no_torch(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from dspark_lab.views import report
        from dspark_lab.results import Runs
        runs = Runs.load({str(ROOT / 'data')!r})
        print(runs.headline().lines()[0][:9])
        report.write_html({str(tmp_path / 'r.html')!r}, runs)
        print('torch' in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["headline:", "False"]


# -- one writer per run file ------------------------------------------------------------------------
RESUMER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from types import SimpleNamespace
    from dspark_lab.cli import main as cli, sweep_command
    from dspark_lab.run import point
    from dspark_lab.results.record.rows import build_row

    path, ready, gate = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

    def measure(cfg, strategies, on_progress=None):
        ready.touch()
        while not gate.exists():  # hold the file until the test lets go
            time.sleep(0.05)
        rows = [build_row(point_id=point.point_id(cfg), strategy=s, trial=t, step_ms=1.0, ep_size=cfg.ep_size,
                          batch_size=cfg.batch_size, gamma=cfg.gamma) for s in strategies for t in range(cfg.trials)]
        return SimpleNamespace(rows=rows, timelines=[])

    point.measure_point = measure
    point.point_id = lambda cfg: f"ep{cfg.ep_size}-bs{cfg.batch_size}-g{cfg.gamma}"
    sweep_command.fingerprint = lambda: %r
    sys.exit(cli.main(["sweep", "--resume", "--no-progress", "--out", path]))
""") % (FP,)


def test_two_concurrent_resumes_give_one_writer_and_one_clear_refusal(tmp_path):
    from dspark_lab.config import LabConfig
    from dspark_lab.run.sweep import SweepSpec

    spec = SweepSpec(ep_sizes=(1,), batch_sizes=(1, 4), gammas=(2,), strategies=("device_direct", "persistent_fill"),
                     base=LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=2, device="cpu"))
    with store.RunWriter.create(tmp_path / "run.jsonl", fingerprint=FP, sweep=spec.to_dict(), run_kind="sweep") as w:
        path = w.path
    script = tmp_path / "resume.py"
    script.write_text(RESUMER)
    ready, gate = tmp_path / "ready", tmp_path / "gate"
    first = subprocess.Popen([sys.executable, str(script), str(path), str(ready), str(gate)], env=ENV,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():  # the first resume holds the file and is measuring
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first resume never started measuring"
            time.sleep(0.05)
        second = subprocess.run([sys.executable, str(script), str(path), str(tmp_path / "r2"), str(gate)], env=ENV,
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == cli.EXIT_BUSY
        assert f"cannot resume: {path} is being written by another dspark-lab process" in second.stderr
        assert "Traceback" not in second.stderr and not (tmp_path / "r2").exists()
    finally:
        gate.touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    rows = run_load.load(path).rows
    assert len(rows) == len(spec) * 2 * 2 and not rows.duplicated(["point_id", "strategy", "trial"]).any()


def test_a_held_file_refuses_a_second_writer_in_process(tmp_path):
    with store.RunWriter.create(tmp_path / "run.jsonl", fingerprint=FP, sweep={}, run_kind="single_point") as w:
        with pytest.raises(store.RunFileBusy, match="being written by another"):
            store.RunWriter.open(w.path)
    with store.RunWriter.open(w.path):  # released on close: the next writer gets it
        pass


# -- report -o ----------------------------------------------------------------------------------------
@pytest.fixture
def recorded(tmp_path):
    from dspark_lab.results.record.rows import build_row

    with store.RunWriter.create(tmp_path / "data" / "runs", fingerprint=FP, sweep={}, run_kind="single_point") as w:
        w.write_point("p", [build_row(point_id="p", strategy=s, trial=t, step_ms=1.0 + t, ep_size=8, batch_size=8,
                                      gamma=4, workload="sglang_profile")
                            for s in ("device_direct", "persistent_fill") for t in range(3)])
    return w.path


def report(argv, capsys):
    code = cli.main(["report", *argv])
    out = capsys.readouterr()
    return code, out.err


def test_report_refuses_to_overwrite_a_run_file(recorded, tmp_path, capsys):
    before = recorded.read_bytes()
    code, err = report([str(recorded), "-o", str(recorded)], capsys)
    assert code == cli.EXIT_REFUSED and err.strip() == f"dspark-lab: {recorded}: is a run file; refusing to overwrite recorded data"
    disguised = tmp_path / "old-report.html"  # a run file under another name
    disguised.write_bytes(before)
    code, err = report([str(recorded), "-o", str(disguised)], capsys)
    assert code == cli.EXIT_REFUSED and "is a run file" in err
    assert recorded.read_bytes() == before and disguised.read_bytes() == before


def test_report_refuses_to_write_into_a_runs_folder(recorded, capsys):
    code, err = report([str(recorded), "-o", str(recorded.parent / "report.html")], capsys)
    assert code == cli.EXIT_REFUSED and "is a runs folder" in err
    assert sorted(p.name for p in recorded.parent.iterdir()) == [recorded.name]


@pytest.mark.parametrize("where,why", [
    ("dir", "is a directory"), ("file-parent", "is a file, not a folder"), ("proc", "cannot write it"),
])
def test_report_output_that_cannot_be_written_is_one_line_and_its_own_code(recorded, tmp_path, capsys, where, why):
    out = {"dir": tmp_path, "file-parent": recorded.parent.parent.parent / "notes.txt" / "report.html",
           "proc": Path("/proc/report.html")}[where]
    if where == "file-parent":
        out.parent.write_text("a file")
    code, err = report([str(recorded), "-o", str(out)], capsys)
    assert code == cli.EXIT_CANNOT_WRITE, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and why in lines[0] and "Traceback" not in err


def test_report_on_a_full_disk_leaves_nothing_behind(recorded, tmp_path, capsys, monkeypatch):
    from dspark_lab.results.record import output

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output.os, "fsync", full)
    out = tmp_path / "out" / "report.html"
    code, err = report([str(recorded), "-o", str(out)], capsys)
    assert code == cli.EXIT_CANNOT_WRITE and err.strip() == f"dspark-lab: {out}: cannot write it (No space left on device)"
    assert list(out.parent.iterdir()) == []  # no half report, no temporary file


def test_report_creates_missing_parents(recorded, tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "report.html"
    code, err = report([str(recorded), "-o", str(out)], capsys)
    assert code == 0, err
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert oct(out.stat().st_mode & 0o777) != oct(0o600)  # an ordinary file, not a private temp file


@pytest.mark.parametrize("command", ["report", "sweep", "main"])
def test_help_documents_the_exit_codes(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for code in (cli.EXIT_BUSY, cli.EXIT_REFUSED, cli.EXIT_CANNOT_WRITE):
        assert f"; {code} " in text
    assert "run file is being written by another process" in text


def test_sweep_name_labels_the_run(tmp_path, capsys, monkeypatch):
    from dspark_lab.results import Runs

    with store.RunWriter.create(tmp_path / "a.jsonl", fingerprint=FP, sweep={}, run_kind="single_point", name="baseline box") as w:
        pass
    assert json.loads(w.path.read_text().splitlines()[0])["name"] == "baseline box"
    from dspark_lab.results.record.rows import build_row

    with store.RunWriter.open(w.path) as w2:
        w2.write_point("p", [build_row(point_id="p", strategy="device_direct", trial=0, step_ms=1.0)])
    assert Runs.load(w.path).labels() == {w.run_id: "baseline box"}
