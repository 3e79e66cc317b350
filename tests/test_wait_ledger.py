"""Where every wait of a step went after a fix (results.analyses.wait_ledger), on made-up inspect records:
a wait removed, a wait moved into another site, a wait grown at the by-design read-back; and the
investigation record's optional race check and owner forms checked by field."""
from __future__ import annotations

import math

import pytest

from dspark_lab.results.analyses import wait_ledger as W
from dspark_lab.results.record import investigation
from helpers import inspect_record
from test_notebook06 import synthetic_investigation

A = ("a.py:10 step", 1.0, True, 2.0, 1.5, "x.item()")
B = ("a.py:20 owner", 1.0, True, 0.01, 0.0, "torch.repeat_interleave(t, r)")


def _rows(before, after):
    t = W.ledger(before, after)
    return t, {r["where"]: r for r in t.to_dict("records")}


def test_a_removed_wait_grows_nowhere_and_the_totals_are_the_records():
    before, after = inspect_record("slow", [A, B]), inspect_record("fixed", [B])
    t, rows = _rows(before, after)
    assert list(t["where"]) == ["a.py:10 step", "a.py:20 owner", W.READBACK_ROW, W.TOTAL_ROW]  # removed, then same
    assert rows["a.py:10 step"]["status"] == "removed" and math.isnan(rows["a.py:10 step"]["host wait after ms"])
    assert rows[W.TOTAL_ROW]["host wait before ms"] == pytest.approx(2.01)
    assert rows[W.TOTAL_ROW]["charged idle after ms"] == pytest.approx(0.0)
    assert W.grown(t) == []


def test_a_moved_wait_is_named_where_it_grew_and_the_readback_is_a_row_of_its_own():
    before = inspect_record("slow", [A, B])
    moved = inspect_record("fixed", [B[:3] + (1.8, 1.2, B[5])])
    assert W.grown(W.ledger(before, moved)) == ["a.py:20 owner (+1.790 ms)"]
    late = inspect_record("fixed", [B])
    late["parts"]["host_readback_ms"] = 0.5
    t, rows = _rows(before, late)
    assert rows[W.READBACK_ROW]["host wait after ms"] == 0.5 and math.isnan(rows[W.READBACK_ROW]["charged idle after ms"])
    assert W.grown(t) == [f"{W.READBACK_ROW} (+0.500 ms)"]


def test_the_investigation_records_race_check_and_owner_forms_are_checked_by_field():
    rec = synthetic_investigation()
    assert investigation.validate(rec) is rec and "the same rows" in investigation.owner_forms_text(rec)
    with pytest.raises(ValueError, match="field 'owner_forms' must hold calls"):
        investigation.validate({**rec, "owner_forms": {"calls": 1}})
    with pytest.raises(ValueError, match="field 'races'"):
        investigation.validate({**rec, "races": "clean"})
    assert "DIFFERENT rows" in investigation.owner_forms_text({**rec, "owner_forms": {**rec["owner_forms"], "equal": False}})
