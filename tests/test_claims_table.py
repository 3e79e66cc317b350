"""The claims table (docs/claims.md): every row points at a file that exists and at text that is still
there (an edited or removed claim fails here, asking for its row to be checked again; a claim that
only moved is found where it went, and `python tests/test_claims_table.py --refresh` writes its new
place into the table), every row has a status from the allowed set, and no row is wrong or unsafe."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "claims.md"
STATUSES = ("right", "right-but-missing-a-condition", "imprecise", "wrong", "unsafe", "unverifiable")
BLOCKING = ("wrong", "unsafe")
COLUMNS = ("id", "where", "fragment", "claim", "evidence", "status", "note")
NEAR = 3  # lines either side of `file:line` where the fragment may sit
_WS = re.compile(r"\s+")
_CELL = re.compile(r"^(?P<path>.+\.ipynb)#cell(?P<cell>\d+)$")
_LINE = re.compile(r"^(?P<path>[^#:]+):(?P<line>\d+)$")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def split_row(line: str) -> list[str]:
    """A Markdown table row's cells, `\\|` kept as a literal pipe."""
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")):
        raise ValueError(f"not a table row: {line[:60]!r}")
    cells = re.split(r"(?<!\\)\|", body[1:-1])
    return [c.strip().replace("\\|", "|") for c in cells]


def rows(text: str) -> list[dict]:
    """The claims table's rows (the table whose header is COLUMNS)."""
    out, in_table = [], False
    for line in text.splitlines():
        if not line.strip().startswith("|"):
            in_table = False
            continue
        cells = split_row(line)
        if tuple(cells) == COLUMNS:
            in_table = True
            continue
        if in_table and not set("".join(cells)) <= set("-: "):
            if len(cells) != len(COLUMNS):
                raise ValueError(f"row {cells[0]!r} has {len(cells)} cells, not {len(COLUMNS)}")
            out.append(dict(zip(COLUMNS, cells)))
    return out


def moved_to(where: str, fragment: str, root: Path = ROOT) -> str:
    """Where `fragment` stands now in the file `where` names ('path:LINE' or 'nb.ipynb#cellN', its first
    place), or '' when it is nowhere in that file."""
    m = _CELL.match(where) or _LINE.match(where)
    path = root / m["path"] if m else None
    if path is None or not path.is_file():
        return ""
    want = _norm(fragment)
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        hits = [i for i, c in enumerate(cells) if want in _norm("".join(c["source"]))]
        return f"{m['path']}#cell{hits[0]}" if hits else ""
    lines = path.read_text(encoding="utf-8").splitlines()
    on_one = [n for n, line in enumerate(lines, 1) if want in _norm(line)]
    spread = [n for n in range(1, len(lines) + 1) if want in _norm(" ".join(lines[n - 1: n + NEAR]))]
    hits = on_one or spread  # the line that holds it, else the first of the lines it starts within
    return f"{m['path']}:{hits[0]}" if hits else ""


def locate(where: str, fragment: str, root: Path = ROOT) -> str:
    """'' when `fragment` is found at `where` (`path:LINE` within NEAR lines, or `nb.ipynb#cellN`), else why not."""
    m = _CELL.match(where)
    if m:
        path = root / m["path"]
        if not path.is_file():
            return f"{m['path']} does not exist"
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        i = int(m["cell"])
        if i >= len(cells):
            return f"{m['path']} has no cell {i}"
        found = _norm(fragment) in _norm("".join(cells[i]["source"]))
        return "" if found else f"fragment not in {where}: {fragment[:60]!r}"
    m = _LINE.match(where)
    if not m:
        return f"where must be path:LINE or path.ipynb#cellN; got {where!r}"
    path = root / m["path"]
    if not path.is_file():
        return f"{m['path']} does not exist"
    lines = path.read_text(encoding="utf-8").splitlines()
    n = int(m["line"])
    window = " ".join(lines[max(0, n - 1 - NEAR): n + NEAR])
    return "" if _norm(fragment) in _norm(window) else f"fragment not within {NEAR} lines of {where}: {fragment[:60]!r}"


TABLE_ROWS = rows(TABLE.read_text(encoding="utf-8"))


def test_the_table_has_rows_with_unique_ids():
    ids = [r["id"] for r in TABLE_ROWS]
    assert len(ids) >= 80, len(ids)
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("row", TABLE_ROWS, ids=lambda r: r["id"])
def test_each_row_points_at_its_text(row):
    assert row["fragment"], row["id"]
    why = locate(row["where"], row["fragment"])
    assert why == "" or moved_to(row["where"], row["fragment"]), why  # moved only: --refresh writes its place


@pytest.mark.parametrize("row", TABLE_ROWS, ids=lambda r: r["id"])
def test_each_row_has_an_allowed_status_and_evidence(row):
    assert row["status"] in STATUSES, (row["id"], row["status"])
    assert row["evidence"], row["id"]
    if row["status"] != "right":
        assert row["note"], f"{row['id']}: a status other than right says why"


def test_no_row_is_wrong_or_unsafe():
    bad = [(r["id"], r["where"], r["note"]) for r in TABLE_ROWS if r["status"] in BLOCKING]
    assert bad == []


def test_the_checker_finds_moved_and_missing_text(tmp_path):
    (tmp_path / "a.md").write_text("one\ntwo\nthe claim here\nfour\n" + "x\n" * 10 + "far\n", encoding="utf-8")
    nb = {"cells": [{"cell_type": "markdown", "source": ["A claim split\n", "over lines."]}]}
    (tmp_path / "n.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    assert locate("a.md:3", "the claim", tmp_path) == ""
    assert locate("a.md:1", "the claim", tmp_path) == ""  # within NEAR lines
    assert "not within" in locate("a.md:15", "the claim", tmp_path)
    assert "not within" in locate("a.md:3", "far", tmp_path)
    assert "does not exist" in locate("b.md:3", "x", tmp_path)
    assert locate("n.ipynb#cell0", "claim split over lines", tmp_path) == ""
    assert "no cell" in locate("n.ipynb#cell1", "x", tmp_path)
    assert "fragment not in" in locate("n.ipynb#cell0", "another", tmp_path)
    assert "where must be" in locate("a.md", "x", tmp_path)
    assert moved_to("a.md:15", "the claim", tmp_path) == "a.md:3"  # moved: found where it went
    assert moved_to("n.ipynb#cell4", "over lines", tmp_path) == "n.ipynb#cell0"
    assert moved_to("a.md:3", "edited away", tmp_path) == "" and moved_to("b.md:1", "x", tmp_path) == ""


def test_the_parser_reads_escaped_pipes_and_rejects_short_rows():
    text = ("| id | where | fragment | claim | evidence | status | note |\n|---|---|---|---|---|---|---|\n"
            "| C1 | a.md:1 | x \\| y | c | e | right |  |\n")
    assert rows(text)[0]["fragment"] == "x | y"
    with pytest.raises(ValueError, match="cells"):
        rows(text + "| C2 | a.md:1 | x |\n")


def refresh(table: Path = TABLE) -> int:
    """Writes each moved row's new place into the table; returns how many rows moved."""
    lines, moved = table.read_text(encoding="utf-8").split("\n"), 0
    for k, line in enumerate(lines):
        if not line.startswith("| C"):
            continue
        cells = re.split(r"(?<!\\)\|", line)
        row = dict(zip(COLUMNS, (c.strip().replace("\\|", "|") for c in cells[1:-1])))
        if locate(row["where"], row["fragment"]) and (now := moved_to(row["where"], row["fragment"])):
            cells[2] = f" {now} "
            lines[k], moved = "|".join(cells), moved + 1
    table.write_text("\n".join(lines), encoding="utf-8")
    return moved


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--refresh"]:
        sys.exit("usage: python tests/test_claims_table.py --refresh")
    print(f"{refresh()} rows moved")
