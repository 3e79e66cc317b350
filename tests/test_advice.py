"""advice.recommend on synthetic rows: the step times, syncs and copies are inputs, the choice is the rule's."""
import json

import numpy as np
import pandas as pd
import pytest

from dspark_lab.results.analyses import advice

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


def test_the_fastest_sync_free_strategy_is_recommended_with_its_evidence():
    rows = pd.concat([
        _rows({"device_direct": 8.0, "non_blocking": 6.0, "on_demand": 6.0, "on_demand_pinned": 6.5, "persistent_fill": 5.9}),
        _rows({"device_direct": 8.0, "non_blocking": 6.0, "on_demand": 5.8, "on_demand_pinned": 5.8, "persistent_fill": 5.8},
              ep_size=1, seed=1),
    ])
    rec = advice.recommend(rows)
    assert rec.strategy == "persistent_fill"
    text = rec.text()
    assert "measurably slower: device_direct" in text and "on_demand_pinned" in text
    assert "syncs outside the readback: device_direct 1.00/step" in text
    # What EP 1 changes, read from the rows: on_demand makes no copy there, and copies again at EP 8.
    ep1 = next(e for e in rec.evidence if e.startswith("at EP 1"))
    assert "predicate false" in ep1 and "no host-to-device copy per step in on_demand" in ep1
    assert "at EP 8 on_demand" in ep1
    assert "no probe for this machine" in rec.evidence[0]
    assert text.endswith(advice.RULE)


def test_a_strategy_measurably_slower_at_ep1_is_not_recommended():
    # persistent_fill is fastest at EP 8 but clearly slower at EP 1; non_blocking ties at EP 8.
    rows = pd.concat([
        _rows({"device_direct": 8.0, "non_blocking": 5.905, "persistent_fill": 5.9}),
        _rows({"device_direct": 8.0, "non_blocking": 5.8, "persistent_fill": 6.4}, ep_size=1, seed=2),
    ])
    rec = advice.recommend(rows)
    assert rec.strategy == "non_blocking"
    assert "good at every EP regime" in rec.evidence[-1]


def test_a_strategy_with_syncs_is_never_recommended_even_when_fastest():
    rows = _rows({"device_direct": 5.0, "non_blocking": 6.0, "persistent_fill": 6.2})
    rec = advice.recommend(rows)
    assert rec.strategy == "non_blocking"
    assert any("no EP 1 point" in e for e in rec.evidence)


def test_a_probe_saying_pageable_copies_block_rules_out_pageable_strategies():
    rows = _rows({"device_direct": 8.0, "non_blocking": 5.8, "on_demand": 5.8, "on_demand_pinned": 6.0, "persistent_fill": 6.1})
    probe = {"available": True, "queued_ms": 10.0, "pageable_nonblocking_blocks": True,
             "strategies": {s: {"idle_us": 10.0, "queued_us": 9900.0 if s in PAGEABLE else 10.0} for s in ALL}}
    rec = advice.recommend(rows, probe)
    assert rec.strategy == "on_demand_pinned"
    assert "BLOCKS" in rec.evidence[0]
    assert any("ruled out by the probe" in e and "non_blocking" in e for e in rec.evidence)
    words = " ".join(advice.probe_in_words(probe))
    assert "waits for the queue" in words and "returned at once (on_demand_pinned, persistent_fill)" in words
    assert advice.recommend(rows, dict(probe, pageable_nonblocking_blocks=False)).strategy in ("non_blocking", "on_demand")


def test_unmeasured_syncs_are_said_and_only_times_decide():
    rows = _rows({"device_direct": 8.0, "non_blocking": 6.0}, syncs={"device_direct": np.nan, "non_blocking": np.nan})
    rec = advice.recommend(rows)
    assert rec.strategy == "non_blocking"
    assert any("syncs not measured" in e for e in rec.evidence)


def test_the_most_recent_run_is_judged():
    old = _rows({"device_direct": 8.0, "non_blocking": 6.0, "persistent_fill": 7.0}, run_id="old",
                recorded_at="2026-11-01T00:00:00")
    new = _rows({"device_direct": 8.0, "non_blocking": 7.0, "persistent_fill": 6.0}, run_id="new")
    rec = advice.recommend(pd.concat([old, new]))
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
    assert advice.recommend(both).strategy == advice.recommend(base).strategy == "non_blocking"
    assert advice.latest_run(advice.measured_in_one_process(Runs(both))) == "r1"
    head = Runs(both).headline()
    assert [e["run_id"] for e in head.entries] == ["r1"] and head.lines() == Runs(base).headline().lines()
