"""No run file can break loading: damaged and hostile files, each asserted for what is kept, what is
warned (file:line), and that no good row of any other file is lost. Also: a torn point after a full
disk, `report` on a folder with good and bad runs, no file read on a run file's say-so, and every
string of a run file escaped in the HTML report."""
from __future__ import annotations

import errno
import json
import os
import shutil
import warnings
from pathlib import Path

import pytest

from dspark_lab.results.record import store
from dspark_lab.results.loading.load import DataWarning, load
from dspark_lab.results.record.rows import build_row

FP = {"gpu": "TEST-GPU", "driver": "1.0", "cuda": "13.0", "torch": "2.x"}
STRATS = ("device_direct", "persistent_fill")
# Lines of a base file: 1 header; p1: rows 2-5, timelines 6-7, commit 8; p2: rows 9-12, timelines 13-14, commit 15.


def rows_of(pid, **extra):
    return [build_row(point_id=pid, strategy=s, trial=t, steps=10, step_ms=8.0 if s == "device_direct" else 6.0,
                      ep_size=8, batch_size=8, gamma=4, workload="sglang_profile", model="small", graph=True,
                      device="cuda", syncs_per_step=1.0 if s == "device_direct" else 0.0,
                      sync_site="dspark_lab/strategies.py:25 device_direct" if s == "device_direct" else "", **extra)
            for t in range(2) for s in STRATS]


def timelines_of(pid):
    return [{"kind": "timeline", "point_id": pid, "strategy": s, "segments": [["host", "prep", 0.0, 1.0, "prep"],
                                                                          ["gpu", "busy", 0.5, 2.0, "3 GPU ops"]]}
            for s in STRATS]


def base(folder: Path, name: str, points=("p1", "p2"), **header) -> Path:
    with store.RunWriter.create(folder / f"{name}.jsonl", fingerprint=FP, sweep={}, run_kind="single_point", **header) as w:
        for p in points:
            w.write_point(p, rows_of(p), timelines_of(p))
    return w.path


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def put(path: Path, ls) -> None:
    path.write_bytes(b"\n".join(ls) + b"\n")


def set_line(path: Path, n: int, rec) -> None:
    ls = lines(path)
    ls[n - 1] = rec if isinstance(rec, bytes) else json.dumps(rec).encode()
    put(path, ls)


def patch_row(path: Path, n: int, **changes) -> None:
    rec = json.loads(lines(path)[n - 1])
    rec.update(changes)
    set_line(path, n, json.dumps(rec, allow_nan=True).encode())


def patch_header(path: Path, **changes) -> None:
    patch_row(path, 1, **changes)


# -- the damaged and hostile files: (id, make(folder) -> path, rows kept, warnings expected as "LINE: text") --
def _torn_after_enospc(folder):
    p = base(folder, "torn", points=("p1", "p2"))
    ls = lines(p)
    put(p, ls[:8])
    with open(p, "ab") as f:  # p2's block torn inside its second row, as a full disk leaves it
        f.write(b"\n".join(ls[8:9]) + b"\n" + ls[9][:30])
    with store.RunWriter.open(p) as w:  # resumed later: the torn tail is closed, p3 appended whole
        w.write_point("p3", rows_of("p3"), timelines_of("p3"))
    return p


def _nested(folder):
    p = base(folder, "nested")
    set_line(p, 3, b'{"kind":"row","x":' + b"[" * 100000 + b"]" * 100000 + b"}")
    return p


def _bom(folder):
    p = base(folder, "bom")
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    return p


def _dup(folder):
    p = base(folder, "dup")
    ls = lines(p)
    put(p, ls[:3] + [ls[2]] + ls[3:])
    return p


def _copy(folder):
    shutil.copy(folder / "good.jsonl", folder / "zz-copy-of-good.jsonl")
    return folder / "zz-copy-of-good.jsonl"


def _no_commit(folder):
    p = base(folder, "nocommit")
    ls = lines(p)
    put(p, ls[:14])
    return p


def _drop_header(folder):
    p = base(folder, "noheader")
    put(p, lines(p)[1:])
    return p


def _script_everywhere(folder):
    s = "<script>alert(1)</script>"
    with store.RunWriter.create(folder / "script.jsonl", fingerprint={k: s for k in FP}, sweep={}, run_kind="single_point", name=s) as w:
        rs = [dict(r, model=s, workload=s, device=s, sync_site=s + ":1 " + s, error="") for r in rows_of("p1")]
        tl = [{"kind": "timeline", "point_id": "p1", "strategy": st, "segments": [["host", s, 0.0, 1.0, s]]} for st in STRATS]
        w.write_point("p1", rs, tl)
        w.write_point("p2", [dict(r, status="failed", error=s) for r in rows_of("p2")], [])
    return w.path


def _raw(folder, name, data: bytes) -> Path:
    (folder / f"{name}.jsonl").write_bytes(data)
    return folder / f"{name}.jsonl"


def _with(fn):
    def make(folder, name):
        p = base(folder, name)
        fn(p)
        return p
    return make


CASES = [
    # id, make(folder, name), rows kept, expected warnings ("line: text"; line None = file-level)
    ("truncated-last-line", _with(lambda p: p.write_bytes(p.read_bytes()[:-25])), 4,
     ["15: truncated record", "None: point p2: 4 row\\(s\\) without a commit record"]),
    ("corrupted-middle-line", _with(lambda p: set_line(p, 3, b'{"kind":"row",\xff\xfe garbage')), 7,
     ["3: corrupted record", "8: point p1: 3 of its 4 committed rows are readable"]),
    ("bom", lambda f, n: _bom(f), 8, []),
    ("crlf-line-ends", _with(lambda p: p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))), 8, []),
    ("deep-nesting", lambda f, n: _nested(f), 7, ["3: corrupted record, skipped \\(RecursionError"]),
    ("duplicate-line", lambda f, n: _dup(f), 8, ["4: duplicate of the row on line 3"]),
    ("copied-run-file", lambda f, n: _copy(f), 0, ["1: run_id .* was already loaded from .*good.jsonl"]),
    ("never-committed", lambda f, n: _no_commit(f), 4, ["None: point p2: 4 row\\(s\\) without a commit record"]),
    ("torn-after-enospc-then-resumed", lambda f, n: _torn_after_enospc(f), 8,
     ["10: corrupted record", "None: point p2: 1 row\\(s\\) without a commit record"]),
    ("unknown-schema-version", _with(lambda p: patch_header(p, schema_version=99)), 0,
     ["1: schema_version 99 is not supported.*file skipped"]),
    ("schema-version-as-string", _with(lambda p: patch_header(p, schema_version="1")), 0,
     ["1: schema_version '1' is not supported"]),
    ("schema-version-true", _with(lambda p: patch_header(p, schema_version=True)), 0, ["1: schema_version True"]),
    ("header-run-id-not-a-string", _with(lambda p: patch_header(p, run_id=12)), 0,
     ["1: header of the wrong shape \\(run_id must be a non-empty string\\); file skipped"]),
    ("header-fingerprint-a-list", _with(lambda p: patch_header(p, fingerprint=["gpu"])), 0,
     ["1: header of the wrong shape \\(fingerprint must be an object"]),
    ("header-is-a-list", _with(lambda p: set_line(p, 1, [1, 2])), 8,
     ["1: record of unknown kind 'list'", "1: no readable header record"]),
    ("no-header", lambda f, n: _drop_header(f), 8, ["1: no readable header record"]),
    ("second-header", _with(lambda p: put(p, lines(p) + [lines(p)[0]])), 8, ["16: a second header record"]),
    ("nan-step-ms", _with(lambda p: patch_row(p, 2, step_ms=float("nan"))), 7, ["2: row skipped: step_ms must be finite"]),
    ("infinite-step-ms", _with(lambda p: patch_row(p, 2, step_ms=float("inf"))), 7, ["2: row skipped: step_ms must be finite"]),
    ("string-step-ms", _with(lambda p: patch_row(p, 2, step_ms="8.0")), 7, ["2: row skipped: step_ms must be a number"]),
    ("bool-ep-size", _with(lambda p: patch_row(p, 3, ep_size=True)), 7, ["3: row skipped: ep_size must be an integer"]),
    ("fractional-batch", _with(lambda p: patch_row(p, 3, batch_size=2.5)), 7, ["3: row skipped: batch_size must be an integer"]),
    ("unknown-status", _with(lambda p: patch_row(p, 4, status="maybe")), 7, ["4: row skipped: status must be one of ok, failed"]),
    ("row-without-point-id", _with(lambda p: patch_row(p, 9, point_id=None)), 7, ["9: row skipped: point_id is missing"]),
    ("strategy-a-list", _with(lambda p: patch_row(p, 9, strategy=["x"])), 7, ["9: row skipped: strategy must be a string"]),
    ("disturbed-not-a-bool", _with(lambda p: patch_row(p, 10, disturbed="yes")), 7,
     ["10: row skipped: disturbed must be true or false"]),
    ("row-is-an-array", _with(lambda p: set_line(p, 10, [1, 2, 3])), 7, ["10: record of unknown kind 'list'"]),
    ("unknown-kind", _with(lambda p: put(p, lines(p) + [b'{"kind":"mystery"}'])), 8, ["16: record of unknown kind 'mystery'"]),
    ("bad-timeline-segment", _with(lambda p: patch_row(p, 6, segments=[["host", "prep", "zero", 1.0, "x"], ["host", "prep", 0.0, 1.0, "ok"]])),
     8, ["6: timeline: 1 segment\\(s\\) not \\[lane"]),
    ("timeline-segments-not-a-list", _with(lambda p: patch_row(p, 13, segments="none")), 8,
     ["13: timeline record without point_id, strategy or segments list"]),
    ("commit-with-bad-n-rows", _with(lambda p: patch_row(p, 8, n_rows="four")), 4,
     ["8: point record without a valid point_id", "None: point p1: 4 row\\(s\\) without a commit record"]),
    ("null-bytes", _with(lambda p: set_line(p, 11, b"\x00\x00\x00")), 7, ["11: corrupted record"]),
    ("empty-file", lambda f, n: _raw(f, n, b""), 0, []),
    ("binary-garbage", lambda f, n: _raw(f, n, bytes(range(256)) * 40), 0,
     ["1: corrupted record"]),
    ("unknown-extra-column", _with(lambda p: patch_row(p, 2, my_new_column=42)), 8, []),
    ("version-1-file", _with(lambda p: patch_header(p, schema_version=1)), 8, []),
    ("script-in-every-string", lambda f, n: _script_everywhere(f), 8, []),
    ("path-traversal-in-sync-site", _with(lambda p: [patch_row(p, n, sync_site=s) for n, s in (
        (2, "/etc/passwd:1 root"), (4, "dspark_lab/../../../../etc/passwd:1 x"), (9, "dspark_lab/../README.md:1 x"),
        (11, "../dspark_lab/strategies.txt(1): x"))]), 8, []),
]
assert len(CASES) >= 30


def _load_one(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DataWarning)
        loaded = load(path)
    return loaded, [str(w.message) for w in caught if issubclass(w.category, DataWarning)]


@pytest.fixture
def folder(tmp_path):
    base(tmp_path, "good")
    return tmp_path


def _check_warnings(path, got, expected):
    import re

    for want in expected:
        line, text = want.split(": ", 1)
        where = f"{path}:{line}: " if line != "None" else f"{path}: "
        assert any(m.startswith(where) and re.search(text, m[len(where):]) for m in got), (want, got)
    assert len(got) >= len(expected)
    if not expected:
        assert got == []


@pytest.mark.parametrize("case_id,make,kept,expected", CASES, ids=[c[0] for c in CASES])
def test_a_damaged_file_keeps_its_good_rows_and_warns_where(folder, case_id, make, kept, expected):
    path = make(folder, case_id)
    loaded, got = _load_one(folder)  # the whole folder: the good file and this one
    good = load(folder / "good.jsonl").rows
    mine = loaded.rows[loaded.rows["run_id"] != good.run_id.iloc[0]]
    # no good row lost: every row of the good file is there, once
    assert len(loaded.rows[loaded.rows.run_id == good.run_id.iloc[0]]) == len(good) == 8
    assert len(loaded.rows) == 8 + kept and len(mine) == kept, got
    _check_warnings(path, [m for m in got if m.startswith(str(path))], expected)
    assert not [m for m in got if m.startswith(str(folder / "good.jsonl"))]  # nothing said about the good file
    assert loaded.warnings == got  # what was warned is also listed for the views


def test_extra_columns_are_kept_and_version_1_files_get_nan_for_new_columns(tmp_path):
    p = base(tmp_path, "v1")
    patch_header(p, schema_version=1)
    patch_row(p, 2, my_new_column=42)
    rows = load(p).rows
    assert rows["my_new_column"].notna().sum() == 1 and rows["stop_reason"].isna().all()
    # the verdict is derived, not recorded: every row of an old file gets it, flag and reason together
    assert rows["disturbed"].map(type).eq(bool).all()
    assert (rows["disturbed"] == rows["disturbed_reason"].ne("")).all()


def test_a_full_disk_mid_point_leaves_no_torn_point(tmp_path, monkeypatch):
    p = base(tmp_path, "enospc", points=("p1",))
    w = store.RunWriter.open(p)
    size = p.stat().st_size
    real_write = os.write
    calls = []

    def full_disk(fd, data):
        if fd == w._f.fileno():
            calls.append(len(data))
            if len(calls) == 1:
                return real_write(fd, bytes(data[: len(data) // 2]))  # half the block reaches the disk
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        w.write_point("p2", rows_of("p2"), timelines_of("p2"))
    monkeypatch.setattr(os, "write", real_write)
    w.close()
    assert p.stat().st_size == size  # the torn block was cut off
    loaded, got = _load_one(p)
    assert set(loaded.rows.point_id) == {"p1"} and got == []


def test_sync_site_lines_come_only_from_the_package():
    from dspark_lab.views import report

    for site in ("/etc/passwd:1 root", "dspark_lab/../../../../etc/passwd:1 x", "dspark_lab/../README.md:1 x",
                 "../dspark_lab/strategies.txt(1): x", "/etc/shadow:1 x", "dspark_lab/../../../../etc/hostname(1): x"):
        got = report.sync_site_line(site)
        assert got["code"] is None and got["note"] == "not a source file of the dspark_lab package", site
    # a recorded path from another checkout maps onto this package
    got = report.sync_site_line("/root/elsewhere/dspark_lab/strategies.py:25 device_direct")
    assert got["code"] is not None and "torch.tensor" in got["code"]


def test_every_string_of_a_run_file_is_escaped_in_the_report(tmp_path):
    from dspark_lab.views import report
    from dspark_lab.results import Runs

    _script_everywhere(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        runs = Runs.load(tmp_path)
    assert (runs.ok["model"] == "<script>alert(1)</script>").all() and len(runs.ok) == 4
    doc = report.build_html(runs)
    assert "<script>alert" not in doc and "&lt;script&gt;alert(1)&lt;/script&gt;" in doc


def test_report_on_good_runs_plus_bad_ones_exits_0_and_says_what_it_skipped(folder, capsys):
    from dspark_lab.cli import main as cli

    bad = _nested(folder)
    wrong = base(folder, "wrong-version")
    patch_header(wrong, schema_version=99)
    out = folder.parent / f"{folder.name}-out" / "report.html"
    code = cli.main(["report", str(folder), "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0 and out.is_file(), captured.err
    assert f"skipped: {bad}:3: corrupted record, skipped (RecursionError" in captured.err
    assert f"skipped: {wrong}:1: schema_version 99" in captured.err
    assert "Traceback" not in captured.err and "3 problem(s) skipped" in captured.out  # the bad line, its point short of a row, the version
    assert f"{bad}:3" in out.read_text()  # the report lists them too


def test_the_verdict_of_an_older_rule_is_replaced_flag_and_reason_together(tmp_path):
    """A run recorded under an older rule: its recorded `disturbed` and `disturbed_reason` are both
    replaced by the current rule's (results.rules.noise), from the file and from the cache alike."""
    from dspark_lab.results import Runs

    p = base(tmp_path / "runs", "old-rule")
    # an old rule counted the software power cap (0x4); the current one does not
    patch_row(p, 2, throttle_reasons=0x4, disturbed=True, disturbed_reason="NVML slowdown: sw_power_cap")
    patch_row(p, 3, disturbed=True, disturbed_reason="host work +3.00 ms/step over its median (bound 0.80)")
    patch_row(p, 4, throttle_reasons=0x8, disturbed=False, disturbed_reason="")  # not flagged then; hw_slowdown now
    past = os.stat(p).st_mtime - 3600  # not "racy": cacheable
    os.utime(p, (past, past))
    for cache in (False, tmp_path / "cache", tmp_path / "cache"):  # parsed, then parsed and cached, then cached
        rows = Runs.load(p, cache=cache).rows.set_index(["point_id", "strategy", "trial"])
        assert (rows["disturbed"] == rows["disturbed_reason"].ne("")).all()
        assert rows["disturbed"].sum() == 1
        flagged = rows.loc[("p1", "device_direct", 1)]  # line 4: trial 1 of device_direct
        assert flagged["disturbed"] and flagged["disturbed_reason"] == "NVML slowdown: hw_slowdown"
        assert not rows.loc[("p1", "device_direct", 0), "disturbed"]  # line 2: the power cap alone
        assert rows.loc[("p1", "persistent_fill", 0), "disturbed_reason"] == ""  # line 3: nothing to flag
