"""A run judged alone: the machine's quietest host work per point is kept in the
calibration cache and written into each new run's header; a run loaded alone is judged against it,
and without one it says it cannot be judged alone. Synthetic rows; the cache in a temp folder."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dspark_lab.model import calibration
from dspark_lab.results.rules import noise
from dspark_lab.results.query.runs import Runs
from dspark_lab.run import baseline
from test_noise import synthetic_run  # one run of the reference point, host work per step as given

FP = {"gpu": "G", "driver": "1", "cuda": "13", "torch": "2"}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv(calibration.CACHE_ENV, str(tmp_path / "cache"))


def lone(run_id, host_ms, header_baseline=None, at="2026-01-02T00:00:00"):
    rows = synthetic_run(run_id, host_ms, rounds=12, at=at)
    h = {"run_id": run_id, "created_at": at, "fingerprint": FP}
    if header_baseline is not None:
        h[noise.BASELINE_HEADER] = header_baseline
    return Runs(rows, None, [h])


def test_point_keys_survive_json_and_pandas_round_trips():
    a = noise.point_key({"workload": "w", "ep_size": 8, "batch_size": 8, "gamma": 4, "rank": None})
    b = noise.point_key({"workload": "w", "ep_size": 8.0, "batch_size": "8", "gamma": np.int64(4), "rank": float("nan")})
    assert a == b and "|ep_size=8|" in a and a.endswith("|rank=")


def test_the_quietest_host_work_per_point_is_kept_in_the_cache_and_read_into_a_new_header():
    assert baseline.header_fields(FP) == {noise.BASELINE_HEADER: {}}  # a new machine: nothing yet
    quiet = synthetic_run("q", 0.45, rounds=12)
    kept = baseline.keep(FP, quiet.to_dict("records"))
    (key, entry), = kept.items()
    assert entry["run_id"] == "q" and entry["host_work_ms"] == pytest.approx(0.45) and entry["quiet_trials"] == 24
    baseline.keep(FP, synthetic_run("busy", 6.7, rounds=12).to_dict("records"))  # more host work: not kept
    assert baseline.header_fields(FP)[noise.BASELINE_HEADER][key]["run_id"] == "q"
    assert baseline.header_fields(dict(FP, driver="2")) == {noise.BASELINE_HEADER: {}}  # another machine


def test_a_run_disturbed_from_start_to_end_is_flagged_when_loaded_alone():
    base = noise.quiet_baselines(synthetic_run("q", 0.49, rounds=12))
    runs = lone("busy", 6.67, base)
    rd = runs.run_disturbance().set_index("run_id")
    assert bool(rd.at["busy", "run_disturbed"]) and rd.at["busy", "reference_run_id"] == "q"
    assert "over the machine's baseline in the run header" in rd.at["busy", "run_disturbed_reason"]
    head = runs.headline()
    assert not head.entries and len(head.withheld) == 1
    (block,) = head.blocks()
    assert "no headline, every run of this machine" in block[0] and "+6.18" in block[1]


def test_a_quiet_run_loaded_alone_is_judged_by_its_baseline_and_headlined():
    runs = lone("calm", 0.50, noise.quiet_baselines(synthetic_run("q", 0.49, rounds=12)))
    rd = runs.run_disturbance().set_index("run_id")
    assert not rd.at["calm", "run_disturbed"] and rd.at["calm", "reference_run_id"] == "q"
    head = runs.headline()
    assert [e["run_id"] for e in head.entries] == ["calm"] and "judged alone" not in "\n".join(head.lines())


def test_a_run_without_a_baseline_says_it_cannot_be_judged_alone():
    for runs in (lone("first", 6.67), lone("first", 6.67, {})):
        rd = runs.run_disturbance().set_index("run_id")
        assert not rd.at["first", "run_disturbed"] and rd.at["first", "run_disturbed_reason"] == noise.CANNOT_JUDGE_ALONE
        (block,) = runs.headline().blocks()
        assert block[0].startswith("headline: ") and block[-1].strip() == "this run " + noise.CANNOT_JUDGE_ALONE


def test_malformed_baseline_entries_are_ignored():
    key = next(iter(noise.quiet_baselines(synthetic_run("q", 0.49, rounds=12))))
    rd = lone("x", 6.67, {key: {"host_work_ms": "lots"}}).run_disturbance().set_index("run_id")
    assert rd.at["x", "run_disturbed_reason"] == noise.CANNOT_JUDGE_ALONE
