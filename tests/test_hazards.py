"""What each fix can break: the record's reading on CPU (synthetic counts), and on CUDA the counts
measured under host run-ahead: non-zero for every pitfall, zero for every safe form and strategy."""
import pytest

from dspark_lab import strategies
from dspark_lab.measure import hazards as measure_hazards
from dspark_lab.results.analyses import hazards as H


def _record(wrong: dict, strategy_wrong: int = 0, n: int = 10) -> dict:
    return {"kind": H.HAZARDS_KIND, "schema": H.HAZARDS_SCHEMA, "fingerprint": {"gpu": "SYNTH"}, "steps": n,
            "forms": [{"form": f, "wrong": wrong.get(f, 0), "n": n} for f in H.FORMS],
            "strategies": [{"strategy": s, "wrong": strategy_wrong, "n": n} for s in strategies.BUILTIN]}


def test_every_documented_form_has_a_function_that_runs_it():
    assert set(measure_hazards.FORM_FUNCTIONS) == set(H.FORMS)
    assert {safe for _, _, safe, _ in H.FORMS.values()} == {True, False}


def test_the_table_lists_each_form_and_strategy_with_its_count():
    t = H.table(_record({"pinned_reused": 9}))
    assert len(t) == len(H.FORMS) + len(strategies.BUILTIN)
    row = t[t["form"] == H.FORMS["pinned_reused"][1]].iloc[0]
    assert (row["wrong"], row["safe"]) == ("9 of 10", "PITFALL")


def test_surprises_name_a_pitfall_that_did_not_bite_and_a_safe_form_that_did():
    unsafe = [f for f, v in H.FORMS.items() if not v[2]]
    quiet = H.surprises(_record({f: 3 for f in unsafe}))
    assert quiet == []
    got = H.surprises(_record({"pinned_fresh": 1}, strategy_wrong=2))
    assert any(s.startswith("pinned_fresh: 1 wrong") for s in got)
    assert sum("did not run ahead" in s for s in got) == len(unsafe)
    assert sum(s.startswith("strategy ") for s in got) == len(strategies.BUILTIN)


def test_a_bad_record_names_its_field():
    rec = _record({})
    rec["forms"][0]["wrong"] = 11
    with pytest.raises(ValueError, match=r"forms\[0\] needs integers 0 <= wrong <= n"):
        H.validate(rec)
    with pytest.raises(ValueError, match="field 'kind'"):
        H.validate({})


def test_without_cuda_the_measurement_says_why():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="need a CUDA device"):
        measure_hazards.measure_hazards()


@pytest.mark.cuda
def test_under_run_ahead_every_pitfall_delivers_wrong_values_and_every_safe_form_and_strategy_none():
    rec = H.validate(measure_hazards.measure_hazards(n=50, queued_ms=0.2))
    by_form = {c["form"]: c["wrong"] for c in rec["forms"]}
    for form, (_, _, safe, _) in H.FORMS.items():
        assert (by_form[form] == 0) if safe else (by_form[form] > 0), (form, by_form[form])
    assert {s["strategy"]: s["wrong"] for s in rec["strategies"]} == {s: 0 for s in strategies.BUILTIN}
