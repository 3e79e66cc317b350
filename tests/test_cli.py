"""The command line: bad arguments, --help, a real sweep killed and resumed, failed points, reports."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from dspark_lab import strategies
from dspark_lab.cli import ep as ep_cli
from dspark_lab.cli import options
from dspark_lab.cli import main as cli
from dspark_lab.cli.lists import parse_ints, parse_strategies
from dspark_lab.results.record import schema
from dspark_lab.config import FIELDS, LabConfig, choices_of, type_of
from dspark_lab.results.loading import load as run_load
from dspark_lab.results.record.store import DataWarning, RunWriter
from dspark_lab.run import sweep_spec
from dspark_lab.run.sweep import GRID_FIELDS, SweepSpecError
from dspark_lab.run.point import point_id  # the point's own id, as measure_point's rows carry it

REPO = Path(__file__).resolve().parent.parent
TINY_ARGS = ["--model", "tiny", "--workload", "tiny", "--steps", "3", "--warmup", "1", "--trials", "2",
             "--device", "cpu", "--strategy", "device_direct,persistent_fill", "--no-progress"]


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    """Nothing a test does lands in the repo's data/."""
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))


def run_main(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        loaded = run_load.load(path)
        return loaded.rows, loaded.timelines, loaded.headers


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, expected", [
    (["sweep", "--ep", "3"], ["--ep", "divisor", "[1, 2, 4, 8]", "got 3"]),
    (["sweep", "--ep", "1,x"], ["--ep", "'x' is not an integer", "1,2,4,8"]),
    (["sweep", "--batch", "0"], ["--batch", "not positive", "1 to 256"]),
    (["sweep", "--batch", "512"], ["--batch", "at most 256"]),
    (["sweep", "--gamma", "2,,4"], ["--gamma", "comma-separated"]),
    (["sweep", "--strategy", "fastest"], ["--strategy", "'fastest'", "device_direct", "persistent_fill"]),
    (["sweep", "--model", "huge"], ["--model", "'huge'", "small", "tiny", "medium"]),
    (["sweep", "--workload", "x"], ["--workload", "sglang_profile", "tiny"]),
    (["sweep", "--preset", "slow"], ["--preset", "default", "quick"]),
    (["sweep", "--steps", "0"], ["--steps", "integers >= 1"]),
    (["sweep", "--warmup", "-1"], ["--warmup", "integers >= 0"]),
    (["sweep", "--host-prep-scale", "1e9"], ["--host-prep-scale", "0 to 100"]),
    (["sweep", "--device", "tpu"], ["--device", "auto", "cpu", "cuda"]),
    (["sweep", "--retry-failed"], ["--retry-failed", "--resume"]),
    (["report", "/no/such/run.jsonl"], ["/no/such/run.jsonl"]),
    (["inspect", "m:step", "--steps", "0"], ["--steps", "allowed: 1 to 100000"]),
    (["diff", "a:x", "b:y", "--time-limit", "0"], ["--time-limit", "0.1"]),
    (["frobnicate"], ["invalid choice", "sweep", "report", "doctor", "main", "inspect", "diff"]),
    ([], ["COMMAND"]),
])
def test_bad_arguments_name_the_option_and_the_allowed_values(argv, expected, capsys):
    err = usage_error(argv, capsys)
    assert "Traceback" not in err
    for text in expected:
        assert text in err, (text, err)


def test_parse_ints():
    assert parse_ints("1,8", "ep_size") == (1, 8)
    assert parse_ints(" 2 , 4,4 ", "gamma") == (2, 4)
    with pytest.raises(SweepSpecError, match=r"--ep: 'x' is not an integer.*allowed: divisors.*1,2,4,8"):
        parse_ints("1,x", "ep_size", option="--ep")
    with pytest.raises(SweepSpecError, match=r"--batch: -1 is not positive.*1 to 256"):
        parse_ints("-1", "batch_size", option="--batch")
    with pytest.raises(SweepSpecError, match=r"gamma: expected comma-separated"):
        parse_ints("2,,4", "gamma")


def test_parse_strategies():
    assert parse_strategies("all") == strategies.BUILTIN
    assert parse_strategies("on_demand,device_direct") == ("on_demand", "device_direct")
    with pytest.raises(SweepSpecError, match=r"--strategy: unknown strategy 'fast'.*persistent_fill"):
        parse_strategies("fast,on_demand", option="--strategy")



def test_bad_arguments_in_a_subprocess_exit_2_without_a_traceback():
    p = subprocess.run([sys.executable, "-m", "dspark_lab.cli.main", "sweep", "--gamma", "zero"],
                       capture_output=True, text=True, cwd=REPO, env=_env(REPO / "unused"))
    assert p.returncode == 2 and "argument --gamma" in p.stderr and "Traceback" not in p.stderr


def test_cuda_device_without_cuda_is_a_clear_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    err = usage_error(["sweep", "--device", "cuda"], capsys)
    assert "--device" in err and "no CUDA device" in err


@pytest.mark.parametrize("command", ["sweep", "report", "doctor", "main", "inspect", "diff"])
def test_help_explains_every_option(command, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[command]._actions:
        assert action.help, f"{command}: {action.option_strings or action.dest} has no help"
        for opt in action.option_strings:
            assert opt in text
    assert "default: None" not in text


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _other_value(name: str):
    """A valid value of LabConfig field `name` that is not its default, and the argv that sets it."""
    f, flag = FIELDS[name], "--" + name.replace("_", "-")
    if type_of(f) is bool:
        return (not f.default), [("--no-" + flag[2:]) if f.default else flag]
    if choices_of(f) is not None:
        value = next(c for c in reversed(choices_of(f)) if c != f.default and c != "cuda")
    else:
        value = f.metadata["range"][0] + 2
    return value, [flag, str(value)]


@pytest.mark.parametrize("name", [n for n in FIELDS if n not in GRID_FIELDS])
def test_every_config_field_has_a_sweep_option_that_sets_it(name):
    value, argv = _other_value(name)
    parser = _subparser("sweep")
    spec, explicit = options.spec_from_args(parser.parse_args(argv), parser)
    assert explicit and getattr(spec.base, name) == value
    assert getattr(cli.PRESETS["default"].base, name) != value  # the option did it, not the preset
    help_text = " ".join(parser.format_help().split())
    assert FIELDS[name].metadata["help"].split(" (default")[0] in help_text


def test_ep_options_set_its_config_with_its_own_defaults():
    parser = _subparser("ep")
    args = parser.parse_args([])
    assert (args.steps, args.warmup, args.batch_size, args.model) == (50, 5, 8, "small")
    args = parser.parse_args(["--gamma", "8", "--workload", "tiny"])
    assert LabConfig(**{n: getattr(args, n) for n in ep_cli.CONFIG_FIELDS}).with_() == \
        LabConfig(gamma=8, workload="tiny", steps=50, warmup=5)
    with pytest.raises(SystemExit):
        parser.parse_args(["--steps", "0"])


# ---------------------------------------------------------------------------------------------
# A real sweep, killed and resumed (the runner on a tiny CPU config)
# ---------------------------------------------------------------------------------------------
def _env(data: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               DSPARK_DATA=str(data), PYTHONUNBUFFERED="1")
    return env


def _committed(path: Path) -> int:
    """Points whose commit record is completely on disk."""
    if not path.exists():
        return 0
    return sum(1 for line in path.read_bytes().split(b"\n")[:-1] if b'"kind":"point"' in line)


def _start(args, path: Path, tmp_path: Path, name: str) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "dspark_lab.cli.main", "sweep", *args, "--out", str(path)],
                            cwd=tmp_path, env=_env(tmp_path / "data"), stdout=log, stderr=subprocess.STDOUT)


def _wait_for_commits(proc: subprocess.Popen, path: Path, n: int, log: Path) -> None:
    while _committed(path) < n:
        if proc.poll() is not None:
            pytest.fail(f"sweep exited ({proc.returncode}) before {n} points were saved:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)


def test_killed_sweep_resumes_without_losing_or_doubling_rows(tmp_path):
    pytest.importorskip("dspark_lab.run.point")
    path = tmp_path / "run.jsonl"
    grid = ["--ep", "1,8", "--batch", "1,2", "--gamma", "2"]  # 4 points x 2 strategies x 2 trials
    expected = {(ep, bs, s, t) for ep in (1, 8) for bs in (1, 2)
                for s in ("device_direct", "persistent_fill") for t in (0, 1)}

    # 1) SIGKILL once the first point is on disk.
    p1 = _start(grid + TINY_ARGS, path, tmp_path, "run1")
    _wait_for_commits(p1, path, 1, tmp_path / "run1.log")
    p1.send_signal(signal.SIGKILL)
    p1.wait()
    done1 = _committed(path)
    assert 1 <= done1 < 4, "the sweep finished before it could be killed"
    committed_before = [json.loads(line)["point_id"] for line in path.read_text().splitlines()
                        if '"kind":"point"' in line]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # a kill may leave a partial line
        rows1 = run_load.load(path).rows
    assert rows1["point_id"].nunique() >= done1
    saved = rows1.set_index(["point_id", "strategy", "trial"])["step_ms"]

    # 2) --resume, then Ctrl-C (SIGINT) once another point is on disk: a clean stop.
    p2 = _start(["--resume", "--no-progress"], path, tmp_path, "run2")
    _wait_for_commits(p2, path, done1 + 1, tmp_path / "run2.log")
    p2.send_signal(signal.SIGINT)
    p2.wait(timeout=120)
    log2 = (tmp_path / "run2.log").read_text()
    done2 = _committed(path)
    if done2 < 4:  # interrupted mid-sweep (not just as it finished)
        assert p2.returncode == cli.EXIT_INTERRUPTED, log2[-3000:]
        assert "--resume" in log2 and "Traceback" not in log2
    assert "resume: " in log2 and f"{done1} of 4 points already recorded" in log2

    # 3) --resume to the end.
    p3 = _start(["--resume", "--no-progress"], path, tmp_path, "run3")
    assert p3.wait(timeout=300) == 0, (tmp_path / "run3.log").read_text()[-3000:]
    assert _committed(path) == 4

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        loaded = run_load.load(path)
        rows, timelines, headers = loaded.rows, loaded.timelines, loaded.headers
    assert len(headers) == 1
    keys = list(zip(rows.ep_size, rows.batch_size, rows.strategy, rows.trial))
    assert len(keys) == len(set(keys)), "a row was doubled"
    assert set(keys) == expected, "a row was lost"
    assert rows["status"].eq("ok").all()
    assert set(timelines.groupby(["point_id", "strategy"]).size().index.get_level_values(0)) == set(rows.point_id)
    # Rows saved before the kill are kept as they were (committed points are never redone).
    after = rows.set_index(["point_id", "strategy", "trial"])["step_ms"]
    for pid in committed_before:
        assert after.loc[pid].equals(saved.loc[pid])
    # And each point was measured with both strategies' trials interleaved in one call.
    assert rows.groupby("point_id")["strategy"].nunique().eq(2).all()


# ---------------------------------------------------------------------------------------------
# Failed points, resume errors, reports, main, doctor (in-process, with a fake measure)
# ---------------------------------------------------------------------------------------------
def _fake_measure(fail_ep=None):
    def measure(cfg, strategies=None, *, on_progress=None, **adaptive):  # adaptive: target_ci_pct, time_cap_s
        if cfg.ep_size == fail_ep:
            raise RuntimeError(f"CUDA out of memory at ep {cfg.ep_size}")
        rows = []
        for t in range(cfg.trials):
            for s in strategies:
                r = {c: None for c in schema.ROW_COLUMNS}
                r.update(point_id=point_id(cfg), ep_size=cfg.ep_size, batch_size=cfg.batch_size, gamma=cfg.gamma, strategy=s,
                         model=cfg.model, workload=cfg.workload, status="ok", error="", trial=t,
                         steps=cfg.steps, step_ms=2.0 if s == "device_direct" else 1.0,
                         syncs_per_step=1.0 if s == "device_direct" else 0.0)
                rows.append(r)
        return SimpleNamespace(rows=rows, timelines=[], traces={})

    return measure


@pytest.fixture
def fake_runner(monkeypatch):
    from dspark_lab.run import point as runner

    def install(fail_ep=None):
        monkeypatch.setattr(runner, "measure_point", _fake_measure(fail_ep))

    return install


def test_a_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path, capsys, fake_runner):
    fake_runner(fail_ep=8)
    path = tmp_path / "r.jsonl"
    code, out, err = run_main(["sweep", "--ep", "1,8", "--batch", "1,4", "--gamma", "2", *TINY_ARGS,
                               "--out", str(path)], capsys)
    assert code == 1
    assert "2 measured, 2 failed" in err and "CUDA out of memory" in err
    rows, _, _ = load(path)
    assert set(rows.loc[rows.status == "failed", "ep_size"]) == {8}
    assert rows.loc[rows.status == "failed", "error"].str.contains("out of memory").all()
    assert len(rows[rows.status == "ok"]) == 2 * 2 * 2

    fake_runner(fail_ep=None)  # --retry-failed measures them again
    code, _, err = run_main(["sweep", "--resume", "--retry-failed", "--no-progress", "--out", str(path)], capsys)
    assert code == 0 and "2 measured, 0 failed, 2 already recorded" in err
    rows, _, _ = load(path)
    assert rows.status.eq("ok").all() and len(rows) == 4 * 2 * 2


def test_new_run_goes_to_data_runs_and_resume_picks_the_latest(tmp_path, capsys, fake_runner):
    fake_runner()
    code, _, err = run_main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS], capsys)
    assert code == 0
    files = list((tmp_path / "data" / "runs").glob("*.jsonl"))
    assert len(files) == 1 and str(files[0]) in err
    code, _, err = run_main(["sweep", "--resume", "--no-progress"], capsys)
    assert code == 0 and "1 already recorded" in err


def test_resume_errors_are_clear(tmp_path, capsys, fake_runner):
    fake_runner()
    code, _, err = run_main(["sweep", "--resume", "--out", str(tmp_path / "none.jsonl")], capsys)
    assert code == 2 and "cannot resume" in err and "none.jsonl" in err
    path = tmp_path / "r.jsonl"
    run_main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS, "--out", str(path)], capsys)
    code, _, err = run_main(["sweep", "--resume", "--gamma", "4", *TINY_ARGS, "--out", str(path)], capsys)
    assert code == 2 and "another sweep" in err
    # A run recorded on another machine is not resumed here.
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["fingerprint"]["gpu"] = "Some Other GPU"
    path.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    code, _, err = run_main(["sweep", "--resume", "--out", str(path)], capsys)
    assert code == 2 and "Some Other GPU" in err and "new run" in err
    with pytest.raises(SystemExit):  # an existing file is never overwritten
        cli.main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS, "--out", str(path)])
    assert "exists" in capsys.readouterr().err


def _row(cfg: LabConfig, strategy: str, trial: int, step_ms: float, syncs: float) -> dict:
    """A complete recorded row, as a GPU run writes it (numbers made up for the test)."""
    r = {c: 0.0 for c in schema.TRACE_COLUMNS}
    r.update(point_id=f"p{cfg.ep_size}", ep_size=cfg.ep_size, batch_size=cfg.batch_size, gamma=cfg.gamma,
             strategy=strategy, model=cfg.model, workload=cfg.workload, graph=cfg.graph, device="cuda",
             query_token_num=cfg.query_token_num, bucket_batch_size=cfg.bucket_batch_size,
             num_tokens=cfg.num_tokens, target_verify_ms=cfg.workload_costs.target_verify_ms,
             predicate=cfg.ep_size > 1, status="ok", error="", trial=trial, steps=cfg.steps, step_ms=step_ms,
             step_ms_p50=step_ms, step_ms_p90=step_ms, profiled_step_ms=step_ms, syncs_per_step=syncs,
             stream_syncs_per_step=syncs, gpu_busy_ms=step_ms, sync_site="",
             debug_syncs_per_step=syncs, sync_count_mismatch=False, sync_note="", wait_charges="{}", wait_note="")
    return r


def _recorded(tmp_path: Path) -> Path:
    w = RunWriter.create(tmp_path / "data" / "runs", fingerprint={"gpu": "NVIDIA H200", "driver": "580.1",
                         "cuda": "13.0", "torch": "2.11.0"}, sweep={}, run_kind="sweep")
    for ep in (1, 8):
        cfg = LabConfig(ep_size=ep, batch_size=8, gamma=4)
        rows = [_row(cfg, s, t, 7.1 if s == "device_direct" else 5.96, 1.0 if s == "device_direct" else 0.0)
                for t in range(3) for s in ("device_direct", "persistent_fill")]
        w.write_point(f"p{ep}", rows, [{"kind": "timeline", "point_id": f"p{ep}", "strategy": "device_direct",
                                         "segments": [["host", "prep", 0.0, 1.0, "prep"]]}])
    w.close()
    return w.path


def test_report_writes_html_and_warns_on_damaged_files(tmp_path, capsys):
    pytest.importorskip("dspark_lab.views.report")
    path = _recorded(tmp_path)
    last = len(path.read_text().splitlines()) + 1
    with open(path, "ab") as f:
        f.write(b'{"kind":"row","point_id":"p9"')  # a truncated last line
    out = tmp_path / "out" / "report.html"
    code, stdout, err = run_main(["report", str(path.parent), "-o", str(out), "--summary"], capsys)
    assert code == 0, err
    assert out.read_text().lstrip().lower().startswith("<!doctype html")
    assert f"{path}:{last}: truncated record" in err
    assert "NVIDIA H200" in stdout and "device_direct" in stdout and "7.10" in stdout


def test_report_skips_a_file_of_another_schema_version_and_says_so(tmp_path, capsys):
    path = _recorded(tmp_path / "bad")
    good = _recorded(tmp_path / "good")
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["schema_version"] = 99
    path.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    code, stdout, err = run_main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 0, err
    assert f"skipped: {path}:1: schema_version 99 is not supported" in err and "file skipped" in err
    assert str(good) not in err  # the good run loads silently
    assert "1 problem(s) skipped" in stdout and (tmp_path / "r.html").exists()
    # only the file of another version is alone: nothing to report, exit 1, still no traceback
    code, _, err = run_main(["report", str(path), "-o", str(tmp_path / "r2.html")], capsys)
    assert code == 1 and "schema_version 99" in err and "Traceback" not in err
    assert not (tmp_path / "r2.html").exists()


def test_report_without_runs_says_so(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, _, err = run_main(["report", str(tmp_path / "empty"), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 1 and "no recorded rows" in err


def test_main_without_cuda_reports_the_recorded_runs(tmp_path, capsys, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: main would run the sweep")
    pytest.importorskip("dspark_lab.views.report")
    _recorded(tmp_path)
    out = tmp_path / "out" / "report.html"
    code, stdout, err = run_main(["main", "-o", str(out)], capsys)
    assert code == 0, err
    assert "No CUDA device" in stdout and out.exists()
    assert "NVIDIA H200" in stdout and "EP 1" in stdout and "EP 8" in stdout and "persistent_fill" in stdout


def test_main_without_cuda_and_without_recorded_runs(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code, stdout, err = run_main(["main", "-o", str(tmp_path / "r.html")], capsys)
    assert code == 1 and "No CUDA device" in stdout and "data" in err


def test_report_module_missing_is_a_clear_message(tmp_path, capsys, monkeypatch):
    _recorded(tmp_path)
    import dspark_lab.views

    monkeypatch.setitem(sys.modules, "dspark_lab.views.report", None)  # import fails
    monkeypatch.delattr(dspark_lab.views, "report", raising=False)
    code, _, err = run_main(["report", "-o", str(tmp_path / "r.html")], capsys)
    assert code == 1 and "dspark_lab.views.report" in err


def test_doctor_prints_the_fingerprint(capsys):
    code, out, _ = run_main(["doctor"], capsys)
    assert code == 0
    for key in ("gpu", "driver", "cuda", "torch", "python"):
        assert any(line.startswith(key + " ") for line in out.splitlines()), out
    assert "probe" in out
    code, out, _ = run_main(["doctor", "--json", "--no-probe"], capsys)
    d = json.loads(out)
    assert d["probe"] is None and "torch" in d["fingerprint"]


def test_main_with_cuda_runs_the_sweep_into_data_runs_then_reports(tmp_path, capsys, monkeypatch, fake_runner):
    """The CUDA branch of `main`, with the GPU parts stubbed (a fake measure, probe and fingerprint)."""
    import torch

    from dspark_lab.measure import probe

    pytest.importorskip("dspark_lab.views.report")
    fake_runner()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(probe, "fingerprint", lambda: {"gpu": "Fake GPU", "driver": "1", "cuda": "13.0", "torch": "2.x"})
    monkeypatch.setattr(probe, "run_probe", lambda: {"available": True, "pageable_nonblocking_blocks": False})
    _recorded(tmp_path)  # an earlier run on another GPU is reported alongside
    out = tmp_path / "out" / "report.html"
    code, stdout, err = run_main(["main", "--preset", "quick", "--no-progress", "-o", str(out)], capsys)
    assert code == 0, err
    runs = sorted((tmp_path / "data" / "runs").glob("*.jsonl"))
    assert len(runs) == 3 and out.exists()  # the recorded run, the sweep, the reference point
    rows, _, headers = load(tmp_path / "data")
    mine = [h for h in headers if h["fingerprint"]["gpu"] == "Fake GPU" and h["run_kind"] == "quick_sweep"]
    assert len(mine) == 1 and mine[0]["probe"]["available"] is True
    assert mine[0]["sweep"] == cli.PRESETS["quick"].to_dict()
    ref = cli.PRESETS["quick"].n_rows + sweep_spec.reference_spec(cli.PRESETS["quick"]).n_rows
    assert len(rows[rows.gpu == "Fake GPU"]) == ref
    assert "Fake GPU" in stdout and "NVIDIA H200" in stdout


def test_sweep_name_is_recorded_and_labels_the_run(tmp_path, capsys, fake_runner):
    from dspark_lab.results import Runs

    fake_runner()
    path = tmp_path / "named.jsonl"
    code, _, err = run_main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS, "--name", "my box",
                             "--out", str(path)], capsys)
    assert code == 0, err
    assert json.loads(path.read_text().splitlines()[0])["name"] == "my box"
    runs = Runs.load(path)
    assert list(runs.labels().values()) == ["my box"] and set(runs.rows.run_label) == {"my box"}


@pytest.mark.parametrize("grid, kind", [(["--ep", "1", "--batch", "1", "--gamma", "2"], "single_point"),
                                        (["--ep", "1", "--batch", "1,8", "--gamma", "2"], "sweep")])
def test_a_new_run_says_its_kind_in_its_header(tmp_path, capsys, fake_runner, grid, kind):
    fake_runner()
    path = tmp_path / "run.jsonl"
    code, _, err = run_main(["sweep", *grid, *TINY_ARGS, "--out", str(path)], capsys)
    assert code == 0, err
    assert json.loads(path.read_text().splitlines()[0])["run_kind"] == kind
