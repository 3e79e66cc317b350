"""A full disk under every command that writes (sweep's run file and traces, report, diff, the
calibration cache): a write that did not happen says so in one line (exit 5), the old file stays as
it was, and nothing half-written is left. The disk is made full by a write that fails with ENOSPC
(or EIO) where the kit writes, after it has taken part of the bytes, as a nearly full disk does."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from dspark_lab.cli import main as cli
from dspark_lab.model import calibration
from dspark_lab.results.record import output, store
from helpers import inspect_record as synthetic_record
from test_cli import TINY_ARGS, fake_runner, run_main  # noqa: F401 - fake_runner: a fixture
from test_safe_io import FP, recorded  # noqa: F401 - recorded: a fixture

FULL = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("DSPARK_CACHE", str(tmp_path / "cache"))


def full_after(monkeypatch, module, taken: int = 7):
    """`module.os.write` takes `taken` bytes of its first write, then fails with ENOSPC."""
    real, calls = os.write, []

    def write(fd, data):
        calls.append(fd)
        if len(calls) == 1 and taken:
            return real(fd, bytes(data[:taken]))
        raise FULL
    monkeypatch.setattr(module.os, "write", write)
    return calls


@pytest.mark.parametrize("taken", [0, 7], ids=["nothing-taken", "part-of-the-header-taken"])
def test_sweep_whose_header_cannot_be_written_is_exit_5_and_leaves_no_run_file(tmp_path, capsys, fake_runner,
                                                                              monkeypatch, taken):
    fake_runner()
    out = tmp_path / "runs"
    out.mkdir()
    full_after(monkeypatch, store, taken)
    code, _, err = run_main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS, "--out", str(out)],
                            capsys)
    assert code == cli.EXIT_CANNOT_WRITE
    assert err.splitlines()[-1] == f"dspark-lab: argument --out: cannot create a run file at {out} (No space left on device)"
    assert "done:" not in err and list(out.iterdir()) == []


def test_sweep_whose_last_fsync_fails_is_exit_5_not_done(tmp_path, capsys, fake_runner, monkeypatch):
    fake_runner()
    path = tmp_path / "r.jsonl"
    real_fsync, real_append, written = os.fsync, store.RunWriter._append, []

    def append(self, data):
        real_append(self, data)
        written.append(self._f.fileno())

    def fsync(fd):
        if written and fd == written[0]:  # the close after the last point
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)
    monkeypatch.setattr(store.RunWriter, "_append", append)
    monkeypatch.setattr(store.os, "fsync", fsync)
    code, _, err = run_main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS, "--out", str(path)],
                            capsys)
    assert code == cli.EXIT_CANNOT_WRITE and "done:" not in err and "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"dspark-lab: cannot write {path} (Input/output error): its last fsync failed")


def test_a_trace_cut_short_by_a_full_disk_is_removed(tmp_path, monkeypatch):
    w = store.RunWriter.create(tmp_path / "runs", fingerprint=FP, sweep={}, run_kind="single_point")

    def dump(obj, f, **kw):
        f.write('{"traceEvents": [')
        raise FULL
    monkeypatch.setattr(store.json, "dump", dump)
    with pytest.raises(OSError, match="No space left"):
        w.write_traces("p1", {"device_direct": {"traceEvents": []}})
    w.close()
    assert list(w.traces_folder().iterdir()) == []


def _failing_file_writes(monkeypatch):
    """The report writer's file object takes half of what it is given, then the disk is full."""
    real_fdopen = os.fdopen

    def fdopen(fd, *a, **kw):
        f = real_fdopen(fd, *a, **kw)
        real_write = f.write

        def write(text):
            real_write(text[: len(text) // 2])
            f.flush()
            raise FULL
        f.write = write
        return f
    monkeypatch.setattr(output.os, "fdopen", fdopen)


def test_report_on_a_full_disk_keeps_the_old_report_and_leaves_no_part(recorded, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    out.write_text("the old report")
    _failing_file_writes(monkeypatch)
    code, _, err = run_main(["report", str(recorded), "-o", str(out)], capsys)
    assert code == cli.EXIT_CANNOT_WRITE
    assert err.strip().splitlines() == [f"dspark-lab: {out}: cannot write it (No space left on device)"]
    assert out.read_text() == "the old report" and sorted(out.parent.iterdir()) == [out]


def test_diff_on_a_full_disk_keeps_the_old_markdown_and_leaves_no_part(tmp_path, capsys, monkeypatch):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(synthetic_record("a")))
    b.write_text(json.dumps(synthetic_record("b")))
    out = tmp_path / "out"
    out.mkdir()
    md = out / "a-vs-b.md"
    md.write_text("the old diff")
    _failing_file_writes(monkeypatch)
    code, stdout, err = run_main(["diff", str(a), str(b), "--out", str(out), "--name", "a-vs-b"], capsys)
    assert code == cli.EXIT_CANNOT_WRITE and stdout == ""
    assert err.strip().splitlines() == [f"dspark-lab: {md}: cannot write it (No space left on device)"]
    assert md.read_text() == "the old diff" and sorted(out.iterdir()) == [md]


def test_the_calibration_cache_on_a_full_disk_keeps_its_old_file_and_no_temporary(tmp_path, monkeypatch):
    assert calibration.store("k", {"a": 1})
    folder, before = calibration.cache_file().parent, calibration.cache_file().read_bytes()

    def dump(obj, f, **kw):
        f.write('{"k": ')
        raise FULL
    monkeypatch.setattr(calibration.json, "dump", dump)
    assert calibration.store("k", {"a": 2}) is False
    assert calibration.cache_file().read_bytes() == before and list(folder.iterdir()) == [calibration.cache_file()]
