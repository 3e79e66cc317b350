"""advice.recommend on synthetic rows: the step times, syncs and copies are inputs, the choice is the rule's."""
import json

import numpy as np
import pandas as pd
import pytest

from dspark_lab.results.analyses import advice, tie_margin
from helpers import synthetic_card, synthetic_hazards

PAGEABLE = {"device_direct", "non_blocking", "on_demand"}  # as the strategies copy (pageable sources)


def _rows(times: dict, ep_size: int = 8, syncs: dict | None = None, trials: int = 8, run_id: str = "r1",
          recorded_at: str = "2026-11-30T10:00:00", jitter: float = 0.01, seed: int = 0) -> pd.DataFrame:
    """One point: `times` strategy -> step ms (each trial round shares a drift, so pairs are tight)."""
    rng = np.random.default_rng(seed)
    syncs = syncs if syncs is not None else {"device_direct": 1.0}
    out = []
    for t in range(trials):
        drift = rng.normal(0, 0.05)
        for s, ms in times.items():
            read = ep_size > 1
            copies = (s in PAGEABLE and (read or s in ("device_direct", "non_blocking")))
            pinned = s == "on_demand_pinned" and read
            out.append(dict(
                run_id=run_id, point_id=f"{run_id}-ep{ep_size}", ep_size=ep_size, batch_size=8, gamma=4,
                workload="sglang_profile", model="small", strategy=s, trial=t, status="ok",
                step_ms=ms + drift + rng.normal(0, jitter), syncs_per_step=syncs.get(s, 0.0),
                h2d_pageable_per_step=1.0 if copies else 0.0, h2d_pinned_per_step=1.0 if pinned else 0.0,
                predicate=read, recorded_at=recorded_at, gpu="NVIDIA H200", driver="1", cuda="13", torch="2.11"))
    return pd.DataFrame(out)


ALL = ("device_direct", "non_blocking", "on_demand", "on_demand_pinned", "persistent_fill")
HERE = dict(cards=[synthetic_card(gpu="NVIDIA H200", driver="1")], hazards=synthetic_hazards())  # this machine's evidence


def rec_here(rows, probe=None, **kw):
    """advice.recommend with a card and a hazards record of the rows' machine (all strategies safe, pageable
    4-byte copies returning at once) unless `kw` says otherwise."""
    return advice.recommend(rows, probe, **{**HERE, **kw})


def test_the_fastest_sync_free_strategy_is_recommended_with_its_evidence():
    rows = pd.concat([
        _rows({"device_direct": 8.0, "non_blocking": 6.0, "on_demand": 6.0, "on_demand_pinned": 6.5, "persistent_fill": 5.9}),
        _rows({"device_direct": 8.0, "non_blocking": 6.0, "on_demand": 5.8, "on_demand_pinned": 5.8, "persistent_fill": 5.8},
              ep_size=1, seed=1),
    ])
    rec = rec_here(rows)
    assert rec.strategy == "persistent_fill"
    text = rec.text()
    margin = tie_margin.recorded()  # the data folder's: data/order/ of the repository
    assert f"measurably slower by {margin.pct:g}% or more: device_direct" in text and "on_demand_pinned" in text
    assert "syncs outside the readback: device_direct 1.00/step" in text
    # What EP 1 changes, read from the rows: on_demand makes no copy there, and copies again at EP 8.
    ep1 = next(e for e in rec.evidence if e.startswith("at EP 1"))
    assert "predicate false" in ep1 and "no host-to-device copy per step in on_demand" in ep1
    assert "at EP 8 on_demand" in ep1
    assert "no probe for this machine" in rec.evidence[0]
    assert advice.GATE_RULE in text and advice.RULE in text and advice.TIE_RULE in text and margin.text() in text
    # persistent_fill, non_blocking and on_demand tie at EP 8 (within the margin); persistent_fill copies least
    assert "a tie at" in text and "persistent_fill" in text.split("a tie at")[1]


def test_a_strategy_measurably_slower_at_ep1_is_not_recommended():
    # persistent_fill is fastest at EP 8 but clearly slower at EP 1; non_blocking ties at EP 8.
    rows = pd.concat([
        _rows({"device_direct": 8.0, "non_blocking": 5.905, "persistent_fill": 5.9}),
        _rows({"device_direct": 8.0, "non_blocking": 5.8, "persistent_fill": 6.4}, ep_size=1, seed=2),
    ])
    rec = rec_here(rows)
    assert rec.strategy == "non_blocking"
    assert "good at every EP regime" in rec.evidence[-1]


def test_a_strategy_with_syncs_is_never_recommended_even_when_fastest():
    rows = _rows({"device_direct": 5.0, "non_blocking": 6.0, "persistent_fill": 6.5})  # 8% apart: no tie
    rec = rec_here(rows)
    assert rec.strategy == "non_blocking"
    assert any("no EP 1 point" in e for e in rec.evidence)


def test_a_probe_saying_pageable_copies_block_rules_out_pageable_strategies():
    rows = _rows({"device_direct": 8.0, "non_blocking": 5.8, "on_demand": 5.8, "on_demand_pinned": 6.0, "persistent_fill": 6.1})
    probe = {"available": True, "queued_ms": 10.0, "pageable_nonblocking_blocks": True,
             "strategies": {s: {"idle_us": 10.0, "queued_us": 9900.0 if s in PAGEABLE else 10.0} for s in ALL}}
    rec = rec_here(rows, probe)
    assert rec.strategy in ("on_demand_pinned", "persistent_fill")
    assert "BLOCKS" in rec.evidence[0]
    assert any("ruled out by the probe" in e and "non_blocking" in e for e in rec.evidence)
    words = " ".join(advice.probe_in_words(probe))
    assert "waits for the queue" in words and "returned at once (on_demand_pinned, persistent_fill)" in words
    # not blocking: the pageable forms stay in (they tie, equal in work; the slower two are out by more than the margin)
    assert rec_here(rows, dict(probe, pageable_nonblocking_blocks=False)).strategy in ("non_blocking", "on_demand")


def test_unmeasured_syncs_are_said_and_only_times_decide():
    rows = _rows({"device_direct": 8.0, "non_blocking": 6.0}, syncs={"device_direct": np.nan, "non_blocking": np.nan})
    rec = rec_here(rows)
    assert rec.strategy == "non_blocking"
    assert any("syncs not measured" in e for e in rec.evidence)


def test_the_most_recent_run_is_judged():
    old = _rows({"device_direct": 8.0, "non_blocking": 6.0, "persistent_fill": 7.0}, run_id="old",
                recorded_at="2026-11-01T00:00:00")
    new = _rows({"device_direct": 8.0, "non_blocking": 7.0, "persistent_fill": 6.0}, run_id="new")
    rec = rec_here(pd.concat([old, new]))
    assert rec.strategy == "persistent_fill"


def test_bad_input():
    with pytest.raises(ValueError, match="no successful trial"):
        advice.recommend(_rows({"non_blocking": 6.0}).assign(status="failed"))
    with pytest.raises(ValueError, match="one point of one run"):
        advice.judge_point(pd.concat([_rows({"non_blocking": 6.0}), _rows({"non_blocking": 6.0}, ep_size=1)]))


def test_probe_in_words_without_a_probe_and_when_copies_do_not_block():
    assert "no CUDA device" in advice.probe_in_words({"available": False, "reason": "no CUDA device"})[0]
    probe = {"available": True, "queued_ms": 10.0, "pageable_nonblocking_blocks": False,
             "strategies": {s: {"idle_us": 10.0, "queued_us": 9900.0 if s == "device_direct" else 12.0} for s in ALL}}
    words = advice.probe_in_words(probe)
    assert "device_direct 9900 µs" in words[0]
    assert "does not wait for the queue (non_blocking: 12 µs)" in words[-1] and "(device_direct)" in words[-1]


def test_recorded_probe_matches_gpu_and_driver(tmp_path):
    (tmp_path / "machines").mkdir()
    probe = {"available": True, "queued_ms": 10.0, "pageable_nonblocking_blocks": False, "strategies": {}}
    (tmp_path / "machines" / "a.json").write_text(json.dumps(
        {"recorded": "2026-11-30", "fingerprint": {"gpu": "G", "driver": "1"}, "probe": probe}))
    (tmp_path / "machines" / "broken.json").write_text("{")
    got = advice.recorded_probe({"gpu": "G", "driver": "1"}, tmp_path)
    assert got["pageable_nonblocking_blocks"] is False and got["recorded"] == "2026-11-30"
    assert got["source"].endswith("a.json")
    assert advice.recorded_probe({"gpu": "G", "driver": "2"}, tmp_path) is None


def test_rows_of_real_ranks_and_predictions_are_left_out_of_the_choice_and_the_headline():
    from dspark_lab.results import Runs

    base = pd.concat([_rows({"device_direct": 8.0, "non_blocking": 6.0, "persistent_fill": 6.5}),
                      _rows({"device_direct": 8.0, "non_blocking": 6.0, "persistent_fill": 6.5}, ep_size=1, seed=3)])
    base["ep_mode"] = np.where(base.ep_size > 1, "predicate_only", "single")
    # A later real-EP run at the reference batch and gamma (two ranks, persistent_fill fastest there) and
    # a prediction at EP 8: as the GPU stage records them on the same machine.
    real = pd.concat([_rows({"device_direct": 8.0, "non_blocking": 7.0, "persistent_fill": 5.0}, ep_size=2,
                            run_id="ep", recorded_at="2026-11-30T12:00:00").assign(rank=k) for k in (0, 1)])
    real = real.assign(ep_mode="real", rank_case="x")
    pred = _rows({"device_direct": 8.0, "persistent_fill": 4.0}, run_id="pred", recorded_at="2026-11-30T13:00:00",
                 trials=1).assign(ep_mode="predicted")
    both = pd.concat([base, real, pred], ignore_index=True)
    assert rec_here(both).strategy == rec_here(base).strategy == "non_blocking"
    assert advice.latest_run(advice.measured_in_one_process(Runs(both))) == "r1"
    head = Runs(both).headline()
    assert [e["run_id"] for e in head.entries] == ["r1"] and head.lines() == Runs(base).headline().lines()


# -- the gate: only what is known correct and sync-free on this machine ------------------------------

def _strategy_copying_from_a_reused_pinned_buffer():
    """A registered strategy that is fastest but wrong under run-ahead (a reused pinned buffer)."""
    from dspark_lab import strategies
    from dspark_lab.results.facts import strategy_table as T

    def pinned_reused(num_tokens, device, parallel, *, buffer=None):  # never run here: its row is what counts
        raise AssertionError("not called")

    row = T.StrategyRow("pinned_reused", "one pinned host scalar reused, copied non-blocking", "a test",
                        card_cell=("h2d", "pinned_to_nb"))
    return strategies.registered(pinned_reused, row)


def test_a_strategy_wrong_under_run_ahead_is_never_recommended_even_when_fastest():
    with _strategy_copying_from_a_reused_pinned_buffer():
        rows = _rows({"device_direct": 8.0, "non_blocking": 6.0, "pinned_reused": 4.0})
        hz = synthetic_hazards(wrong={"pinned_reused": 199})
        rec = rec_here(rows, hazards=hz)
        assert rec.strategy == "non_blocking"
        assert "pinned_reused: 199 of 200 values wrong under run-ahead" in rec.text()
        # and with no count at all in the hazards record: unknown, not safe
        rec = rec_here(rows, hazards=synthetic_hazards(strategies=("device_direct", "non_blocking")))
        assert rec.strategy == "non_blocking" and "no count in this machine's hazards record" in rec.text()


def test_a_strategy_without_a_card_cell_is_unknown_and_never_recommended():
    from dspark_lab import strategies
    from dspark_lab.results.facts import strategy_table as T

    def cell_less(num_tokens, device, parallel, *, buffer=None):
        raise AssertionError("not called")

    with strategies.registered(cell_less, T.StrategyRow("cell_less", "a copy the card has no cell for", "a test")):
        rows = _rows({"device_direct": 8.0, "non_blocking": 6.0, "cell_less": 4.0})
        rec = rec_here(rows, hazards=synthetic_hazards())  # counted safe: only the card cell is missing
        assert rec.strategy == "non_blocking"
        assert "cell_less: no cell of its copy on this machine's card (unknown, not sync-free)" in rec.text()
        assert "no recorded card has a cell of its copy" in advice.portability_in_words(HERE["cards"], "cell_less")


def test_without_this_machines_hazards_record_or_card_nothing_is_recommended():
    rows = _rows({"device_direct": 8.0, "non_blocking": 6.0, "persistent_fill": 6.5})
    bare = advice.recommend(rows)
    assert bare.strategy is None and "no hazards record for this machine" in bare.text()
    other = advice.recommend(rows, cards=HERE["cards"], hazards=synthetic_hazards(driver="2"))
    assert other.strategy is None
    no_card = advice.recommend(rows, hazards=synthetic_hazards())
    assert no_card.strategy is None and "no platform card for this machine" in no_card.text()
    assert rec_here(rows).strategy == "non_blocking"


def test_a_strategy_whose_copy_waits_on_this_machines_card_fails_the_gate():
    rows = _rows({"device_direct": 8.0, "non_blocking": 5.0, "persistent_fill": 6.5})
    waits = synthetic_card(gpu="NVIDIA H200", driver="1", waits_from=4)
    rec = rec_here(rows, cards=[waits])
    assert rec.strategy == "persistent_fill"
    assert "non_blocking: its copy waits for the queued work on this machine's card" in rec.text()


# -- ties: equal-work strategies within the margin -----------------------------------------------

def test_equal_work_strategies_within_the_margin_tie_and_the_tie_is_broken_by_copies_not_by_noise():
    # on_demand and non_blocking do the same work at EP 8; a 2% edge (a bench's order bias) is no ranking.
    rows = pd.concat([_rows({"device_direct": 8.0, "non_blocking": 5.80, "on_demand": 5.92, "persistent_fill": 5.95}),
                      _rows({"device_direct": 8.0, "non_blocking": 5.80, "on_demand": 5.93, "persistent_fill": 5.94},
                            ep_size=1, seed=5)])
    rec = rec_here(rows)
    tie = next(e for e in rec.evidence if e.startswith("a tie at"))
    assert "non_blocking" in tie and "on_demand" in tie and "persistent_fill" in tie
    assert rec.strategy == "persistent_fill"  # 0 copies at both regimes; non_blocking copies at both
    assert "non_blocking 2" in tie and "on_demand 1" in tie and "persistent_fill 0" in tie
    # a difference beyond the margin is not a tie
    wide = pd.concat([_rows({"device_direct": 8.0, "non_blocking": 5.5, "persistent_fill": 5.95}),
                      _rows({"device_direct": 8.0, "non_blocking": 5.5, "persistent_fill": 5.94}, ep_size=1, seed=6)])
    assert rec_here(wide).strategy == "non_blocking"
    narrow = rec_here(rows, margin_pct=1.0)
    assert narrow.strategy == "non_blocking"
    assert "tie margin 1% (given by the caller, not the recorded equal-work spread)" in narrow.text()
    assert "measurably slower by 1% or more: device_direct" in narrow.text() and "3.5%" not in narrow.text()


def test_a_portability_claim_counts_the_distinct_gpu_driver_cards_behind_it():
    rows = _rows({"device_direct": 8.0, "non_blocking": 6.0, "persistent_fill": 6.5})
    two_of_one = [synthetic_card(gpu="NVIDIA H200", driver="1"),
                  synthetic_card(gpu="NVIDIA H200", driver="1", recorded="2026-01-02T10:00:00+00:00")]
    rec = rec_here(rows, cards=two_of_one)
    assert "non_blocking is sync-free on every recorded card that has its cell: 2 card(s) of 1 distinct GPU/driver" in rec.text()
    three = two_of_one + [synthetic_card(gpu="SYNTH-B", driver="9")]
    assert "3 card(s) of 2 distinct GPU/driver pairs" in advice.portability_in_words(three, "persistent_fill")


# -- arguments -------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, exc, words", [
    (lambda r: advice.recommend(None), TypeError, "rows must be a pandas DataFrame"),
    (lambda r: advice.recommend(r, probe="yes"), TypeError, "probe must be None or a probe dict"),
    (lambda r: advice.recommend(r, cards="x"), TypeError, "cards must be None or a list of cards records"),
    (lambda r: advice.recommend(r, cards=[1]), TypeError, "cards must be None or a list"),
    (lambda r: advice.recommend(r, hazards=3), TypeError, "hazards must be None or a list"),
    (lambda r: advice.recommend(r[["step_ms"]]), ValueError, "rows must hold the recorded row columns; missing run_id"),
    (lambda r: advice.recommend(r, margin_pct="3%"), ValueError, "margin_pct must be a finite number of percent >= 0"),
    (lambda r: advice.recommend(r, margin_pct=-1), ValueError, "margin_pct must be a finite number of percent >= 0"),
    (lambda r: advice.probe_in_words("x"), TypeError, "probe must be None or a probe dict"),
    (lambda r: advice.probe_in_words({"available": "maybe"}), ValueError, r"probe\['available'\] must be True or False"),
    (lambda r: advice.probe_in_words({"available": True, "queued_ms": "10"}), ValueError, r"probe\['queued_ms'\]"),
])
def test_wrong_arguments_get_an_error_naming_the_argument(call, exc, words):
    with pytest.raises(exc, match=words):
        call(_rows({"device_direct": 8.0, "non_blocking": 6.0}))


def test_a_strategy_that_writes_a_device_buffer_passes_the_gate_only_with_its_graph_form_safe_and_a_condition():
    """persistent_fill is safe under graph replay only as the kit updates it (fill_ before each replay):
    the gate needs 0 wrong in that form, and says that a fill_ captured in the graph replays its value."""
    from dspark_lab.results.analyses import advice as A
    from helpers import synthetic_hazards

    rec = synthetic_hazards()
    passed, lines = A.gate(["persistent_fill", "non_blocking"], rec, mine=None)
    assert passed == set()  # no card: nothing is sync-free, whatever the hazards say
    with_card = {"persistent_fill": A.card_results.AT_ONCE, "non_blocking": A.card_results.AT_ONCE}
    reason = A._gate_reason("persistent_fill", {h["strategy"]: h for h in rec["strategies"]}, rec, with_card, {})
    assert reason is None
    assert "graph_python_value: 200 of 200 wrong" in A._graph_condition("persistent_fill", rec)
    racy = {**rec, "forms": [{"form": "graph_device_buffer", "wrong": 3, "n": 200}]}
    assert "3 of 200 values wrong in its graph form" in A._gate_reason(
        "persistent_fill", {h["strategy"]: h for h in rec["strategies"]}, racy, with_card, {})
    bare = {**rec, "forms": []}
    assert "no count of its graph form" in A._gate_reason(
        "persistent_fill", {h["strategy"]: h for h in rec["strategies"]}, bare, with_card, {})
    assert A._gate_reason("non_blocking", {h["strategy"]: h for h in rec["strategies"]}, bare, with_card, {}) is None
