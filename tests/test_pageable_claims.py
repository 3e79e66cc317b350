"""A pageable copy's staging is stated with its condition: CUDA promises a return only once a pageable
source is staged for a synchronous copy; for an asynchronous one the driver *may* synchronize and
stage (CUDA's "API synchronization behavior"). What one machine did is a measurement, said as such."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The rule stated without its condition, in the forms the kit's texts used.
UNCONDITIONAL = ("CUDA stages a pageable source before the call returns", "CUDA staged it synchronously",
                 "no sync at all, a staged copy", "the driver stages it through its own pinned buffer behind the queue")


def teaching_texts() -> dict[str, str]:
    out = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "docs").glob("*.md")}
    out.update({str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "dspark_lab").rglob("*.py")})
    for p in (ROOT / "notebooks").glob("*.ipynb"):
        out[str(p.relative_to(ROOT))] = "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"])
    return out


@pytest.mark.parametrize("sentence", UNCONDITIONAL)
def test_no_text_states_pageable_staging_as_a_cuda_rule(sentence):
    flat = {name: " ".join(text.split()) for name, text in teaching_texts().items()}
    assert [name for name, text in flat.items() if sentence in text] == []


def test_notebook01_and_the_strategy_say_the_freed_temporary_is_a_measurement_with_its_condition():
    texts = {k: " ".join(v.replace('"\n', "").replace('    ', ' ').split()) for k, v in teaching_texts().items()}
    nb01 = texts["notebooks/01_onboarding.ipynb"]
    assert "That is a measurement, not a CUDA guarantee" in nb01 and "*synchronous* copy from pageable memory" in nb01
    strategies = texts["dspark_lab/strategies.py"]
    assert "a measurement rather than a CUDA guarantee" in strategies and "the driver may synchronize and stage" in strategies
