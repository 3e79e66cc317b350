"""The time budgets (results.facts.time_budgets) are checked against the newest recordings of the
runs they size, scaled to the strategy table's count now: the default sweep's recorded run (its
header names its strategies and grid, its points their times) and the live panel's recorded
complete updates (data/machines/h200-live-stream-*.json); a table grown past what a recording
covers (twice as many strategies) is named, so the check bites."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from dspark_lab import strategies
from dspark_lab.results.facts import strategy_table, time_budgets
from dspark_lab.run import live, sweep_spec

ROOT = Path(__file__).resolve().parents[1]


def newest_default_sweep() -> tuple[float, int]:
    """(seconds from the header to the last point, strategies) of the newest recorded run of the
    default sweep as it is now (its grid and its steps, warm-up and trials)."""
    spec, found = sweep_spec.DEFAULT_SWEEP, []
    for path in ROOT.glob(time_budgets.DEFAULT_SWEEP.evidence):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        head, points = lines[0], [r for r in lines if r.get("kind") == "point"]
        grid, base = head["sweep"], head["sweep"]["base"]
        if ((grid["ep_size"], grid["batch_size"], grid["gamma"]) != (list(spec.ep_sizes), list(spec.batch_sizes), list(spec.gammas))
                or (base["steps"], base["warmup"], base["trials"]) != (spec.base.steps, spec.base.warmup, spec.base.trials)):
            continue
        start = datetime.fromisoformat(head["created_at"])
        end = max(datetime.fromisoformat(p["recorded_at"]) for p in points)
        found.append((head["created_at"], (end - start).total_seconds(), len(grid["strategy"])))
    assert found, "no recorded run of the default sweep as it is now"
    return max(found)[1:]


def newest_live_update() -> tuple[float, int]:
    """(median later complete update, strategies) of the newest live-stream record at run.live's sizes."""
    sizes = {"steps": live.LIVE_STEPS, "warmup": live.LIVE_WARMUP, "trials": live.LIVE_TRIALS,
             "profile_steps": live.LIVE_PROFILE_STEPS}
    found = []
    for path in ROOT.glob(time_budgets.LIVE_UPDATE.evidence):
        rec = json.loads(path.read_text())
        if rec.get("sizes") != sizes or "later_complete_median_s" not in rec.get("summary", {}):
            continue
        trials = rec["first_process"]["finals"][0]["trials"]  # every strategy's trials of one complete update
        assert trials % sizes["trials"] == 0, path
        found.append((rec["recorded_at"], rec["summary"]["later_complete_median_s"], trials // sizes["trials"]))
    assert found, "no live-stream record at run.live's sizes"
    return max(found)[1:]


RECORDED = {"the default sweep": newest_default_sweep, "a complete live update": newest_live_update}


@pytest.mark.parametrize("budget", time_budgets.BUDGETS, ids=lambda b: b.what)
def test_each_budget_holds_for_the_strategy_table_now(budget):
    measured_s, measured_with = RECORDED[budget.what]()
    assert budget.problem(measured_s, measured_with, len(strategy_table.names())) is None


def _staged_copy(num_tokens, device, parallel, *, buffer=None):
    return None


@pytest.mark.parametrize("budget", time_budgets.BUDGETS, ids=lambda b: b.what)
def test_a_table_twice_as_large_is_named_past_each_budget(budget):
    measured_s, measured_with = RECORDED[budget.what]()
    n = len(strategy_table.names())
    with strategies.restored():
        for i in range(n):
            strategies.register(_staged_copy, strategy_table.StrategyRow(f"staged_copy_{i}", "d", "s"))
        problem = budget.problem(measured_s, measured_with, len(strategy_table.names()))
    assert problem is not None and f"for the table's {2 * n} " in problem and budget.evidence in problem
    assert strategy_table.names() == strategies.BUILTIN


def test_the_model_scales_with_the_strategy_count_and_refuses_none():
    b = time_budgets.TimeBudget("x", 10.0, 0.1, "e")
    assert b.expected_s(10.0, 5, 6) == pytest.approx(12.0)
    assert b.problem(10.0, 5, 5) is None and b.problem(10.5, 5, 5) is None and b.problem(11.5, 5, 5) is not None
    with pytest.raises(ValueError, match="strategy counts must be >= 1"):
        b.expected_s(1.0, 0, 5)
