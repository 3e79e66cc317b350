"""A hostile pass's inputs, each family held: every command that writes on a full disk (exit 5, the
old file intact, no part left), the output path rules as docs/hardening.md states them, report
inputs that are too deep or loop, row values out of their ranges (results.record.rows.RANGES), and
text from run files that would print a forged line on a terminal."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from dspark_lab.cli import main as cli
from dspark_lab.results.record import output, rows as rows_schema, store
from dspark_lab.results.record.output import write_text_safely
from helpers import inspect_record as synthetic_record
from test_cli import TINY_ARGS, fake_runner, run_main  # noqa: F401 - fake_runner: a fixture
from test_hardening_disk import _failing_file_writes as failing_file_writes
from test_lab_sh import fake_venv
from test_loading_reliability import base, lines, patch_row, put
from test_safe_io import recorded  # noqa: F401 - recorded: a fixture

FULL = OSError(errno.ENOSPC, "No space left on device")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("DSPARK_CACHE", "off")


def _stub_html():
    return mock.patch("dspark_lab.views.report.build_html", lambda runs, **kw: "<html>new</html>")


# -- full disk: every command that writes -------------------------------------------------------
def _full_disk_at(monkeypatch, where: str):
    """The writer's file takes half of the text then the disk is full ("write"), or the text is
    taken and its fsync fails as a full disk says it late ("fsync")."""
    if where == "fsync":
        monkeypatch.setattr(output.os, "fsync", lambda fd: (_ for _ in ()).throw(FULL))
    else:
        failing_file_writes(monkeypatch)


def _one_full_disk_line(err: str, path: Path) -> None:
    assert err.strip().splitlines()[-1] == f"dspark-lab: {path}: cannot write it (No space left on device)"
    assert "Traceback" not in err


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_main_o_on_a_full_disk_is_exit_5_keeps_the_old_report_and_leaves_no_part(recorded, tmp_path, capsys,
                                                                                  monkeypatch, where):
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    out.write_text("the old report")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # main reports the recorded runs
    _full_disk_at(monkeypatch, where)
    with _stub_html():
        code, _, err = run_main(["main", "-o", str(out)], capsys)
    assert code == cli.EXIT_CANNOT_WRITE
    _one_full_disk_line(err, out)
    assert out.read_text() == "the old report" and sorted(out.parent.iterdir()) == [out]


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_report_o_whose_fsync_fails_is_exit_5_and_leaves_no_part(recorded, tmp_path, capsys, monkeypatch, where):
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    out.write_text("the old report")
    _full_disk_at(monkeypatch, where)
    with _stub_html():
        code, _, err = run_main(["report", str(recorded), "-o", str(out)], capsys)
    assert code == cli.EXIT_CANNOT_WRITE
    _one_full_disk_line(err, out)
    assert out.read_text() == "the old report" and sorted(out.parent.iterdir()) == [out]


def _inspect(out: Path, *extra: str) -> int:
    rec = synthetic_record("a")
    with mock.patch("dspark_lab.run.worker.inspect_target", lambda *a, **kw: rec), \
            mock.patch("dspark_lab.views.inspect_page.build_html", lambda r: "<html>new</html>"), \
            mock.patch("dspark_lab.views.inspect_page.report_text", lambda r: ""):
        return cli.main(["inspect", "t.py:step", "--name", "rec", "--out", str(out), *extra])


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_inspect_out_on_a_full_disk_is_exit_5_keeps_the_old_record_and_leaves_no_part(tmp_path, capsys,
                                                                                       monkeypatch, where):
    out = tmp_path / "out"
    out.mkdir()
    (out / "rec.json").write_text("the old record")
    _full_disk_at(monkeypatch, where)
    code = _inspect(out)
    err = capsys.readouterr().err
    assert code == cli.EXIT_CANNOT_WRITE
    _one_full_disk_line(err, out / "rec.json")
    assert (out / "rec.json").read_text() == "the old record" and sorted(out.iterdir()) == [out / "rec.json"]


def test_sweep_out_whose_run_file_is_cut_short_never_says_done(tmp_path, capsys, fake_runner, monkeypatch):
    fake_runner()
    real_write = os.write

    def write(fd, data):  # the header goes in; the first point's block is half taken, then the disk is full
        if b'"kind":"row"' in bytes(data[:200]):
            real_write(fd, bytes(data[: len(data) // 2]))
            raise FULL
        return real_write(fd, data)
    monkeypatch.setattr(store.os, "write", write)
    path = tmp_path / "r.jsonl"
    code, _, err = run_main(["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS, "--out", str(path)],
                            capsys)
    assert code == cli.EXIT_CANNOT_WRITE and "done:" not in err and "Traceback" not in err
    assert store.recorded_points(path) == 0
    assert all(json.loads(line)["kind"] == "header" for line in path.read_text().splitlines())  # nothing torn kept


# -- the output path rules ------------------------------------------------------------------------
def _diff(out: Path, records: Path) -> int:
    return cli.main(["diff", str(records / "a.json"), str(records / "b.json"), "--name", "d", "--out", str(out)])


def _records(tmp_path: Path) -> Path:
    records = tmp_path / "records"
    records.mkdir()
    for label in ("a", "b"):
        (records / f"{label}.json").write_text(json.dumps(synthetic_record(label)))
    return records


@pytest.mark.parametrize("how", ["by-name", "through-a-missing-folder", "through-a-symlink", "the-data-dirs-runs"])
@pytest.mark.parametrize("command", ["inspect", "diff"])
def test_inspect_and_diff_out_into_a_runs_folder_is_refused_with_4_and_makes_nothing(tmp_path, capsys, monkeypatch,
                                                                                      command, how):
    runs = tmp_path / "data" / "runs"
    base(runs, "one")
    records = _records(tmp_path)
    if how == "the-data-dirs-runs":  # data/runs a link to a folder of another name
        store_folder = tmp_path / "store"
        runs.rename(store_folder)
        runs.symlink_to(store_folder, target_is_directory=True)
        out = store_folder
    else:
        (tmp_path / "link").symlink_to(runs, target_is_directory=True)
        out = {"by-name": runs, "through-a-missing-folder": tmp_path / "missing" / ".." / "data" / "runs",
               "through-a-symlink": tmp_path / "link"}[how]
    real = os.path.realpath(out)  # where the path lands ("missing/.." is no folder the OS walks through)
    before = sorted(os.listdir(real))
    code = _inspect(out) if command == "inspect" else _diff(out, records)
    err = capsys.readouterr().err
    assert code == cli.EXIT_REFUSED, err
    assert "is a runs folder" in err.strip().splitlines()[-1] and "Traceback" not in err
    assert sorted(os.listdir(real)) == before and not (tmp_path / "missing").exists()


@pytest.mark.parametrize("inputs", ["3000-empty-files", "a-file-given-twice", "a-file-and-its-folder"])
def test_report_beside_the_run_files_it_reads_is_written(tmp_path, capsys, inputs):
    folder = tmp_path / "mine"
    run = base(folder, "one")
    if inputs == "3000-empty-files":
        for i in range(3000):
            (folder / f"empty-{i}.jsonl").touch()
    argv = {"3000-empty-files": [str(folder)], "a-file-given-twice": [str(run), str(run)],
            "a-file-and-its-folder": [str(run), str(folder)]}[inputs]
    out = folder / "report.html"
    with _stub_html():
        code, stdout, err = run_main(["report", *argv, "-o", str(out)], capsys)
    assert code == cli.EXIT_OK, err
    assert out.read_text() == "<html>new</html>" and f"report: {out} (1 runs" in stdout
    assert run.read_bytes() == b"\n".join(lines(run)) + b"\n"


@pytest.mark.parametrize("command", ["report", "main"])
def test_o_ending_in_a_slash_is_a_usage_error_naming_the_option(recorded, tmp_path, capsys, command):
    out = tmp_path / "out"
    argv = [command, *([str(recorded)] if command == "report" else []), "-o", f"{out}/"]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == cli.EXIT_USAGE
    assert err.strip().splitlines()[-1] == (f"dspark-lab {command}: error: argument -o/--out: '{out}/' names a "
                                            f"folder; give a file name such as {out}/report.html")
    assert not out.exists()


@pytest.mark.parametrize("first", ["header-past-the-peek", "object-past-the-peek"])
def test_a_file_whose_first_line_is_too_long_to_tell_is_never_replaced(recorded, tmp_path, capsys, first):
    victim = tmp_path / "notes.txt"
    line = {"kind": "header", "pad": "x" * (output.HEADER_PEEK + 10)} if first == "header-past-the-peek" \
        else {"pad": "x" * (output.HEADER_PEEK + 10), "kind": "header"}
    victim.write_text(json.dumps(line) + "\n" + '{"kind": "row"}\n')
    before = victim.read_bytes()
    with _stub_html():
        code, _, err = run_main(["report", str(recorded), "-o", str(victim)], capsys)
    assert code == cli.EXIT_REFUSED
    assert err.strip().splitlines()[-1] == (f"dspark-lab: {victim}: may be a run file (its first line is over "
                                            f"{output.HEADER_PEEK} bytes and opens a JSON object); refusing to "
                                            "overwrite recorded data")
    assert victim.read_bytes() == before


def test_a_long_first_line_that_is_no_json_object_is_an_ordinary_file(tmp_path):
    f = tmp_path / "old.html"
    f.write_text("<" * (output.HEADER_PEEK + 10))
    assert write_text_safely(f, "new") == f and f.read_text() == "new"


def test_a_255_byte_name_the_file_system_takes_is_written(recorded, tmp_path, capsys):
    out = tmp_path / "out" / ("r" * 250 + ".html")
    assert len(os.fsencode(out.name)) == 255
    with _stub_html():
        code, _, err = run_main(["report", str(recorded), "-o", str(out)], capsys)
    assert code == cli.EXIT_OK, err
    assert out.read_text() == "<html>new</html>" and sorted(out.parent.iterdir()) == [out]


# -- report inputs that are too deep or loop ------------------------------------------------------
def _remove_deep(top: Path, levels: int) -> None:
    """Remove the chain of `levels` folders "d" under `top` from its bottom up (shutil.rmtree, and so
    pytest's clean-up of old temporary folders, recurses once per level: past the limit here)."""
    cwd = os.getcwd()
    os.chdir(top)
    try:
        for _ in range(levels):
            os.chdir("d")
        for _ in range(levels):
            for name in os.listdir("."):
                os.unlink(name) if not os.path.isdir(name) else os.rmdir(name)
            os.chdir("..")
        os.rmdir("d")
    finally:
        os.chdir(cwd)


def test_a_folder_1100_levels_deep_is_one_warning_naming_the_limit_and_the_rest_loads(tmp_path, capsys):
    from dspark_lab.results.loading.load import MAX_FOLDER_DEPTH

    top = tmp_path / "deep"
    base(top, "one")
    here = top
    try:
        for _ in range(1100):
            os.mkdir(here / "d")
            here = here / "d"
        base(here, "buried")
        with _stub_html():
            code, stdout, err = run_main(["report", str(top), "-o", str(tmp_path / "r.html")], capsys)
    finally:
        _remove_deep(top, 1100)
    assert code == cli.EXIT_OK and "Traceback" not in err
    (warning,) = [line for line in err.splitlines() if "not searched" in line]
    assert warning.endswith(f": more than {MAX_FOLDER_DEPTH} folders below {top}; not searched")
    assert "(1 runs, 8 rows" in stdout


@pytest.mark.parametrize("cache", ["off", "a-folder"])
def test_a_symlink_loop_given_is_a_usage_error_in_one_line_and_one_inside_a_folder_a_warning(tmp_path, capsys,
                                                                                          monkeypatch, cache):
    if cache == "a-folder":  # the cache's check of the folders loaded resolves them too
        monkeypatch.setenv("DSPARK_CACHE", str(tmp_path / "cache"))
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(SystemExit) as e:
        cli.main(["report", str(loop), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert e.value.code == cli.EXIT_USAGE and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"dspark-lab report: error: argument PATH: no run file or folder at "
                                            f"{loop} (Too many levels of symbolic links: a symbolic link loop)")
    folder = tmp_path / "runs"
    base(folder, "one")
    (folder / "a.jsonl").symlink_to(folder / "b.jsonl")
    (folder / "b.jsonl").symlink_to(folder / "a.jsonl")
    (folder / "self").symlink_to(folder, target_is_directory=True)
    with _stub_html():
        code, stdout, err = run_main(["report", str(folder), "-o", str(tmp_path / "r.html")], capsys)
    assert code == cli.EXIT_OK and "Traceback" not in err and "(1 runs, 8 rows" in stdout
    assert sum("a symbolic link, not followed" in line for line in err.splitlines()) == 2


# -- row values out of their ranges ---------------------------------------------------------------
OUT_OF_RANGE = [  # (field, value, the reason the warning gives)
    *((f, 1e308, f"{f} must be > 0 and <= 2147483647, got 1e+308")
      for f in ("ep_size", "batch_size", "gamma", "steps", "num_tokens")),
    ("trial", 1e308, "trial must be >= 0 and <= 2147483647, got 1e+308"),
    *((f, v, f"{f} must be >= 0 and <= 86400000, got {v!r}")
      for f in ("gpu_busy_ms", "gpu_idle_ms") for v in (-1, -1e308)),
    ("host_other_ms", -1e308, "host_other_ms must be >= -86400000 and <= 86400000, got -1e+308"),
    ("step_ms", 1e308, "step_ms must be > 0 and <= 86400000, got 1e+308"),
    ("batch_size", None, "batch_size is missing from an ok row"),
    ("gamma", None, "gamma is missing from an ok row"),
]


@pytest.mark.parametrize("field,value,reason", OUT_OF_RANGE, ids=[f"{f}={v}" for f, v, _ in OUT_OF_RANGE])
def test_a_row_value_out_of_its_range_is_skipped_naming_field_and_range_and_the_report_is_made(tmp_path, capsys,
                                                                                              field, value, reason):
    run = base(tmp_path / "runs", "one")
    patch_row(run, 2, **{field: value})
    with _stub_html():
        code, stdout, err = run_main(["report", str(run), "-o", str(tmp_path / "r.html"), "--summary"], capsys)
    assert code == cli.EXIT_OK and "Traceback" not in err
    assert f"dspark-lab: skipped: {run}:2: row skipped: {reason}" in err.splitlines()
    assert "(1 runs, 7 rows" in stdout


def test_the_ranges_are_one_table_that_every_check_reads():
    assert rows_schema.allowed_range("gpu_idle_ms") == ">= 0 and <= 86400000"
    for c, (low, inclusive, high) in rows_schema.RANGES.items():
        assert high is None or low < high, c
        outside = low - 1 if inclusive else low
        assert rows_schema.range_problem(c, outside) is not None, c
        assert rows_schema.range_problem(c, high if high is not None else low + 1) is None, c


def test_the_recorded_runs_of_the_repository_are_all_within_the_ranges():
    for f in sorted((ROOT / "data" / "runs").glob("*.jsonl")):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            rec = json.loads(line)
            if rec.get("kind") == "row":
                assert rows_schema.row_problems(rec) == [], f"{f.name}:{n}"


def test_a_row_whose_point_id_was_edited_says_so_not_a_torn_write(tmp_path, capsys):
    run = base(tmp_path / "runs", "one")
    patch_row(run, 2, point_id="not-the-kits")
    with _stub_html():
        code, _, err = run_main(["report", str(run), "-o", str(tmp_path / "r.html")], capsys)
    assert code == cli.EXIT_OK
    (line,) = [x for x in err.splitlines() if "not-the-kits" in x]
    assert "naming another point_id (edited after it was written?)" in line and "torn" not in line


@pytest.mark.parametrize("field", ["batch_size", "gamma"])
def test_the_headline_of_rows_one_of_which_places_no_point_is_none_not_a_crash(recorded, field):
    from dspark_lab.results import Runs
    from dspark_lab.results.loading.load import load

    rows = load(recorded, cache=False).rows  # rows given to Runs directly: the loader's check is not in the way
    rows.loc[rows.index[0], field] = None
    assert Runs(rows).headline().entries == []


# -- text from run files printed escaped, one line each ------------------------------------------
FORGED = "dspark-lab: forged"
EVIL = f"\n{FORGED}\x1b[2J\u202e"


def _spoofs(tmp_path: Path, what: str) -> list:
    """A runs folder whose `what` carries EVIL; the command line to run over it."""
    folder = tmp_path / "runs"
    run = base(folder, "one")
    if what in ("file-name", "file-name-esc", "file-name-bidi"):
        evil = {"file-name": f"\n{FORGED}", "file-name-esc": "\x1b]0;title\x07", "file-name-bidi": "\u202e"}[what]
        named = folder / f"x{evil}.jsonl"
        run.rename(named)
        put(named, lines(named)[:2] + [b"{not json"] + lines(named)[2:])  # a warning that names the file
    elif what == "symlink-name":
        (folder / f"l{EVIL}.jsonl").symlink_to(run)
    elif what == "copied-file-name":
        (folder / f"c{EVIL}.jsonl").write_bytes(run.read_bytes())
    elif what in ("gpu", "driver", "torch"):
        header = json.loads(lines(run)[0])
        header["fingerprint"][what] = f"G{EVIL}"
        put(run, [json.dumps(header).encode()] + lines(run)[1:])
    elif what == "strategy":
        patch_row(run, 2, strategy=f"s{EVIL}")
    return ["report", str(folder), "-o", str(tmp_path / "r.html"), "--summary"]


SPOOFED = ["file-name", "file-name-esc", "file-name-bidi", "symlink-name", "copied-file-name", "gpu", "driver",
           "torch", "strategy"]


def _no_forged_line(text: str) -> None:
    assert not any(line.startswith(FORGED) for line in text.splitlines()), text
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text


@pytest.mark.parametrize("what", SPOOFED)
def test_text_from_a_run_file_prints_escaped_in_report_warnings_and_summary(tmp_path, capsys, what):
    with _stub_html():
        code, stdout, err = run_main(_spoofs(tmp_path, what), capsys)
    assert code == cli.EXIT_OK, err
    _no_forged_line(stdout + err)


def test_lab_sh_report_prints_a_forged_file_name_escaped(tmp_path):
    argv = _spoofs(tmp_path, "symlink-name")[1:]
    env = {**os.environ, "DSPARK_DATA": str(tmp_path / "data"), "DSPARK_CACHE": "off",
           "DSPARK_VENV": str(fake_venv(tmp_path)), "PYTHONPATH": str(ROOT)}
    p = subprocess.run(["bash", str(ROOT / "lab.sh"), "report", *argv[:-1]], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    _no_forged_line(p.stdout + p.stderr)
    assert "a symbolic link, not followed" in p.stderr


def test_sweep_resume_of_a_file_with_a_forged_name_prints_it_escaped(tmp_path, capsys, fake_runner):
    fake_runner()
    path = tmp_path / f"r{EVIL}.jsonl"
    argv = ["sweep", "--ep", "1", "--batch", "1", "--gamma", "2", *TINY_ARGS, "--out", str(path)]
    assert run_main(argv, capsys)[0] == cli.EXIT_OK
    code, stdout, err = run_main([*argv, "--resume"], capsys)
    assert code == cli.EXIT_OK
    _no_forged_line(stdout + err)
    assert any(line.startswith("resume: 1 of 1 points already recorded in ") for line in err.splitlines())


def test_an_output_path_that_cannot_be_written_is_refused_in_one_line_whatever_its_name_holds(tmp_path):
    """A folder named with a newline and a file name too long for the file system: the error names the
    path escaped, on one line (a path can otherwise print a forged "dspark-lab: ..." line)."""
    from dspark_lab.results.record.output import OutputError, write_text_safely

    (tmp_path / "a\nb").mkdir()
    with pytest.raises(OutputError) as e:
        write_text_safely(tmp_path / "a\nb" / ("x" * 300), "<html></html>")
    assert "\n" not in str(e.value) and "a\\nb" in str(e.value)


def test_inspect_prints_a_target_s_error_escaped_on_one_line(capsys):
    from dspark_lab.cli import inspect as inspect_cli

    inspect_cli.err("target failed:\ndspark-lab: forged line \x1b[2J")
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "\x1b" not in said and "\\ndspark-lab: forged" in said
