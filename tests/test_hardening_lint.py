"""`dspark-lab lint` on hostile source: nesting past any parser's stack, files too large to read, FIFOs
and devices named *.py, a BOM, long flat chains, a reason that prints nothing, and text from the file
on its way to a terminal. Each case asserts its exact outcome: a skipped file is one line naming it
and the limit (exit 6), never a traceback, and the other files are still linted."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from dspark_lab.cli import main as cli
from dspark_lab.lint import lint_paths, lint_source
from dspark_lab.lint import source as bounded

SYNC = "x.sum().item()"
HEAD = "import torch\n\ndef f(x, a, b):\n"
DEEP = {  # each far past the depth limit; Python's parser ends in RecursionError or MemoryError on them
    "plus_chain": "    return " + " + ".join(["a"] * 5000) + "\n",
    "attribute_chain": "    return a" + ".b" * 20000 + "\n",
    "subscripts": "    return a" + "[0]" * 5000 + "\n",
    "not_chain": "    return " + "not " * 5000 + "a\n",
    "conditional_chain": "    return " + "a if b else " * 3000 + "a\n",
    "unary_chain": "    return " + "-" * 10000 + "a\n",
    "within_limit_parse_past_it": "    return " + " + ".join(["a"] * (bounded.DEPTH_LIMIT + 20)) + "\n",
}


def lint(capsys, *args) -> tuple[int, str, str]:
    code = cli.main(["lint", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def folder_with(tmp_path: Path, name: str, make) -> tuple[Path, Path]:
    """A folder holding a file with a sync (still linted) and `name`, made by make(path)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(HEAD + f"    return {SYNC}\n")
    odd = tmp_path / "pkg" / name
    make(odd)
    return tmp_path / "pkg", odd


def finishes(fn, deadline_s: float = 60.0):
    """fn() in a daemon thread; the test fails if it is still running at the deadline (a read blocked on a FIFO)."""
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("value", fn()), daemon=True)
    t.start()
    t.join(deadline_s)
    assert not t.is_alive(), "lint was still running (blocked on a read)"
    return out["value"]


@pytest.mark.parametrize("shape", sorted(DEEP))
def test_a_file_nested_past_the_limit_is_skipped_in_one_line_and_the_others_linted(tmp_path, capsys, shape):
    folder, deep = folder_with(tmp_path, "deep.py", lambda p: p.write_text(HEAD + DEEP[shape]))
    code, out, err = lint(capsys, folder)
    assert code == 6
    assert f"dspark-lab: skipped: {deep}: is nested deeper than the {bounded.DEPTH_LIMIT} levels lint reads; " \
           "not linted" in err.splitlines()
    assert "Traceback" not in err and f"{folder / 'a.py'}:4:" in out  # the other file's finding


def test_nesting_just_inside_the_limit_is_linted_rules_and_all(tmp_path, capsys):
    # int() of a deep sum walks the whole chain (is it a tensor?), as deep as the limit lets it be.
    chain = " + ".join(["t"] * (bounded.DEPTH_LIMIT - 10))
    p = tmp_path / "m.py"
    p.write_text(HEAD + f"    t = torch.ones(1, device='cuda')\n    return int({chain})\n")
    code, out, _ = lint(capsys, p)
    assert code == 1 and f"{p}:5:12: python_scalar:" in out


def test_a_file_over_the_size_limit_is_skipped_naming_the_limit_and_read_no_further(tmp_path, capsys, monkeypatch):
    big = tmp_path / "big.py"
    big.write_bytes(b"import torch\n" + b"#" * bounded.SIZE_LIMIT + b"\n")
    asked = []
    real_fdopen = os.fdopen

    def fdopen(fd, *a, **kw):
        f = real_fdopen(fd, *a, **kw)
        real_read = f.read
        f.read = lambda n=-1: asked.append(n) or real_read(n)
        return f
    monkeypatch.setattr(bounded.os, "fdopen", fdopen)
    code, _, err = lint(capsys, big)
    assert code == 6
    assert err.splitlines()[0] == f"dspark-lab: skipped: {big}: is larger than the 8 MiB lint reads; not linted"
    assert asked == [bounded.SIZE_LIMIT + 1]


def _fifo(p: Path) -> None:
    os.mkfifo(p)


@pytest.mark.parametrize("name, make, what", [
    ("pipe.py", _fifo, "is a FIFO, not a regular file"),
    ("zero.py", lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
    ("gone.py", lambda p: p.symlink_to(p.parent / "missing"), "is a link to nothing, not a regular file"),
])
def test_a_fifo_a_device_or_a_dangling_link_named_py_is_skipped_without_a_read(tmp_path, capsys, name, make, what):
    folder, odd = folder_with(tmp_path, name, make)
    code, out, err = finishes(lambda: lint(capsys, folder))
    assert code == 6 and f"dspark-lab: skipped: {odd}: {what}; not linted" in err.splitlines()
    assert f"{folder / 'a.py'}:4:" in out
    code, _, err = finishes(lambda: lint(capsys, odd))  # named on the command line: the same, not "no such file"
    assert code == 6 and f"dspark-lab: skipped: {odd}: {what}; not linted" in err.splitlines()


def test_the_library_call_raises_for_a_skipped_file_rather_than_passing_it(tmp_path):
    p = tmp_path / "deep.py"
    p.write_text(HEAD + DEEP["plus_chain"])
    with pytest.raises(bounded.SkippedFile, match="nested deeper than the 200 levels"):
        lint_paths([p])
    skipped: list[str] = []
    assert lint_paths([p], skipped) == [] and skipped == [f"{p}: is nested deeper than the 200 levels lint reads; not linted"]


def test_a_utf8_bom_is_read_as_python_reads_it(tmp_path, capsys):
    p = tmp_path / "bom.py"
    p.write_bytes(b"\xef\xbb\xbf" + (HEAD + f"    return {SYNC}\n").encode())
    code, out, err = lint(capsys, p)
    assert (code, err.count("does not parse")) == (1, 0)
    assert f"{p}:4:12: item:" in out
    assert [f.line for f in lint_source("\ufeff" + HEAD + f"    return {SYNC}\n")] == [4]


def test_a_coding_line_is_honoured(tmp_path, capsys):
    p = tmp_path / "latin.py"
    p.write_bytes(b"# -*- coding: latin-1 -*-\n" + (HEAD + f"    return {SYNC}  # caf\xe9\n").encode("latin-1"))
    code, out, _ = lint(capsys, p)
    assert code == 1 and f"{p}:5:12: item:" in out


@pytest.mark.parametrize("test", [
    " and ".join(["a"] * 20000 + [SYNC]),
    " or ".join([SYNC] + ["a"] * 20000),
    " < ".join(["a"] * 5000 + [SYNC]),
    " == ".join([SYNC] + ["a"] * 5000),
])
def test_a_long_flat_and_or_comparison_chain_with_a_sync_is_found(tmp_path, capsys, test):
    p = tmp_path / "chain.py"
    p.write_text(HEAD + f"    if {test}:\n        pass\n")
    code, out, err = lint(capsys, p)
    assert (code, err.count("skipped")) == (1, 0) and f"{p}:4:" in out and ": item:" in out


@pytest.mark.parametrize("reason", ["\u200b", "\u200b\u200d\ufeff", "\u202e", "\x1b", " \t\u00a0"])
def test_a_sync_ok_reason_that_prints_nothing_is_no_reason(tmp_path, capsys, reason):
    p = tmp_path / "m.py"
    p.write_text(HEAD + f"    return {SYNC}  # sync-ok: {reason}\n", encoding="utf-8")
    code, out, _ = lint(capsys, p)
    assert code == 1
    assert f"{p}:4:12: item:" in out and f"{p}:4:1: sync_ok_without_reason:" in out


def test_text_from_the_file_reaches_the_terminal_escaped(tmp_path, capsys):
    folder = tmp_path / "evil\x1b]0;owned\x07"
    folder.mkdir()
    p = folder / "m\u202e.py"
    p.write_text(HEAD + f"    return {SYNC}  # sync-ok: ok \x1b[2J\u202edesrever\n"
                 f"\ndef g(x):\n    return {SYNC}\n", encoding="utf-8")
    code, out, _ = lint(capsys, "--show-exempt", p)
    assert code == 1
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in out
    shown = str(p).replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\u202e", "\\u202e")
    assert f"{shown}:4: by design (item): ok \\x1b[2J\\u202edesrever" in out.splitlines()
    assert any(line.startswith(f"{shown}:7:12: item:") for line in out.splitlines())


def test_the_hooks_skipped_status_is_the_kits_not_checked_status_and_both_print_through_one_escaper():
    from dspark_lab.cli import exits, terminal
    from dspark_lab.lint import command
    from dspark_lab import printable

    assert command.EXIT_SKIPPED == exits.EXIT_NOT_CHECKED
    assert terminal.printable is printable.printable is command.printable
