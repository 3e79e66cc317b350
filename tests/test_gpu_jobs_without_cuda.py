"""The jobs that measure on a GPU, asked for on this CPU machine: `sweep` and `ep` say in one line
that CUDA is needed (and how to run on the CPU instead), exit 6 (nothing could be measured here) and
write no run file; `main` keeps its no-GPU path: it says so and reports the recorded runs, adding
none. Nothing here may measure: the measuring bodies are replaced by ones that fail the test."""
from __future__ import annotations

import pytest

from dspark_lab.cli import ep_command
from dspark_lab.cli import main as cli
from dspark_lab.cli.exits import EXIT_NOT_CHECKED
from dspark_lab.cli.needs_cuda import cuda_available
from dspark_lab.results.record import store
from dspark_lab.run import point
from dspark_lab.run.sweep_spec import PRESETS

pytestmark = pytest.mark.skipif(cuda_available(), reason="this machine has CUDA: the jobs would measure")


@pytest.fixture
def data(tmp_path, monkeypatch):
    """The data dir the jobs default to, and measuring made a failure."""
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))

    def measured(*a, **kw):
        raise AssertionError("a GPU job measured on a machine without CUDA")
    monkeypatch.setattr(point, "measure_point", measured)
    monkeypatch.setattr(ep_command, "run_ep", measured)
    return tmp_path / "data"


def files_under(folder):
    return sorted(p.relative_to(folder) for p in folder.rglob("*")) if folder.exists() else []


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("argv", [["sweep", "--preset", "quick"], ["sweep", "--ep", "1", "--batch", "1", "--gamma", "2"],
                                  ["sweep", "--device", "auto", "--no-progress"]])
def test_a_sweep_without_cuda_says_so_in_one_line_exits_6_and_writes_nothing(data, capsys, argv):
    assert cli.main(argv) == EXIT_NOT_CHECKED == 6
    line = one_line(capsys.readouterr().err)
    assert "sweep needs a CUDA GPU" in line and "--device cpu" in line and "no run file written" in line
    assert files_under(data) == []


def test_resuming_a_gpu_sweep_without_cuda_is_refused_and_leaves_the_file_as_it_was(data, capsys):
    from dspark_lab.cli import sweep_command

    spec = PRESETS["quick"]  # its device: auto; started here (a run of another machine is refused anyway)
    with store.RunWriter.create(data / "runs", fingerprint=sweep_command.fingerprint(), sweep=spec.to_dict(),
                                run_kind="sweep") as w:
        path = w.path
    before = path.read_bytes()
    assert cli.main(["sweep", "--resume", "--no-progress", "--out", str(path)]) == EXIT_NOT_CHECKED
    assert "sweep needs a CUDA GPU" in one_line(capsys.readouterr().err)
    assert path.read_bytes() == before and files_under(data) == [path.parent.relative_to(data), path.relative_to(data)]


@pytest.mark.parametrize("argv", [["ep"], ["ep", "--world", "2", "--dispatch", "allreduce"]])
def test_ep_without_cuda_says_so_in_one_line_exits_6_and_writes_nothing(data, capsys, argv):
    assert cli.main(argv) == EXIT_NOT_CHECKED
    line = one_line(capsys.readouterr().err)
    assert "ep needs a CUDA GPU" in line and "--backend gloo" in line
    assert files_under(data) == []


def test_main_without_cuda_reports_the_recorded_runs_and_adds_none(data, capsys, tmp_path):
    from helpers import write_synthetic_runs

    write_synthetic_runs(data)
    before = files_under(data)
    assert cli.main(["main", "-o", str(tmp_path / "report.html"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No CUDA device on this machine") and "nothing is measured here" in out
    assert files_under(data) == before and (tmp_path / "report.html").stat().st_size > 0


def test_the_exit_status_is_in_every_measuring_command_s_help(capsys):
    for command in ("sweep", "main"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "6 nothing could be measured here (no CUDA device: `sweep` without --device cpu" in text
