"""Notebook 01's predicted EP table: a rank case spells out every rank's strategy, so one case reads
differently at EP 4 and EP 8; the table keys rows by a name that does not depend on the world size,
so every cell of the recorded prediction is filled (not half NaN), from one run."""
from __future__ import annotations

import pytest

from dspark_lab.results import Runs
from dspark_lab.results.rules.labels import rank_case_name
from dspark_lab.results.viewmodels import picks


def test_a_rank_case_is_named_the_same_at_every_world_size():
    assert rank_case_name("on_demand,on_demand,on_demand,on_demand") == rank_case_name(",".join(["on_demand"] * 8)) \
        == "all on_demand"
    assert rank_case_name("device_direct,non_blocking,non_blocking,non_blocking") == \
        rank_case_name(",".join(["device_direct"] + ["non_blocking"] * 7)) == "rank 0 device_direct, the others non_blocking"
    assert rank_case_name("non_blocking,non_blocking delay=1,0") == "all non_blocking; +1 ms on rank 0"
    assert rank_case_name("a,b") == "rank 0 a, rank 1 b"


def test_the_recorded_prediction_fills_every_cell_from_one_run():
    runs = Runs.load()
    if not runs.runs_of_kind("ep_predicted"):
        pytest.skip("no EP-predicted run recorded")
    pick = picks.predicted_ep(runs)
    table = pick.rows
    assert list(table.columns) == ["EP 4 (predicted), ms", "EP 8 (predicted), ms"]
    assert not table.isna().any().any(), table
    assert "all non_blocking" in table.index and "rank 0 device_direct, the others non_blocking" in table.index
    assert len(pick.run_ids) == 1 and runs.label_of(pick.run_ids[0]) in pick.note
