"""The command line, hardened: every refused option, path or signal ends in its documented
exit status and one error line naming the path or option; nothing is replaced that is not a regular
file the kit may write; no rank is spawned and no file created for options that are wrong."""
from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dspark_lab import guard
from dspark_lab.cli import ep_command, launch, main as cli
from dspark_lab.cli.terminal import printable
from dspark_lab.measure import trace
from dspark_lab.parallel import run as ep_run
from dspark_lab.parallel.workers import WorkerError, WorkerGroup
from dspark_lab.results.record import store
from dspark_lab.views import report
from test_cli import TINY_ARGS, fake_runner, run_main  # noqa: F401 - fake_runner: a fixture
from test_loading_reliability import base, patch_header, patch_row

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))


@pytest.fixture
def runs_folder(tmp_path):
    folder = tmp_path / "runs"
    base(folder, "one")
    return folder


def one_error_line(err: str) -> str:
    """The error of an exit: argparse prints its usage first, then exactly one error line."""
    lines = err.strip("\n").split("\n")
    assert lines[-1].startswith("dspark-lab"), err
    return lines[-1]


# -- case 1: report -o never replaces a device node, FIFO or link ---------------------------------
def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _link_to_dev_null(p: Path) -> Path:
    p.symlink_to("/dev/null")
    return p


def _null_node(p: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a copy of /dev/null's node, in tmp
    return p


@pytest.mark.parametrize("make,what", [(_fifo, "a FIFO"), (_link_to_dev_null, "a symbolic link"),
                                       (_null_node, "a character device")], ids=["fifo", "symlink", "char-device"])
def test_case1_report_never_replaces_a_node_fifo_or_link(runs_folder, tmp_path, capsys, make, what):
    target = make(tmp_path / "out.html")
    before = os.lstat(target)
    code, out, err = run_main(["report", str(runs_folder), "-o", str(target), "--summary"], capsys)
    assert code == cli.EXIT_REFUSED
    assert err.endswith(f"dspark-lab: {target}: is {what}; refusing to replace it (give a regular file path)\n")
    assert out == ""  # a refused report prints no summary either
    after = os.lstat(target)
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.html", "runs"]  # no temp file left


# -- case 7: ep checks every option before a rank or a file exists -------------------------------
@pytest.fixture
def no_spawn(monkeypatch):
    def refuse(self):
        raise AssertionError("a rank was spawned for options that are wrong")

    monkeypatch.setattr(WorkerGroup, "start", refuse)


EP_BAD = [  # (argv, the error's start)
    (["--world", "3"], "argument --world: ep_size must be a positive divisor of the model's 8 experts"),
    (["--world", "16"], "argument --world: ep_size must be a positive divisor"),
    (["--world", "0"], "argument --world: 0 is too small"),
    (["--world", "2", "--batch-sizes", "8"], "argument --batch-sizes: one batch size per rank (2); got 1"),
    (["--world", "2", "--batch-sizes", "0,8"], "argument --batch-sizes: must be a comma list of batch sizes"),
    (["--rank0-delay-ms", "nan"], "argument --rank0-delay-ms: nan is out of range"),
    (["--rank0-delay-ms", "inf"], "argument --rank0-delay-ms: inf is out of range"),
    (["--rank0-delay-ms", "1e6"], "argument --rank0-delay-ms: 1000000.0 is out of range"),
    (["--jitter-ms", "nan"], "argument --jitter-ms: nan is out of range"),
    (["--jitter-ms", "inf"], "argument --jitter-ms: inf is out of range"),
    (["--out", "{existing}"], "argument --out: {existing} exists; resume it"),
    (["--out", "/dev/full"], "argument --out: /dev/full exists and is not a folder"),
    (["--out", "{fifo}"], "argument --out: {fifo} exists and is not a regular file"),
]


@pytest.mark.parametrize("argv,want", EP_BAD, ids=[" ".join(a) for a, _ in EP_BAD])
def test_case7_ep_refuses_bad_options_before_spawning_or_creating_anything(tmp_path, capsys, no_spawn, argv, want):
    existing = tmp_path / "x.jsonl"
    existing.write_text("")
    fifo = _fifo(tmp_path / "f.jsonl")
    sub = {"{existing}": str(existing), "{fifo}": str(fifo)}
    argv = [sub.get(a, a) for a in argv]
    want = want.format(existing=existing, fifo=fifo)
    with pytest.raises(SystemExit) as e:
        cli.main(["ep", "--backend", "gloo", *argv])
    assert e.value.code == cli.EXIT_USAGE
    assert one_error_line(capsys.readouterr().err).startswith(f"dspark-lab ep: error: {want}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl", "x.jsonl"]
    assert not (tmp_path / "data").exists()


class _DyingGroup:
    """A group whose rank 1 dies on the first request, as a killed worker does."""

    world_size, info = 2, [{}]

    def call(self, *a, **kw):
        raise WorkerError("rank 1 stopped answering (pipe closed); exit codes [None, -9]")

    def close(self):
        pass


def test_case7_a_rank_that_dies_leaves_no_header_only_run_file_and_one_line(tmp_path, capsys, monkeypatch):
    real = ep_run.run_ep
    monkeypatch.setattr(ep_command, "run_ep", lambda *a, **kw: real(*a, **{**kw, "group": _DyingGroup(),
                                                                      "fingerprint": {"gpu": "none"}}))
    out = tmp_path / "runs"
    code, _, err = run_main(["ep", "--backend", "gloo", "--world", "2", "--out", str(out)], capsys)
    assert code == cli.EXIT_FAILED
    assert err == "dspark-lab: ep: rank 1 stopped answering (pipe closed); exit codes [None, -9]\n"
    assert list(out.iterdir()) == []  # the header-only file was removed


# -- case 8: resume of a tampered header ----------------------------------------------------------
@pytest.mark.parametrize("sweep", [{"ep_size": 5}, {"ep_size": [1], "batch_size": None, "gamma": [4], "strategy": ["device_direct"]},
                                   {"ep_size": [1], "batch_size": [8], "gamma": [4], "strategy": ["device_direct"], "base": [1, 2]},
                                   [1, 2]], ids=["number-for-a-list", "null", "list-for-base", "list-for-sweep"])
def test_case8_resume_of_a_tampered_sweep_header_is_exit_2_and_one_line(tmp_path, capsys, sweep):
    path = base(tmp_path / "runs", "r")
    patch_header(path, sweep=sweep)
    code, _, err = run_main(["sweep", "--resume", "--no-progress", "--out", str(path)], capsys)
    assert code == cli.EXIT_USAGE
    assert err.startswith(f"dspark-lab: cannot resume: {path}") and err.count("\n") == 1


# -- case 9: OS errors ------------------------------------------------------------------------------
def test_case9_report_to_a_name_too_long_is_exit_5_and_one_line(runs_folder, tmp_path, capsys):
    code, out, err = run_main(["report", str(runs_folder), "-o", str(tmp_path / ("x" * 300 + ".html"))], capsys)
    assert code == cli.EXIT_CANNOT_WRITE
    assert err.endswith(": cannot write it (File name too long)\n") and err.count("\n") == 1


@pytest.mark.parametrize("out,want", [
    ("{file}/sub/", "{file}/sub/<id>.jsonl: {file} is a file, not a folder"),
    ("{file}", "{file} exists and is not a folder; give a folder or a new *.jsonl path"),
    ("{fifo}", "{fifo} exists and is not a regular file (a device, FIFO, socket or link)"),
    ("/dev/full", "/dev/full exists and is not a folder"),
], ids=["file-as-folder", "existing-non-jsonl", "fifo", "dev-full"])
def test_case9_sweep_out_that_cannot_be_a_new_run_file_is_exit_2_naming_it(tmp_path, capsys, fake_runner, out, want):
    fake_runner()
    file, fifo = tmp_path / "notes.txt", _fifo(tmp_path / "f.jsonl")
    file.write_text("keep me")
    out = out.format(file=file, fifo=fifo)
    with pytest.raises(SystemExit) as e:
        cli.main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS, "--out", out])
    assert e.value.code == cli.EXIT_USAGE
    line = one_error_line(capsys.readouterr().err)
    head, _, tail = want.format(file=file, fifo=fifo).partition("<id>")
    assert line.startswith(f"dspark-lab sweep: error: argument --out: {head}") and line.endswith(tail)
    assert file.read_text() == "keep me" and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_case9_a_full_disk_mid_sweep_is_exit_5_with_the_finished_points_kept(tmp_path, capsys, fake_runner, monkeypatch):
    fake_runner()
    real, calls = store.RunWriter._append, []

    def append(self, data):
        calls.append(1)
        if len(calls) == 2:  # the second point: the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(store.RunWriter, "_append", append)
    path = tmp_path / "r.jsonl"
    code, _, err = run_main(["sweep", "--ep", "1", "--batch", "1,4", "--gamma", "2", *TINY_ARGS, "--out", str(path)],
                            capsys)
    assert code == cli.EXIT_CANNOT_WRITE
    assert err.splitlines()[-1] == (f"dspark-lab: cannot write {path} (No space left on device); every finished "
                                    f"point is saved; free space, then resume with: dspark-lab sweep --resume --out {path}")
    assert store.recorded_points(path) == 1


def test_case9_a_profiler_trace_cut_short_says_the_disk_not_json(tmp_path):
    cut = tmp_path / "trace.json"
    cut.write_text('{"traceEvents": [{"name": "a"')
    with pytest.raises(OSError, match=r"the profiler's trace at .* is incomplete \(29 bytes, JSONDecodeError\): "
                                      r"the disk is full or a file size limit \(ulimit -f\) was reached"):
        trace.read_exported(str(cut))


@pytest.mark.parametrize("port", ["70000", "-1", "0", "http"])
def test_case9_lab_sh_port_out_of_range_is_exit_2_naming_the_option(capsys, port):
    with pytest.raises(SystemExit) as e:
        launch.main(["--port", port])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        f"bash lab.sh: error: argument --port: must be an integer from 1 to 65535; got {port!r}"


# -- case 10: terminal escapes from run files -----------------------------------------------------
ESCAPES = "\x1b]0;owned\x07\x1b[2J\r\x9b1m"


def test_case10_printable_shows_every_control_character_and_keeps_lines():
    assert printable(f"a{ESCAPES}\tb\nc") == "a\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x9b1m\tb\nc"
    assert printable(os.fsdecode(b"run-\xff")) == "run-\\udcff"  # a non-UTF-8 name prints, escaped


def test_case10_report_summary_prints_run_fields_without_their_escapes(tmp_path, capsys):
    path = base(tmp_path / "runs", "evil")
    patch_header(path, name=f"evil{ESCAPES}", fingerprint={"gpu": f"GPU{ESCAPES}", "driver": "1", "cuda": "13", "torch": "2"})
    patch_row(path, 2, error=f"boom{ESCAPES}")  # an ok row's error text, carried into the views
    code, out, err = run_main(["report", str(path.parent), "-o", str(tmp_path / "r.html"), "--summary"], capsys)
    assert code == cli.EXIT_OK
    assert not any(c in out + err for c in "\x1b\x07\r\x9b")
    assert "GPU\\x1b]0;owned\\x07" in out


# -- case 11: the guard's arguments ------------------------------------------------------------------
@pytest.mark.parametrize("kw,want", [
    ({"allow": "lib/*.py:99"}, "allow must be a list or tuple of site patterns"),
    ({"allow": ["ok", 3]}, "allow must be a list or tuple of site patterns"),
    ({"allow": {"lib/x.py:1"}}, "allow must be a list or tuple of site patterns"),
    ({"strict": "no"}, "strict must be True or False; got str 'no'"),
    ({"strict": 1}, "strict must be True or False; got int 1"),
], ids=["bare-string", "non-string-item", "set", "strict-str", "strict-int"])
def test_case11_the_guard_refuses_an_allow_that_is_not_a_list_of_strings_and_a_strict_that_is_not_a_bool(kw, want):
    with pytest.raises(TypeError, match=want):
        with guard.no_host_syncs(**kw):
            pass


def test_case11_a_list_or_tuple_of_strings_and_a_bool_are_accepted():
    for allow in (["lib/x.py:99"], ("read_back",), ()):
        with pytest.warns(guard.NoCudaWarning) if not guard.torch.cuda.is_available() else _nothing():
            with guard.no_host_syncs(allow=allow, strict=False, count=True):
                pass


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- case 12: long fields, double Ctrl-C ----------------------------------------------------------
def test_case12_a_huge_field_is_cut_with_a_note_before_the_html():
    html = report._table(pd.DataFrame({"error": ["E" * 1_000_000], "gpu": ["H200"]}))
    assert f"[{1_000_000 - report.MAX_FIELD_CHARS} more characters cut; the run file holds the whole text]" in html
    assert len(html) < report.MAX_FIELD_CHARS + 1000
    assert report.cut_text("short") == "short" and report.cut_text(3) == 3


DOUBLE_CTRL_C = """
import os, runpy, signal, sys
from dspark_lab.cli import main as cli

real_err, real_build = cli._err, cli.build_parser

def second_ctrl_c(msg):  # the second Ctrl-C arrives while the first is being handled
    os.kill(os.getpid(), signal.SIGINT)
    real_err(msg)

def interrupted(args, parser):  # the first Ctrl-C, inside a command
    raise KeyboardInterrupt

def build():
    parser = real_build()
    parser._subparsers._group_actions[0].choices["report"].set_defaults(func=interrupted)
    return parser

cli._err, cli.build_parser = second_ctrl_c, build
sys.argv = ["dspark-lab", "report"]
runpy.run_module("dspark_lab.cli", run_name="__main__")
"""


def test_case12_two_quick_ctrl_cs_exit_130_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-c", DOUBLE_CTRL_C], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == cli.EXIT_INTERRUPTED, proc.stderr
    assert proc.stderr == "dspark-lab: interrupted\n"
