"""Hostile inputs, second pass: each case asserts its exact outcome. Paths that climb out (the fuzz
test of every command's output paths is tests/test_hardening_paths.py), row values out of range,
files that never end or never answer, a planted cache, tracebacks turned into one line, things
that were wrong without a word, and text from a run file on its way to a terminal.

Runs as root here and on CI: no case relies on a permission being refused."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pandas as pd
import pytest

from dspark_lab import guard
from dspark_lab import startup
from dspark_lab.cli import ep_command, main as cli
from dspark_lab.gallery import katas
from dspark_lab.model import calibration
from dspark_lab.parallel import ranks, run as ep_run
from dspark_lab.results import Runs
from dspark_lab.results.analyses import step_diff, sync_cost
from dspark_lab.results.loading import cache as run_cache
from dspark_lab.results.loading.load import DataWarning, load
from dspark_lab.results.record import inspect_record, store
from dspark_lab.results.record.regular_files import read_regular
from helpers import default_sigint, inspect_record as synthetic_record
from test_cli import fake_runner, run_main  # noqa: F401 - fake_runner: a fixture
from test_hardening_load import ROWS_PER_FILE, _entry, _quiet_load, _settled, two  # noqa: F401 - two: a fixture
from test_loading_reliability import base, lines, patch_header, patch_row, put, rows_of, timelines_of
from test_torchrun import TINY as TORCHRUN_TINY, TOKEN_ENV, _free_port, token  # noqa: F401 - token: a fixture

REPO = Path(__file__).resolve().parents[1]
HANG_DEADLINE_S = 120.0  # only a real hang reaches it (a load here takes well under a second)


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))


def finishes(fn, *args, **kwargs):
    """fn(*args) run in a thread: its result, or the test fails if it is still running at the deadline
    (a read blocked on a FIFO never returns; the thread is a daemon, so the session still ends)."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(HANG_DEADLINE_S)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} was still running after {HANG_DEADLINE_S:.0f} s (blocked)"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _to_dev_zero(p: Path) -> Path:
    p.symlink_to("/dev/zero")
    return p


# -- 1. paths that climb out (one per command; the fuzz test covers their combinations) --------------
def test_1_report_o_through_a_missing_folder_into_a_runs_folder_is_refused_and_makes_nothing(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs"
    run = base(runs, "one")
    before = {p.name: p.read_bytes() for p in runs.iterdir()}
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["report", str(runs), "-o", "missing/../runs/one.jsonl.html"], capsys)
    assert code == cli.EXIT_REFUSED
    assert err.splitlines()[-1] == f"dspark-lab: {runs / 'one.jsonl.html'}: {runs} is a runs folder; write the report " \
                                   "elsewhere (e.g. out/)"
    assert not (tmp_path / "missing").exists()
    assert {p.name: p.read_bytes() for p in runs.iterdir()} == before and run.exists()


@pytest.mark.parametrize("command", [["inspect", "t.py:f"], ["diff", "a.py:f", "b.py:g"]], ids=["inspect", "diff"])
@pytest.mark.parametrize("name", ["../../x", "../../../p", "/abs/p", "..", ".", "a/b", ""])
def test_1_a_name_that_is_not_one_file_name_is_a_usage_error_before_anything(tmp_path, capsys, command, name):
    with pytest.raises(SystemExit) as e:
        cli.main([*command, "--name", name, "--out", str(tmp_path / "out")])
    assert e.value.code == cli.EXIT_USAGE
    assert f"argument --name: name {ascii(name)} must be one file name" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("run_id", ["../../x", "/tmp/abs", "..", ".", "a/b", "x\0y"])
def test_1_a_run_id_that_is_not_one_file_name_is_refused_before_anything_is_made(tmp_path, run_id):
    with pytest.raises(ValueError, match="run_id .* must be one file name"):
        store.RunWriter.create(tmp_path / "runs", fingerprint={}, sweep={}, run_kind="single_point", run_id=run_id)
    assert list(tmp_path.iterdir()) == []


def _plant_traces(run: Path, what: str, outside: Path) -> Path:
    traces = run.with_suffix(".traces")
    if what == "symlink":
        traces.symlink_to(outside, target_is_directory=True)
    else:
        traces.write_text("not a folder")
    return traces


@pytest.mark.parametrize("what", ["symlink", "regular-file"])
def test_1_save_traces_never_writes_through_a_link_or_over_a_file_and_says_which(tmp_path, capsys, fake_runner, what):
    fake_runner()
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "r.jsonl"
    traces = _plant_traces(run, what, outside)
    code, _, err = run_main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", "--model", "tiny", "--workload",
                             "tiny", "--steps", "2", "--warmup", "0", "--trials", "1", "--device", "cpu",
                             "--strategy", "device_direct", "--no-progress", "--save-traces", "--out", str(run)], capsys)
    assert code == cli.EXIT_CANNOT_WRITE
    assert err.splitlines()[-1] == (f"dspark-lab: --save-traces: {traces} exists and is not a folder (a file or a "
                                    "symbolic link); move it away to save traces beside the run file")
    assert list(outside.iterdir()) == [] and not run.exists()  # nothing measured, no header-only file
    assert traces.is_symlink() if what == "symlink" else traces.read_text() == "not a folder"


def test_1_write_traces_never_follows_a_link_planted_in_its_folder(tmp_path):
    outside = tmp_path / "secret.json.gz"
    outside.write_bytes(b"keep")
    with store.RunWriter.create(tmp_path / "r.jsonl", fingerprint={}, sweep={}, run_kind="single_point") as w:
        w.traces_folder()
        (tmp_path / "r.traces" / "p-s.json.gz").symlink_to(outside)
        with pytest.raises(OSError):
            w.write_traces("p", {"s": {"traceEvents": []}})
    assert outside.read_bytes() == b"keep"


# -- 2. numbers out of range are skipped at load, named ----------------------------------------------
OUT_OF_RANGE = [
    ("step_ms", 0, "step_ms must be > 0 and <= 86400000, got 0"),
    ("step_ms", -5.79, "step_ms must be > 0 and <= 86400000, got -5.79"),
    ("batch_size", 0, "batch_size must be > 0 and <= 2147483647, got 0"),
    ("ep_size", -8, "ep_size must be > 0 and <= 2147483647, got -8"),
    ("gamma", 0, "gamma must be > 0 and <= 2147483647, got 0"),
    ("steps", -1, "steps must be > 0 and <= 2147483647, got -1"),
    ("trial", -1, "trial must be >= 0 and <= 2147483647, got -1"),
    ("rank", -1, "rank must be >= 0 and <= 2147483647, got -1"),
    ("local_rank", -2, "local_rank must be >= 0 and <= 2147483647, got -2"),
    ("syncs_per_step", -1.0, "syncs_per_step must be >= 0 and <= 2147483647, got -1.0"),
    ("gpu_idle_sync_caused_ms", -0.5, "gpu_idle_sync_caused_ms must be >= 0 and <= 86400000, got -0.5"),
    ("host_work_ms", -3.0, "host_work_ms must be >= 0 and <= 86400000, got -3.0"),
    ("step_ms_max_rank", -1.369, "step_ms_max_rank must be > 0 and <= 86400000, got -1.369"),
    ("local_rank", "0", "local_rank must be an integer, got '0'")]


@pytest.mark.parametrize("cache", [False, "dir"], ids=["cache-off", "cache-on"])
@pytest.mark.parametrize("field,value,reason", OUT_OF_RANGE, ids=[f"{f}={v}" for f, v, _ in OUT_OF_RANGE])
def test_2_a_value_out_of_range_skips_its_row_naming_file_line_and_field(two, field, value, reason, cache):
    folder, good, victim, cache_dir = two
    patch_row(victim, 3, **{field: value})
    _settled(victim)
    for _ in range(2 if cache else 1):
        got = _quiet_load(folder, cache=cache_dir if cache else False)
        assert got.warnings == [f"{victim}:3: row skipped: {reason}", f"{victim}:8: point p1: 3 of its 4 "
                                "committed rows are readable; the readable ones are loaded"]
        assert len(got.rows) == 2 * ROWS_PER_FILE - 1


def test_2_zero_where_zero_is_a_value_loads(two):
    folder, good, victim, cache_dir = two
    patch_row(victim, 3, trial=0, rank=0, local_rank=0, syncs_per_step=0.0, host_work_ms=0.0)
    got = _quiet_load(folder, cache=False)
    assert got.warnings == [] and len(got.rows) == 2 * ROWS_PER_FILE


# -- 3. files that never end or never answer ----------------------------------------------------------
def _cached(two):
    folder, good, victim, cache_dir = two
    truth = _quiet_load(folder, cache=False).rows
    _quiet_load(folder, cache=cache_dir)  # entries and the bundle written
    return folder, victim, cache_dir, truth


@pytest.mark.parametrize("make", [_fifo, _to_dev_zero], ids=["fifo", "dev-zero"])
@pytest.mark.parametrize("which", ["entry", "sidecar", "bundle"])
def test_3_a_cache_file_that_is_a_fifo_or_dev_zero_is_a_miss_and_the_rows_load(two, make, which):
    folder, victim, cache_dir, truth = _cached(two)
    good = two[1]
    target = {"entry": _entry(cache_dir, victim),
              "sidecar": Path(f"{_entry(cache_dir, victim)}.sha256"),
              "bundle": run_cache.bundle_path(cache_dir, sorted([good, victim]))}[which]
    if which != "bundle":
        run_cache.bundle_path(cache_dir, sorted([good, victim])).unlink()  # the entry is what is read
    target.unlink()
    make(target)
    got = finishes(_quiet_load, folder, cache=cache_dir)
    pd.testing.assert_frame_equal(got.rows, truth)


def test_3_read_regular_refuses_a_fifo_a_device_and_too_many_bytes_without_blocking(tmp_path):
    fifo = _fifo(tmp_path / "f")
    with pytest.raises(OSError, match="is a FIFO, not a regular file"):
        finishes(read_regular, fifo, 100)
    with pytest.raises(OSError, match="is a character device, not a regular file"):
        read_regular(_to_dev_zero(tmp_path / "z"), 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(OSError, match="is 101 bytes, more than the 100 read"):
        read_regular(tmp_path / "big", 100)


@pytest.mark.parametrize("make", [_fifo, _to_dev_zero], ids=["fifo", "dev-zero"])
def test_3_calibration_json_as_a_fifo_or_dev_zero_is_a_miss_and_is_never_replaced(tmp_path, monkeypatch, make):
    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path))
    planted = make(tmp_path / calibration.FILE_NAME)
    assert finishes(calibration.load, "k") is None
    assert finishes(calibration.store, "k", {"v": 1.0}) is False
    assert planted.is_symlink() if make is _to_dev_zero else stat.S_ISFIFO(os.lstat(planted).st_mode)


def test_3_store_read_header_of_a_fifo_says_so(tmp_path):
    fifo = _fifo(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match=r"cannot read it \(is a FIFO, not a regular file\)"):
        finishes(store.read_header, fifo)


@pytest.mark.parametrize("make", [_fifo, _to_dev_zero], ids=["fifo", "dev-zero"])
def test_3_doctor_compare_of_a_fifo_or_dev_zero_is_a_usage_error(tmp_path, capsys, make):
    card = make(tmp_path / "card.json")
    with pytest.raises(SystemExit) as e:
        finishes(cli.main, ["doctor", "--compare", str(card), str(card)])
    assert e.value.code == cli.EXIT_USAGE
    kind = "a FIFO" if make is _fifo else "a character device"
    assert f"--compare: {card}: not a readable JSON card (is {kind}, not a regular file)" in capsys.readouterr().err


class Alarm(Exception):
    """What an alarm handler raises (SIGALRM with a handler that raises)."""


@pytest.mark.parametrize("raised", [Alarm("alarm"), KeyboardInterrupt(), TimeoutError("alarm")],
                         ids=["alarm-exception", "keyboard-interrupt", "timeout-error"])
def test_3_reading_a_cache_entry_never_swallows_an_alarm_or_an_interrupt(two, monkeypatch, raised):
    import pyarrow.parquet as pq

    folder, victim, cache_dir, truth = _cached(two)

    def interrupted(*a, **kw):
        raise raised

    monkeypatch.setattr(pq, "read_table", interrupted)
    with pytest.raises(type(raised)):
        _quiet_load(folder, cache=cache_dir)


# -- 4. the cache is keyed: a planted entry with a hash of its own never matches ----------------------
def _plant(target: Path, data: bytes, sidecar_text: str) -> None:
    target.write_bytes(data)
    Path(f"{target}.sha256").write_text(sidecar_text)


def _forged_bundle(cache_dir: Path, files) -> bytes:
    """The bundle with its rows cut to the first 2, its metadata kept consistent (n_rows), as an attacker would."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = run_cache.bundle_path(cache_dir, files)
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"dspark_cache"])
    for e in meta["entries"]:
        e["n_rows"] = 1
    cut = table.slice(0, len(meta["entries"])).replace_schema_metadata({b"dspark_cache": json.dumps(meta)})
    sink = pa.BufferOutputStream()
    pq.write_table(cut, sink)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("sidecar", ["plain-sha256", "other-users-key"])
def test_4_a_planted_bundle_with_a_matching_hash_is_not_trusted(two, sidecar):
    import hmac

    folder, victim, cache_dir, truth = _cached(two)
    files = sorted([two[1], victim])
    data = _forged_bundle(cache_dir, files)
    text = hashlib.sha256(data).hexdigest() if sidecar == "plain-sha256" else \
        hmac.new(b"another user's secret", data, hashlib.sha256).hexdigest()
    _plant(run_cache.bundle_path(cache_dir, files), data, text)
    got = _quiet_load(folder, cache=cache_dir)
    pd.testing.assert_frame_equal(got.rows, truth)  # every row, from the run files


def test_4_a_key_file_others_can_read_turns_the_cache_off(two, tmp_path, monkeypatch):
    folder, good, victim, cache_dir = two
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    key = run_cache.key_file()
    key.parent.mkdir(parents=True)
    key.write_text("0" * 64)
    key.chmod(0o644)
    assert run_cache.secret() is None and not run_cache.available()
    assert len(_quiet_load(folder, cache=cache_dir).rows) == 2 * ROWS_PER_FILE
    assert not cache_dir.exists()  # nothing cached under a secret others know


def test_4_the_secret_is_made_once_private_and_outside_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    first = run_cache.secret()
    assert first is not None and len(first) == 64
    assert stat.S_IMODE(run_cache.key_file().stat().st_mode) == 0o600
    run_cache._secrets.clear()
    assert run_cache.secret() == first


# -- 5. tracebacks turned into one line ---------------------------------------------------------------
def test_5_report_of_a_run_file_named_in_bytes_that_are_not_utf8(tmp_path, capsys):
    folder = tmp_path / "runs"
    base(folder, "good")
    odd = base(folder, "tmp")
    named = Path(os.fsdecode(os.fsencode(folder) + b"/run-\xff\xfe.jsonl"))
    odd.rename(named)
    code, out, err = run_main(["report", str(folder), "-o", str(tmp_path / "r.html"), "--summary"], capsys)
    assert code == cli.EXIT_OK, err
    assert (tmp_path / "r.html").is_file()


@pytest.mark.parametrize("dispatch", [7, -1, True, ["a2a_fixed", 3]], ids=["7", "-1", "true", "list-with-a-number"])
def test_5_an_ep_header_with_a_dispatch_that_is_not_text_skips_its_file_naming_it(tmp_path, capsys, dispatch):
    folder = tmp_path / "runs"
    base(folder, "good")
    bad = base(folder, "ep")
    patch_header(bad, run_kind="ep_real", dispatch=dispatch)
    code, _, err = run_main(["report", str(folder), "-o", str(tmp_path / "r.html")], capsys)
    assert code == cli.EXIT_OK
    assert (f"dspark-lab: skipped: {bad}:1: header of the wrong shape (dispatch must be a string or a list of "
            f"strings, got {ascii(dispatch)[:40]}); file skipped") in err.splitlines()


def _command_script(tmp_path: Path, body: str) -> Path:
    """A script named as the console script is, so dspark_lab sees itself started as the command."""
    script = tmp_path / startup.COMMAND
    script.write_text("import os, signal, sys\n" + body)
    return script


def _run_command(script: Path, *args: str) -> subprocess.CompletedProcess:
    """The script run as a user's shell runs a command: SIGINT at its default disposition, whatever
    this test process inherited (a suite started as a background job inherits it ignored)."""
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=default_sigint)


@pytest.mark.parametrize("first", ["import dspark_lab.cli", "import dspark_lab"])
def test_5_ctrl_c_while_the_command_imports_is_one_line_and_130(tmp_path, first):
    # SIGINT lands after the package's first module and before the heavy imports (torch), as a user's
    # Ctrl-C in the first seconds does; os.kill delivers it before the next line runs.
    script = _command_script(tmp_path, f"{first}\nos.kill(os.getpid(), signal.SIGINT)\n"
                                       "from dspark_lab.cli.main import main\nsys.exit(main())\n")
    for args in (["--help"], ["lint", "--help"], ["report", "--help"]):
        p = _run_command(script, *args)
        assert (p.returncode, p.stderr, p.stdout) == (130, startup.LINE, b""), args


def test_5_ctrl_c_while_lint_help_is_on_its_way_out_lets_its_status_stand(tmp_path):
    # SIGINT lands after main is done (argparse's SystemExit of --help on its way to the exit).
    script = _command_script(tmp_path, "from dspark_lab.cli.main import main\n"
                                       "try:\n    main()\nfinally:\n    os.kill(os.getpid(), signal.SIGINT)\n")
    p = _run_command(script, "lint", "--help")
    assert (p.returncode, p.stderr) == (0, b"")
    assert b"usage: dspark-lab lint" in p.stdout


def test_5_once_main_runs_ctrl_c_is_a_keyboard_interrupt_again(tmp_path):
    script = _command_script(tmp_path, "import dspark_lab.cli.main as m\n"
                                       "seen = []\n"
                                       "m.cmd_report = lambda args, parser: seen.append(signal.getsignal(signal.SIGINT))\n"
                                       "assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler\n"
                                       "assert m.main(['report']) == 0\n"
                                       "assert seen == [signal.default_int_handler], seen\n")
    p = _run_command(script)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("orig_argv, command", [
    (["python", "-m", "dspark_lab.cli", "lint", "--help"], True),
    (["python", "-m", "dspark_lab.views.first_view"], False),  # bash lab.sh's: its Ctrl-C is its own
    (["python", "-m", "pytest", "-m", "dspark_lab.cli"], False),
])
def test_5_only_python_m_dspark_lab_cli_is_the_command_while_runpy_imports(monkeypatch, orig_argv, command):
    monkeypatch.setattr(sys, "argv", ["-m", *orig_argv[3:]])
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    assert startup.is_command() is command


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_5_the_ctrl_c_cases_hold_in_a_suite_started_with_sigint_ignored():
    """`bash test.sh &` from a script (a shell without job control) starts pytest with SIGINT
    ignored, and every child inherits that: the two Ctrl-C cases above, run by such a pytest, pass."""
    cases = [f"{Path(__file__).name}::{t.__name__}" for t in (test_5_ctrl_c_while_the_command_imports_is_one_line_and_130,
                                                             test_5_once_main_runs_ctrl_c_is_a_keyboard_interrupt_again)]
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *cases],
                       cwd=Path(__file__).parent, capture_output=True, text=True, timeout=600, preexec_fn=_ignore_sigint,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0 and " passed" in p.stdout and "failed" not in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]


def test_5_importing_the_command_line_elsewhere_leaves_sigint_alone():
    assert not startup.is_command()  # pytest's argv
    assert signal.getsignal(signal.SIGINT) is not startup._interrupted_at_start


@pytest.mark.parametrize("where", ["whole-file", "in-a-field"])
def test_5_diff_of_a_deeply_nested_record_is_one_line(tmp_path, capsys, where):
    good = tmp_path / "a.json"
    good.write_text(json.dumps(synthetic_record("a")))
    deep = tmp_path / "b.json"
    depth = 100_000
    if where == "whole-file":
        deep.write_text("[" * depth + "]" * depth)
    else:
        deep.write_text(json.dumps(synthetic_record("b"))[:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}")
    code, out, err = run_main(["diff", str(good), str(deep), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert err == f"dspark-lab: {deep}: not an inspect record (JSON nested too deeply)\n"


@pytest.mark.parametrize("body,why", [
    ("raise KeyboardInterrupt", "measuring it failed: KeyboardInterrupt"),
    ("raise SystemExit(3)", "measuring it failed: SystemExit: 3"),
    ("os.closerange(3, 4096)", "the worker could not send its result back (did the target close file descriptors "
                               "it did not open?)"),
], ids=["keyboard-interrupt", "system-exit", "closes-descriptors"])
def test_5_an_inspect_target_that_interrupts_or_closes_the_workers_pipe_is_one_line(tmp_path, body, why):
    target = tmp_path / "t.py"
    target.write_text(f"import os\n\n\ndef step():\n    {body}\n")
    p = subprocess.run([sys.executable, "-m", "dspark_lab.cli", "inspect", f"{target}:step", "--steps", "1",
                        "--trials", "1", "--warmup", "0", "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"dspark-lab: target '{target}:step': {why}"]


@pytest.mark.parametrize("call,error,want", [
    (lambda: sync_cost.sync_cost(None), TypeError, "rows must be a pandas DataFrame of one point's rows; got NoneType"),
    (lambda: step_diff.diff({}, {}), ValueError, "before: kind must be 'dspark_inspect'; got None"),
    (lambda: step_diff.diff(synthetic_record("a"), []), ValueError, "after: an inspect record must be a JSON object; got list"),
    (lambda: katas.kata([1]), ValueError, "kata must be one of .*; got \\[1\\]"),
    (lambda: katas.kata(None), ValueError, "kata must be one of .*; got None"),
], ids=["sync_cost-None", "step_diff-empty", "step_diff-list", "kata-list", "kata-None"])
def test_5_notebook_helpers_name_the_argument_they_were_given_wrong(call, error, want):
    with pytest.raises(error, match=want):
        call()


# -- 6. wrong without a word --------------------------------------------------------------------------
class _TerminatedGroup:
    """A group whose first request is met by SIGTERM (as `timeout` or Slurm send it), before any point."""

    world_size, info = 2, [{}]
    closed = False

    def call(self, *a, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not end the command")

    def close(self):
        type(self).closed = True


def test_6_ep_ended_by_sigterm_cleans_up_as_ctrl_c_does(tmp_path, capsys, monkeypatch):
    got: list = []
    previous = signal.signal(signal.SIGTERM, lambda *a: got.append("the kit left SIGTERM to the default"))
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        real = ep_run.run_ep
        monkeypatch.setattr(ep_command, "run_ep", lambda *a, **kw: real(*a, **{**kw, "group": _TerminatedGroup(),
                                                                          "fingerprint": {"gpu": "none"}}))
        out = tmp_path / "runs"
        code, _, err = run_main(["ep", "--backend", "gloo", "--world", "2", "--out", str(out)], capsys)
    finally:  # main holds both signals off once it is ending (cli.exits.hold_interrupts): given back here
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    assert got == []
    assert (code, err) == (cli.EXIT_TERMINATED, "dspark-lab: terminated (SIGTERM)\n")
    assert list(out.iterdir()) == []  # the header-only run file removed, as after Ctrl-C


@pytest.mark.parametrize("kw,want", [({"count": "no"}, "count must be True or False; got str 'no'"),
                                     ({"count": 1}, "count must be True or False; got int 1")])
def test_6_the_guard_refuses_a_count_that_is_not_a_bool(kw, want):
    with pytest.raises(TypeError, match=want):
        with guard.no_host_syncs(**kw):
            pass


@pytest.fixture
def loaded_runs(tmp_path):
    base(tmp_path / "runs", "one")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        return Runs.load(tmp_path / "runs", cache=False)


@pytest.mark.parametrize("field,value", [("until", "2026-13-45"), ("since", "2026-02-30"), ("until", "2026-11-30T25:00")])
def test_6_a_date_that_is_not_on_the_calendar_is_refused(loaded_runs, field, value):
    with pytest.raises(ValueError, match=f"^{field} must be a date like 2026-11-30"):
        loaded_runs.select(**{field: value})


@pytest.mark.parametrize("baseline", ["bogus", None, 3])
def test_6_a_headline_baseline_that_is_no_strategy_is_refused(loaded_runs, baseline):
    with pytest.raises(ValueError, match=f"^baseline must be a strategy name, got {baseline!r}; allowed: .*device_direct"):
        loaded_runs.headline(baseline=baseline)


def test_6_a_partial_line_appended_by_another_process_never_fuses_with_the_next_record(tmp_path):
    path = tmp_path / "r.jsonl"
    with store.RunWriter.create(path, fingerprint={"gpu": "g"}, sweep={}, run_kind="single_point") as w:
        w.write_point("p1", rows_of("p1"), timelines_of("p1"))
        with open(path, "ab") as foreign:
            foreign.write(b'{"kind": "row", "partial')
        foreign_line = len(lines(path)) + 1
        w.write_point("p2", rows_of("p2"), timelines_of("p2"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        got = load(path, cache=False)
    assert len(got.rows) == 8
    assert [str(c.message).split(" (")[0] for c in caught] == [f"{path}:{foreign_line}: corrupted record, skipped"]


@pytest.mark.parametrize("env,want", [
    ({"RANK": "abc"}, "RANK='abc' is not an integer"),
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not an integer"),
    ({"LOCAL_RANK": "-1"}, "LOCAL_RANK=-1 is out of range"),
    ({"RANK": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
], ids=["rank", "world", "local-rank", "rank-past-world"])
def test_6_a_launcher_variable_that_is_not_a_rank_is_named(monkeypatch, env, want):
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "1", **env}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=want):
        ranks.init_rank("gloo", 1.0)


def test_6_torchrun_rank_abc_is_a_usage_error_naming_the_variable(monkeypatch, capsys):
    for k, v in {"RANK": "abc", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as e:
        cli.main(["ep", "--launcher", "torchrun", "--backend", "gloo"])
    assert e.value.code == cli.EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[-1] == ("dspark-lab ep: error: RANK='abc' is not an integer (the "
                                                         "launcher sets it: an integer >= 0)")


# -- 7. what reaches a terminal or a report --------------------------------------------------------------
def test_7_a_run_name_with_a_newline_and_a_bidi_override_prints_escaped(tmp_path, capsys):
    path = base(tmp_path / "runs", "evil")
    patch_header(path, name="fine\nFAKE LINE \u202egnp.exe")
    code, out, err = run_main(["report", str(path.parent), "-o", str(tmp_path / "r.html"), "--summary"], capsys)
    assert code == cli.EXIT_OK
    assert "\u202e" not in out + err and "FAKE LINE" not in "".join(ln for ln in (out + err).splitlines()
                                                                      if ln.startswith("FAKE"))
    assert "fine\\nFAKE LINE \\u202egnp.exe" in out


def test_7_a_symlink_in_a_runs_folder_is_not_followed_and_its_target_never_echoed(tmp_path):
    folder = tmp_path / "runs"
    base(folder, "good")
    secret = tmp_path / "secret.txt"
    secret.write_text('{"kind": "root:SECRET-HASH:19000:0:99999:7:::"}\n')
    (folder / "link.jsonl").symlink_to(secret)
    got = _quiet_load(folder, cache=False)
    assert got.warnings == [f"{folder / 'link.jsonl'}: a symbolic link, not followed; give its target's path to load it"]
    assert len(got.rows) == ROWS_PER_FILE


def test_7_an_unknown_kind_is_echoed_bounded_and_escaped(tmp_path):
    path = base(tmp_path / "runs", "one")
    ls = lines(path)
    put(path, [*ls[:1], json.dumps({"kind": "\u202e\x1b[2J" + "A" * 100}).encode(), *ls[1:]])
    got = _quiet_load(path, cache=False)
    assert got.warnings[0] == (f"{path}:2: record of unknown kind '\\u202e\\x1b[2JAAAAAAAAAAAAAAA', skipped "
                               "(known: header, row, timeline, point)")


def test_6_a_torchrun_agent_whose_peer_never_comes_ends_at_the_join_timeout_the_docs_give(tmp_path, token):
    # docs/hardening.md: the agent's rendezvous is bounded by --rdzv-conf join_timeout (the rank's own
    # waits by --timeout-s); one node of two started, the other never comes.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{_free_port()}", f"--rdzv-id={token[:8]}", "--rdzv-conf", "join_timeout=5",
           "--max-restarts=0", "-m", "dspark_lab.cli", "ep", "--launcher", "torchrun", *TORCHRUN_TINY, "--timeout-s", "5",
           "--out", str(tmp_path / "r.jsonl")]
    env = {**os.environ, "PYTHONPATH": str(REPO), TOKEN_ENV: token, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG_DEADLINE_S, stdin=subprocess.DEVNULL)
    assert p.returncode != 0
    assert "RendezvousTimeoutError" in p.stderr
    assert not (tmp_path / "r.jsonl").exists()
