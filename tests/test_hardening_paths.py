"""The paths every command writes, fuzzed: `report -o`, `sweep --out`, `inspect --name`, `diff --name`
and `RunWriter.create(run_id=)` given random paths made of "..", ".", folders that do not exist,
symbolic links (to a folder outside, to a file outside), a FIFO, a device node, a file where a folder
would be and a runs folder. Whatever the path, after the command:

  - nothing that was there is changed, replaced or removed, except a regular file (not a run
    file) at the very place the path lands (a report written again over an old report);
  - every new file or folder is that place, or a folder on the way to it that did not exist;
  - where a name is given (--name, run_id), that place is directly inside the chosen folder;
  - a report never lands in a runs folder;
  - the command ends with one of its documented exit statuses (or a ValueError for run_id).

Sized for the 2-core CI: 20 examples per command, the HTML and the measurement stood in for (the
paths and the writer are the real ones), each example a fresh sandbox of a few files."""
from __future__ import annotations

import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from dspark_lab.cli import main as cli
from dspark_lab.results.record import store
from dspark_lab.results.record.output import write_text_safely
from helpers import inspect_record as synthetic_record
from test_cli import TINY_ARGS
from test_loading_reliability import base

SEGMENTS = ["..", ".", "missing", "runs", "link", "filelink", "fifo", "devnode", "plain.txt", "new", "one.jsonl"]
LAST = ["x.html", "r.jsonl", "one.jsonl", "plain.txt", "fifo", "..", "."]
DEPTH = ("l1", "l2", "l3", "l4", "l5")  # sandbox(): more than the most ".." a drawn path holds
FUZZ = settings(max_examples=20, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def paths(draw, last=LAST):
    """A relative path (to the chosen folder) or an absolute one (marked by a leading '/')."""
    parts = draw(st.lists(st.sampled_from(SEGMENTS), max_size=4)) + [draw(st.sampled_from(last))]
    return ("/" if draw(st.booleans()) else "") + "/".join(parts)


NAMES = st.lists(st.sampled_from(["..", ".", "/", "a", "b", "x.json", "", "\\"]), min_size=1, max_size=4).map("".join)


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("RECORDS", "")


@contextmanager
def sandbox():
    """root/chosen (the working folder: a runs folder, links out, a FIFO, a device, a plain file)
    and root/outside (what no command may touch unless a path leads there through a link)."""
    with tempfile.TemporaryDirectory() as tmp:
        # Five folders deep, so that no path drawn (at most five "..", also after a link) leaves tmp.
        root = Path(tmp).resolve()
        deep = root.joinpath(*DEPTH)
        chosen, outside = deep / "chosen", deep / "outside"
        chosen.mkdir(parents=True)
        outside.mkdir()
        (outside / "keep.txt").write_text("keep")
        base(chosen / "runs", "one")
        (chosen / "link").symlink_to(outside, target_is_directory=True)
        (chosen / "filelink").symlink_to(outside / "keep.txt")
        os.mkfifo(chosen / "fifo")
        os.mknod(chosen / "devnode", stat.S_IFCHR | 0o666, os.makedev(1, 3)) if os.geteuid() == 0 \
            else (chosen / "devnode").symlink_to("/dev/null")
        (chosen / "plain.txt").write_text("the user's")
        cwd = os.getcwd()
        os.chdir(chosen)
        try:
            yield root, chosen
        finally:
            os.chdir(cwd)


def snapshot(root: Path) -> dict:
    """Every entry under root, never followed: path -> (file type, bytes of a regular file or a link's target)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(folder, n)
            mode = os.lstat(p).st_mode
            body = Path(p).read_bytes() if stat.S_ISREG(mode) else os.readlink(p) if stat.S_ISLNK(mode) else None
            out[p] = (stat.S_IFMT(mode), body)
    return out


def _absolute(text: str, chosen: Path) -> str:
    """A drawn absolute path, rooted in the sandbox (five levels above any "/.." it may climb)."""
    return str(chosen.parent) + text if text.startswith("/") else text


def landing(text: str, chosen: Path) -> str:
    """Where the OS puts a file at `text` once its missing folders are made (relative to chosen)."""
    p = Path(chosen, _absolute(text, chosen))
    return os.path.join(os.path.realpath(p.parent), p.name)


def missing_folders_to(place: str) -> set:
    """The folders on the way to `place` that do not exist (called before the command)."""
    out, folder = set(), os.path.dirname(place)
    while not os.path.lexists(folder):
        out.add(folder)
        folder = os.path.dirname(folder)
    return out


def check(before: dict, after: dict, allowed_new) -> None:
    """Nothing that was there changed but a regular, non-run file at an allowed place; new entries allowed."""
    changed = {p for p in before if after.get(p) != before[p]}
    for p in changed:
        assert p in allowed_new(p), f"{p} changed or removed"
        assert before[p][0] == stat.S_IFREG and not p.endswith(".jsonl") and after.get(p, (0,))[0] == stat.S_IFREG, \
            f"{p} replaced: it was not a regular file the kit may write again"
    for p in set(after) - set(before):
        assert p in allowed_new(p), f"{p} was made"


def _report(argv_path: str, chosen: Path) -> int:
    with mock.patch("dspark_lab.views.report.build_html", lambda runs, **kw: "<html></html>"):
        return cli.main(["report", str(chosen / "runs"), "-o", _absolute(argv_path, chosen)])


@FUZZ
@given(out=paths())
@example(out="missing/../runs/x.html")  # the attacks that once got through, always tried
@example(out="missing/../runs/one.jsonl")
@example(out="link/x.html")
@example(out="fifo")
@example(out="devnode")
@example(out="filelink")
def test_report_o_lands_where_the_path_leads_never_in_a_runs_folder_nor_over_a_node(out):
    with sandbox() as (root, chosen):
        before = snapshot(root)
        place = landing(out, chosen)
        ok = {place} | missing_folders_to(place)
        code = _exit(_report, out, chosen)
        after = snapshot(root)
        check(before, after, lambda p: ok)
        assert code in (cli.EXIT_OK, cli.EXIT_USAGE, cli.EXIT_REFUSED, cli.EXIT_CANNOT_WRITE)
        if code == cli.EXIT_USAGE:  # -o naming a folder ("x/.", "..")
            assert out.rsplit("/", 1)[-1] in ("", ".", "..")
        if code == cli.EXIT_OK:
            assert after[place][0] == stat.S_IFREG
            assert os.path.basename(os.path.dirname(place)) != "runs"


@pytest.fixture
def fake_measure(monkeypatch):
    from test_cli import _fake_measure
    from dspark_lab.run import point as runner

    monkeypatch.setattr(runner, "measure_point", _fake_measure(None))


@FUZZ
@given(out=paths(last=["r.jsonl", "one.jsonl", "fifo", "devnode", "plain.txt", "new", "..", "."]))
@example(out="missing/../runs/one.jsonl")
@example(out="missing/../r.jsonl")
@example(out="fifo")
@example(out="devnode")
def test_sweep_out_makes_one_new_run_file_where_the_path_leads_and_nothing_else(fake_measure, out):
    with sandbox() as (root, chosen):
        before = snapshot(root)
        place, folder = landing(out, chosen), os.path.realpath(Path(chosen, _absolute(out, chosen)))
        on_the_way = missing_folders_to(place) | missing_folders_to(os.path.join(folder, "x"))
        code = _exit(cli.main, ["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS,
                                "--out", _absolute(out, chosen)])
        after = snapshot(root)
        made = set(after) - set(before)
        files = {p for p in made if after[p][0] == stat.S_IFREG}
        check(before, after, lambda p: made if p in made else set())
        assert code in (cli.EXIT_OK, cli.EXIT_USAGE, cli.EXIT_CANNOT_WRITE)
        if code != cli.EXIT_OK:
            assert files == set()
            return
        (run,) = files
        assert run == place or os.path.dirname(run) == folder
        assert made - {run} <= on_the_way


def _inspect(name: str, out: Path) -> int:
    rec = synthetic_record("a")
    with mock.patch("dspark_lab.run.worker.inspect_target", lambda *a, **kw: rec), \
            mock.patch("dspark_lab.views.inspect_page.write", lambda path, r: write_text_safely(path, "<html></html>")), \
            mock.patch("dspark_lab.views.inspect_page.report_text", lambda r: ""):
        return cli.main(["inspect", "t.py:step", "--name", name, "--out", str(out)])


def _diff(name: str, out: Path) -> int:
    records = out.parents[len(out.parents) - 1] / os.environ["RECORDS"]  # written before the snapshot
    return cli.main(["diff", str(records / "a.json"), str(records / "b.json"), "--name", name, "--out", str(out)])


@pytest.mark.parametrize("command", [_inspect, _diff], ids=["inspect", "diff"])
@FUZZ
@given(name=NAMES, out=paths(last=["out", "runs", "link", "missing", "fifo", "plain.txt"]))
@example(name="../../x", out="out")
@example(name="../../../p", out="missing/out")
@example(name="/abs", out="out")
def test_a_name_writes_only_directly_inside_the_chosen_folder(command, name, out):
    with sandbox() as (root, chosen):
        records = root / "records"
        records.mkdir()
        for label in ("a", "b"):
            (records / f"{label}.json").write_text(json.dumps(synthetic_record(label)))
        os.environ["RECORDS"] = str(records.relative_to("/"))
        before = snapshot(root)
        folder = Path(chosen, _absolute(out, chosen))
        real = os.path.realpath(folder)
        on_the_way = missing_folders_to(os.path.join(real, "x"))
        code = _exit(command, name, folder)
        after = snapshot(root)
        inside = {p for p in set(after) | set(before) if os.path.dirname(p) == real}
        check(before, after, lambda p: inside | on_the_way)
        assert code in (cli.EXIT_OK, cli.EXIT_USAGE, cli.EXIT_REFUSED, cli.EXIT_CANNOT_WRITE)
        if code == cli.EXIT_REFUSED:  # into a runs folder (by name, or one its missing folders would be made in)
            assert "runs" in Path(real).parts or not os.path.exists(real)


@FUZZ
@given(run_id=NAMES)
@example(run_id="../../x")
@example(run_id="/abs")
def test_a_run_id_names_one_file_inside_the_run_folder(run_id):
    with sandbox() as (root, chosen):
        before = snapshot(root)
        try:
            with store.RunWriter.create(chosen / "new-runs", fingerprint={}, sweep={}, run_kind="single_point",
                                        run_id=run_id) as w:
                made = w.path
        except ValueError as e:
            assert "run_id" in str(e)
            made = None
        after = snapshot(root)
        allowed = {str(chosen / "new-runs")} | ({str(made)} if made else set())
        check(before, after, lambda p: allowed)
        if made is not None:
            assert made.parent == chosen / "new-runs" and made.name == f"{run_id or made.stem}.jsonl"  # "": a new id


def _exit(fn, *args) -> int:
    """A command's exit status, a usage error's (SystemExit) included."""
    try:
        return fn(*args)
    except SystemExit as e:
        return e.code
