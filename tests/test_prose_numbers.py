"""Numbers in the notebooks' prose: a measurement typed into a markdown cell can drift from the data, so
prose may hold one only as a cited PR's own figure, and then the figure must be what the citation table
says the PR says (results/facts/citations.py). Measured numbers are printed by code cells from the data."""
import json
import re
from pathlib import Path

import pytest

from dspark_lab.results.facts import citations as C

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# a number with the unit of a measurement: time, a share, a ratio
MEASUREMENT = re.compile(r"(?<![\w.#])(\d+(?:\.\d+)?)(?:\s?[–-]\s?(\d+(?:\.\d+)?))?\s?(ms|µs|us|%|×|x)(?![\w])")
# settings of the method, not measurements: the confidence level, and the GPU work a probe queues
SETTING = re.compile(r"^\d+%\s(?:CI|bootstrap|confidence)|^\d+(?:\.\d+)?\s?ms\sof\s(?:GPU\s)?work\squeued")
SENTENCE = re.compile(r"(?<=[.!?:])\s+(?=[A-Z`*(\"])|\n\s*\n")


def _strip_code(text: str) -> str:
    """Prose without inline code or code blocks (code is not a claim)."""
    return re.sub(r"`[^`]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


def typed_numbers(markdown: str) -> list[tuple[str, str]]:
    """(number as typed, its sentence) for each measurement-like number in `markdown` that is not a
    cited PR's own figure, as the citation table states it."""
    bad = []
    for sentence in SENTENCE.split(_strip_code(markdown)):
        cited = [C.CITATIONS[k] for k in C.find(sentence) if k in C.CITATIONS]
        says = " ".join(c.says for c in cited).replace("×", "x")
        quoted = set(re.findall(r"\d+(?:\.\d+)?", says))
        for m in MEASUREMENT.finditer(sentence):
            if SETTING.match(sentence[m.start():]):
                continue
            nums = [n for n in m.groups()[:2] if n]
            if not (cited and all(n in quoted for n in nums)):
                bad.append((m.group(0), sentence.strip()[:160]))
    return bad


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_markdown_cells_hold_no_typed_measurement(nb):
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    found = [(i, n, s) for i, c in enumerate(cells) if c["cell_type"] == "markdown"
             for n, s in typed_numbers("".join(c["source"]))]
    assert found == []


def test_a_typed_measurement_is_found_and_a_cited_figure_is_checked_against_the_table():
    assert typed_numbers("Here the penalty is 1.4× and the fix 29% faster.") == [
        ("1.4×", "Here the penalty is 1.4× and the fix 29% faster."),
        ("29%", "Here the penalty is 1.4× and the fix 29% faster.")]
    # the PR's own figure, as the table states it: allowed
    assert typed_numbers("SGLang #34759 measured 6–9% per EP-1 step.") == []
    # the same PR with a figure it does not state: caught
    assert typed_numbers("SGLang #34759 measured 12% per EP-1 step.") == [
        ("12%", "SGLang #34759 measured 12% per EP-1 step.")]
    # code is not prose; a count without a unit is not a measurement
    assert typed_numbers("Run `sleep(10 ms)` on two cards with EP 8.") == []
    assert typed_numbers("SGLang #34759 used 2× RTX PRO 6000 cards.") == []  # as the table states it
    # settings of the method are not measurements
    assert typed_numbers("Medians with a 95% CI, with 10 ms of work queued.") == []
