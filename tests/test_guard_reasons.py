"""By-design syncs carry a reason: the guard's allow entries "PATTERN: REASON", the `# sync-ok: <reason>`
comment on the line a witness names, the reason in every record and in the report, and the lines
`inspect` prints (pure functions over synthetic sites: no GPU needed)."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from dspark_lab import guard
from dspark_lab.results.analyses import by_design


@pytest.mark.parametrize("entry,split", [
    ("lib/x.py:99: the result the caller needs", ("lib/x.py:99", "the result the caller needs")),
    ("read_back:  by design", ("read_back", "by design")),
    ("read_back", ("read_back", "")),
    ("lib/x.py:99", ("lib/x.py:99", "")),
    ("*/x.py:* step: why: because", ("*/x.py:* step", "why: because")),
])
def test_an_allow_entry_is_a_pattern_and_a_reason(entry, split):
    assert guard.split_allow(entry) == split


def test_a_record_allowed_by_an_entry_carries_its_reason_and_the_report_shows_it():
    recs = guard.from_debug_sites(["lib/x.py:99 step", "lib/x.py:12 step"], allow=["lib/x.py:99: the readback"])
    assert [(r.allowed, r.reason) for r in recs] == [(True, "the readback"), (False, "")]
    report = guard.SyncReport(syncs=recs, checked=(guard.DEBUG_MODE,))
    assert "lib/x.py:99 step (sync, seen by sync debug mode, allowed: the readback)" in report.summary()
    assert report.violations == [recs[1]]


def test_an_entry_without_a_reason_still_allows_and_says_none_was_given():
    [r] = guard.from_debug_sites(["lib/x.py:99 read_back"], allow=["read_back"])
    assert r.allowed and r.reason == "" and "allowed (no reason given)" in r.describe()


def test_merged_witnesses_keep_the_reason():
    a = guard.from_debug_sites(["lib/x.py:99 f"], allow=["lib/x.py:99: why"])[0]
    b = guard._record("lib/x.py(90): f", "stream", guard.CUPTI, ())
    m = guard.merged([b, a])
    assert m.allowed and m.reason == "why" and m.witnesses == (guard.DEBUG_MODE, guard.CUPTI)


@pytest.fixture
def marked_module(tmp_path):
    """A loaded module whose line 3 is marked `# sync-ok: <reason>` and line 4 bare `# sync-ok`."""
    pkg = tmp_path / "marks_pkg"
    pkg.mkdir()
    (pkg / "stepmod.py").write_text("import torch\ndef step(x):\n    a = x.item()  # sync-ok: the count sizes the output\n"
                                    "    return x.item()  # sync-ok\n")
    spec = importlib.util.spec_from_file_location("marks_pkg_stepmod", pkg / "stepmod.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield "marks_pkg/stepmod.py"
    del sys.modules[spec.name]


def test_the_guard_honours_sync_ok_with_a_reason_on_the_line_it_names(marked_module):
    marked, bare = guard.from_debug_sites([f"{marked_module}:3 step", f"{marked_module}:4 step"])
    assert (marked.allowed, marked.reason) == (True, "the count sizes the output")
    assert not bare.allowed  # a bare `# sync-ok` gives no reason and allows nothing


def test_inspect_lists_the_by_design_syncs_with_their_reasons():
    g = {"allowed": ["lib/x.py:99 read_back", "lib/y.py:5 f"], "reasons": {"lib/x.py:99 read_back": "the readback",
                                                                          "lib/y.py:5 f": ""}}
    assert by_design.lines(g) == ["by-design syncs (allowed):", "  lib/x.py:99 read_back: the readback",
                                  f"  lib/y.py:5 f: {by_design.NO_REASON}"]
    assert by_design.lines({"allowed": []}) == [] and by_design.lines(None) == []
