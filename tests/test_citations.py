"""The citation table: every PR a text cites is in it, docs/citations.md is generated from it, and its
reader finds citations in the forms texts write them."""
import json
from pathlib import Path

import pytest

from dspark_lab.results.facts import citations as C

ROOT = Path(__file__).resolve().parents[1]


def _texts():
    """(where, text) of every user-facing text: the package's sources, the notebooks' cells, docs, README."""
    for p in sorted((ROOT / "dspark_lab").rglob("*.py")):
        yield str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")
    for p in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
        yield str(p.relative_to(ROOT)), "\n".join("".join(c["source"]) for c in cells)
    for p in sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]:
        yield str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")


def test_no_text_cites_a_pr_missing_from_the_table():
    missing = {where: C.missing(text) for where, text in _texts()}
    assert {w: m for w, m in missing.items() if m} == {}


def test_docs_citations_md_is_generated_from_the_table():
    assert (ROOT / "docs" / "citations.md").read_text(encoding="utf-8") == C.markdown(), (
        "docs/citations.md is stale: python -m dspark_lab.results.facts.citations > docs/citations.md")


@pytest.mark.parametrize("text, want", [
    ("SGLang #26128 / #30365 / #31364", [("SGLang", 26128), ("SGLang", 30365), ("SGLang", 31364)]),
    ("PR #34782 and #38703", [("SGLang", 34782), ("SGLang", 38703)]),
    ("vLLM #56202; #56203 follows the tensor", [("vLLM", 56202), ("vLLM", 56203)]),
    ("tokenspeed #45, pytorch #130785", [("tokenspeed", 45), ("PyTorch", 130785)]),
    ("color:#555; colour '#17becf' and \"#9467bd\"", []),
])
def test_citations_are_found_in_the_forms_texts_write_them(text, want):
    assert C.find(text) == want


def test_a_citation_not_in_the_table_is_named():
    assert C.missing("as SGLang #1 and vLLM #99999 say") == ["SGLang #1", "vLLM #99999"]
    assert C.find("Advanced_Optimizers #5") == [("Advanced_Optimizers", 5)] and C.find("step #1") == []
    with pytest.raises(ValueError, match="SGLang #1 is not in the citation table"):
        C.cite("SGLang", 1)
    assert C.cite("SGLang", 34782) == "SGLang #34782"


def test_a_row_with_an_unknown_project_or_status_is_refused():
    with pytest.raises(ValueError, match="citation project must be one of"):
        C.Citation("Nowhere", 1, "t", "s", "q", C.CHECKED)
    with pytest.raises(ValueError, match="status must be one of"):
        C.Citation("SGLang", 1, "t", "s", "q", "maybe")


def test_what_could_not_be_found_is_marked_so():
    assert C.get("SGLang", 6474).status == C.get("SGLang", 29415).status == C.NOT_FOUND
    assert C.get("SGLang", 26462).state == "closed"


def test_a_bare_number_far_from_a_project_is_sglangs():
    text = "vLLM #24105 made the trade.\nLater PR #34782 fixed the scalar."
    assert C.find(text) == [("vLLM", 24105), ("SGLang", 34782)]
