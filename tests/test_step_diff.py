"""Sync sites counted by line once, the inspect record's format, `dspark-lab diff` on recorded
records (its table and its Markdown), and the inspect page. Made-up records (tests/helpers.py)."""
from __future__ import annotations

import json

import pytest

from dspark_lab.cli import main as cli
from dspark_lab.results.analyses import step_diff
from dspark_lab.results.record import inspect_record as step_record
from dspark_lab.results.record.sync_sites import distinct_lines, merge_sites, parse_site

from helpers import inspect_record

ITEM = ("gallery/cases.py:123 seq_lens_sum_item", 1.0, True, 0.9, 0.6, "seq_lens_sum = torch.sum(s.seq_lens).item()")
MASK = ("app/model.py:40 mask", 1.0, True, 0.2, 0.1, "if (x > 0).any():")
COPY = ("app/model.py:50 publish", 1.0, False, 0.3, 0.25, None)


def test_both_site_forms_parse_to_one_spelling():
    a, b = parse_site("gallery/cases.py:123 f"), parse_site("gallery/cases.py(120): f")
    assert (a.key, a.exact, b.key, b.exact) == ("gallery/cases.py:123 f", True, "gallery/cases.py:120 f", False)
    assert a.where == b.where
    with pytest.raises(ValueError, match="sync site must read"):
        parse_site("aten::item")


def test_a_sync_named_by_two_witnesses_is_one_site_by_its_exact_line():
    exact = {"m/a.py:12 step": 1.0}
    function_level = {"m/a.py:10 step": 1.0, "m/b.py:3 other": 2.0}
    assert merge_sites(exact, function_level) == {"m/a.py:12 step": 1.0, "m/b.py:3 other": 2.0}


@pytest.mark.parametrize("records_per_sync", [1, 2])
def test_distinct_lines_do_not_depend_on_how_many_records_a_sync_gives(records_per_sync):
    one_sync = [("m/a.py:12 step", True), ("m/a.py:10 step", False)][:records_per_sync]
    pageable = [("m/a.py:10 step2", False)]
    assert distinct_lines(one_sync * 3 + pageable) == ["m/a.py:12 step", "m/a.py:10 step2"]


def test_a_record_round_trips_and_a_bad_one_names_the_field(tmp_path):
    rec = inspect_record("before", [ITEM])
    rec["counts"]["syncs_per_step"] = float("nan")  # not measurable: written as null
    p = step_record.save(rec, tmp_path / "r.json")
    back = step_record.load(p)
    assert back["sites"] == rec["sites"] and back["counts"]["syncs_per_step"] is None
    bad = json.loads(p.read_text())
    del bad["trials"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(step_record.RecordError, match="bad.json: missing field.*trials"):
        step_record.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"kind": "dspark_gallery"}))
    with pytest.raises(step_record.RecordError, match="kind must be 'dspark_inspect'; got 'dspark_gallery'"):
        step_record.load(tmp_path / "other.json")


def _pair(paired=True):
    pid = {"id": "p1"} if paired else None
    before = inspect_record("before", [ITEM, MASK], trials=(3.0, 3.1, 2.9, 3.0, 3.05), pair=pid)
    moved = ("app/model.py:44 mask", 2.0, True, 0.3, 0.2, "if (x > 0).any():")  # an edit above moved it
    after = inspect_record("after", [moved, COPY], trials=(2.0, 2.1, 1.95, 2.0, 2.02), pair=pid)
    return before, after


def test_sites_are_matched_by_function_and_code_so_a_moved_line_is_the_same_site():
    d = step_diff.diff(*_pair())
    s = d["sites"].set_index("status")
    assert list(d["sites"]["status"]) == ["added", "removed", "changed"]
    assert s.loc["removed", "site"] == ITEM[0] and s.loc["removed", "before_idle_ms"] == 0.6
    assert s.loc["changed", "site"] == "app/model.py:44 mask"
    assert (s.loc["changed", "before_per_step"], s.loc["changed", "after_per_step"]) == (1.0, 2.0)
    assert s.loc["added", "site"] == COPY[0] and s.loc["added", "after_idle_ms"] == 0.25


def test_the_step_time_change_is_paired_only_for_steps_measured_together():
    together = step_diff.step_time_change(*_pair(paired=True))
    apart = step_diff.step_time_change(*_pair(paired=False))
    assert together["paired"] and not apart["paired"]
    assert together["pct"] < 0 and together["measurable"]


def test_the_markdown_diff_of_recorded_records_reads_as_a_pr_table():
    md = step_diff.markdown(step_diff.diff(*_pair()))
    assert md.startswith("#### Host syncs: `synth.py:before` → `synth.py:after`")
    assert "| host syncs per step | 2.00 | 3.00 | +1.000 |" in md
    assert "| GPU idle the syncs caused, ms per step | 0.700 | 0.450 | \u22120.250 |" in md
    assert "Sync sites: 1 added, 1 removed, 1 changed, 0 same." in md
    assert f"| `{ITEM[0]}`<br>`{ITEM[5]}` | removed | 1.00 → – | 0.600 → – |" in md
    assert "| `app/model.py:44 mask`<br>`if (x > 0).any():` | changed | 1.00 → 2.00 | 0.100 → 0.200 |" in md
    assert "faster" in md and "paired per round over 5 interleaved trials" in md and "SYNTH-GPU" in md


def test_a_diff_recorded_without_cuda_says_its_counts_are_not_measurable():
    b, a = _pair()
    b["device"] = "cpu"
    assert "not measurable" in step_diff.markdown(step_diff.diff(b, a))


def test_diff_of_two_recorded_records_prints_the_table_and_writes_the_markdown(tmp_path, capsys):
    b, a = _pair()
    pb, pa = step_record.save(b, tmp_path / "b.json"), step_record.save(a, tmp_path / "a.json")
    out = tmp_path / "out"
    assert cli.main(["diff", str(pb), str(pa), "--out", str(out), "--name", "d"]) == 0
    printed = capsys.readouterr().out
    assert "removed" in printed and "after is" in printed
    assert (out / "d.md").read_text().strip() == step_diff.markdown(step_diff.diff(step_record.load(pb),
                                                                                    step_record.load(pa)))
    assert sorted(p.name for p in out.iterdir()) == ["d.md"]  # recorded input: no new records


def test_diff_of_a_damaged_record_exits_2_naming_it_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "b.json").write_text("{not json")
    pa = step_record.save(_pair()[1], tmp_path / "a.json")
    out = tmp_path / "out"
    assert cli.main(["diff", str(tmp_path / "b.json"), str(pa), "--out", str(out)]) == 2
    assert "b.json: not JSON" in capsys.readouterr().err and not out.exists()


def test_the_page_shows_the_sites_with_their_code_the_guard_and_the_kits_figures():
    pytest.importorskip("plotly")
    from dspark_lab.views import inspect_page

    rec = inspect_record("before", [ITEM, COPY])
    rec["guard"] = {"checked": ["sync debug mode"], "allow": [], "violations": [ITEM[0]], "allowed": []}
    page = inspect_page.build_html(rec)
    assert ITEM[0] in page and "seq_lens_sum = torch.sum(s.seq_lens).item()" in page
    assert "host sync lines not allowed" in page
    for title in ("Timeline: host thread and GPU stream", "Step-time breakdown", "Syncs per step"):
        assert title in page
    assert "SYNTH-GPU" in page and page.count("plotly.js v") <= 2  # plotly.js inlined once


def test_an_inspected_step_with_its_waits_by_kind_draws_as_a_point():
    """A record with the waits by kind (JSON text) and why one is charged nothing beside its parts, as
    inspect records them: the point view keeps those as text and the figures draw it."""
    from dspark_lab.results.viewmodels import inspect_view

    rec = inspect_record("before", [ITEM, COPY])
    charges = {"copy_to_device": {"per_step": 1.0, "blocked_ms": 4.1, "charged_ms": 2.1}}
    rec["waits"] = {"charges": json.dumps(charges), "note": ""}
    got = inspect_view.rows(rec)
    assert json.loads(got["wait_charges"].iloc[0]) == charges and got["wait_note"].iloc[0] == ""
    assert got["host_blocked_ms"].dtype == float
    assert inspect_view.view(rec).rows["strategy"].tolist() == ["before"] * len(rec["trials"])


def test_a_site_the_allow_list_names_is_marked_allowed_in_the_markdown():
    b, a = _pair()
    readback = {"site": "app/model.py:70 read_back", "per_step": 1.0, "exact": True, "host_blocked_ms": 0.1,
                "gpu_idle_ms": 0.0, "code": "done.synchronize()", "allowed": True}
    a["sites"].append(readback)
    md = step_diff.markdown(step_diff.diff(b, a))
    assert "| `app/model.py:70 read_back`<br>`done.synchronize()` | added (allowed) | – → 1.00 |" in md
