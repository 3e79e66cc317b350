"""Records name source lines and quote their code; the file moves on. Every committed inspect record's
sites are re-checked against today's source, and the join with today's lint says where a recorded
line moved instead of reporting one sync twice (runtime-only at the old line, static-only at the new)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import dspark_lab
from dspark_lab.cli.lint import lint_beside
from dspark_lab.results.analyses import lint_join
from dspark_lab.results.record.recorded_lines import relocate
from dspark_lab.results.record.sync_sites import parse_site

PACKAGE = Path(dspark_lab.__file__).parent
RECORDS = sorted((PACKAGE.parent / "data" / "inspect").glob("*.json"))


def today_file(site) -> Path:
    return PACKAGE / site.path  # sites name the last two path parts: "gallery/cases.py"


def test_relocate_finds_the_recorded_code_at_its_new_line():
    today = ["def f(s):", "    pass", "    n = s.sum().item()  # sync"]
    assert relocate("n = s.sum().item()  # sync", 2, today).note() == "recorded on other code: line 2 moved to 3"
    assert relocate("n = s.sum().item()  # sync", 3, today).note() == ""
    assert "no line of today's file does" in relocate("gone()", 1, today).note()


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_every_recorded_site_is_joined_where_its_code_is_today(path):
    rec = json.loads(path.read_text())
    quoted = [s for s in rec["sites"] if s.get("code")]
    if not quoted:
        pytest.skip(f"{path.name} records no site with its code")
    joined = _joined(rec)
    rows = {r["site"]: r for r in joined if r["found_by"] != "static"}
    moved = []
    for s in quoted:
        site = parse_site(s["site"])
        where = relocate(s["code"], site.line, today_file(site).read_text().splitlines())
        assert where.today is not None, f"{path.name}: {s['site']}'s code {s['code']!r} is in no line of today's file"
        row = rows[s["site"]]
        assert row["moved"] == where.note(), (path.name, s["site"], row)
        if where.moved:
            moved.append(f"{s['site']}: line {where.recorded} -> {where.today}")
            # one sync, one row: no static-only finding left at the line the code moved to
            static_at_new = [r for r in joined if r["found_by"] == "static"
                             and r["site"].startswith(f"{site.path}:{where.today} ")]
            assert not static_at_new, (path.name, static_at_new)
    print(f"{path.name}: moved since recorded: {'; '.join(moved) or 'none'}")


def _joined(rec: dict) -> list[dict]:
    rec = dict(rec)
    lint_beside(rec, PACKAGE / "gallery")
    return rec["lint"]


def test_the_recorded_scalar_item_lesson_is_one_sync_found_by_both():
    from dspark_lab.results.record import inspect_record

    before, _ = inspect_record.recorded_pair("scalar_item")
    [site] = before["sites"]
    recorded = parse_site(site["site"]).line
    text = "\n".join(lint_beside(dict(before), PACKAGE / "gallery" / "cases.py"))
    today = next(i + 1 for i, ln in enumerate((PACKAGE / "gallery/cases.py").read_text().splitlines())
                 if ln.strip() == site["code"].strip())
    assert f"both    {site['site']} [item]" in text
    if today != recorded:
        assert f"recorded on other code: line {recorded} moved to {today}" in text
        assert f"static  gallery/cases.py:{today} " not in text


def test_a_site_whose_code_is_gone_is_not_joined_with_the_finding_now_on_its_line():
    finding = {"path": "pkg/mod.py", "line": 3, "function": "f", "rule": "item", "code": "x.item()"}
    site = {"site": "pkg/mod.py:3 f", "exact": True, "per_step": 1.0, "host_blocked_ms": 0.1,
            "gpu_idle_ms": 0.1, "code": "y.tolist()"}
    rows = lint_join.join([finding], [site], today_lines=lambda p: ["def f(x):", "    pass", "    x.item()"])
    [runtime] = [r for r in rows if r["found_by"] == "runtime"]
    assert "no line of today's file does" in runtime["why_only_one"]
    assert [r["found_by"] for r in rows] == ["runtime", "static"]
