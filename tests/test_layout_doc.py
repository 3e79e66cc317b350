"""docs/layout.md lists every module of dspark_lab/ under its wing, with the first sentence of its
docstring, and the wings in the order of pyproject.toml's contracts: its generated part is what
scripts/layout_docs.py writes from the code now; the check names a module that is missing, one
listed that does not exist, and a purpose that is not its docstring's."""
from __future__ import annotations

import shutil
from pathlib import Path

from scripts import layout_docs

ROOT = Path(__file__).resolve().parents[1]


def test_the_layout_doc_is_what_the_code_writes():
    text = layout_docs.DOC.read_text()
    assert layout_docs.written(text) == text, "docs/layout.md is not current: run python -m scripts.layout_docs"
    assert layout_docs.problems(text) == []


def test_every_module_is_listed_once_under_its_wing():
    text = layout_docs.DOC.read_text()
    for module in layout_docs.modules():
        assert text.count(f"| `{module}` |") == 1, module
    assert "### results/facts" in text and "`dspark_lab/results/facts/strategy_table.py`" in text
    assert "### lint" in text and "### verify" in text


def test_the_wings_follow_the_contracts():
    layers, sub_wings = layout_docs.contracts()
    text = layout_docs.DOC.read_text()
    heads = [line[4:].split(" (")[0] for line in text.splitlines() if line.startswith("### ")]
    order = layout_docs.wing_order(layers, sub_wings)
    placed = [h for h in heads if h in order]
    assert placed == [w for w in order if w in heads]
    assert heads.index("cli") < heads.index("run") < heads.index("results/facts")


def test_a_missing_module_a_stale_one_and_a_wrong_purpose_are_named(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    pkg = tmp_path / "dspark_lab"
    (pkg / "results" / "facts").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The package."""\n')
    (pkg / "results" / "facts" / "table.py").write_text('"""One row per thing. More here."""\n')
    (pkg / "cli.py").write_text('"""The command line."""\n')
    text = "\n".join(["# Layout", layout_docs.BEGIN, layout_docs.END, ""])
    fresh = layout_docs.written(text, tmp_path)
    assert layout_docs.problems(fresh, tmp_path) == []
    assert "| `dspark_lab/results/facts/table.py` | One row per thing. |" in fresh

    (pkg / "new.py").write_text('"""Added since."""\n')
    (pkg / "cli.py").unlink()
    (pkg / "results" / "facts" / "table.py").write_text('"""One row per kind."""\n')
    assert layout_docs.problems(fresh, tmp_path) == [
        "dspark_lab/new.py: a module of the package, not listed",
        "dspark_lab/cli.py: listed, but no such module",
        "dspark_lab/results/facts/table.py: listed as 'One row per thing.', its docstring says 'One row per kind.'"]


def test_a_long_first_sentence_is_cut_at_a_clause_on_one_line(tmp_path):
    long = "A thing that does " + "a great many things, " * 12 + "and more."
    (tmp_path / "m.py").write_text(f'"""{long}\n\nThe rest."""\n')
    one = layout_docs.purpose(tmp_path / "m.py")
    assert len(one) <= layout_docs.LONGEST + 2 and one.endswith(" …") and "\n" not in one
    (tmp_path / "m.py").write_text('"""Short: with a | bar.\nOn two lines."""\n')
    assert layout_docs.purpose(tmp_path / "m.py") == "Short: with a \\| bar."
