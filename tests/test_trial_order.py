"""The measurement loop's trial order: seeded, random within each round, every step in every position."""
import itertools
from collections import Counter

import pytest

from dspark_lab.measure import loop

NAMES = ["device_direct", "non_blocking", "on_demand", "on_demand_pinned", "persistent_fill"]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _run(rounds: int, seed: int = loop.ORDER_SEED, names=NAMES):
    clock, ran = FakeClock(), []

    def step_of(n):
        def step():
            clock.now += 1e-3
            ran.append(n)
        return step

    res = loop.run_rounds({n: step_of(n) for n in names}, loop.FixedRounds(rounds), steps=1, warmup=0,
                          sync=lambda: None, timer=clock, clock=clock, order_seed=seed)
    return res, ran


def test_every_round_runs_every_step_once_in_the_recorded_order():
    res, ran = _run(10)
    assert len(res.orders) == 10
    assert all(sorted(o) == sorted(NAMES) for o in res.orders)
    assert ran == list(itertools.chain.from_iterable(res.orders))  # the recorded order is the order run


def test_each_block_of_rounds_puts_every_step_in_every_position():
    res, _ = _run(3 * len(NAMES))
    for b in range(3):
        block = res.orders[b * len(NAMES):(b + 1) * len(NAMES)]
        for pos in range(len(NAMES)):
            assert sorted(o[pos] for o in block) == sorted(NAMES)


def test_no_step_always_follows_the_same_step():
    # A rotation (A B C, B C A, ...) puts non_blocking after device_direct in every round where both
    # are inside it; a random order does not.
    res, _ = _run(40)
    after_baseline = Counter(o[o.index("device_direct") + 1] for o in res.orders if o[-1] != "device_direct")
    assert len(after_baseline) == len(NAMES) - 1
    assert max(after_baseline.values()) < sum(after_baseline.values()) * 0.6
    assert len({tuple(o) for o in res.orders}) > len(NAMES)  # not only the rotations of one order


def test_the_order_is_seeded_and_recorded_on_each_trial():
    a, _ = _run(8, seed=7)
    b, _ = _run(8, seed=7)
    c, _ = _run(8, seed=8)
    assert a.orders == b.orders != c.orders
    assert a.order_seed == 7
    for n, trials in a.timings.items():
        assert [t.diag["trial_position"] for t in trials] == [o.index(n) for o in a.orders]
        assert {t.diag["order_seed"] for t in trials} == {7}


def test_the_orders_do_not_depend_on_what_the_steps_do():
    # Ranks of an EP run draw the same orders from the same seed whatever their steps time.
    assert list(itertools.islice(loop.round_orders(NAMES, 3), 12)) == list(itertools.islice(loop.round_orders(NAMES, 3), 12))


@pytest.mark.parametrize("seed", ["1", 1.5, True, None])
def test_a_seed_that_is_not_an_integer_is_refused(seed):
    with pytest.raises(ValueError, match="order_seed must be an integer"):
        _run(1, seed=seed)


def test_a_single_step_runs_alone_every_round():
    res, ran = _run(3, names=["only"])
    assert res.orders == [["only"]] * 3 and ran == ["only"] * 3


def test_the_order_study_reads_recorded_runs_and_shows_the_rotation_bias():
    # The three reference runs recorded with the rotated order: on_demand, doing exactly non_blocking's work
    # at EP 8, came out measurably slower in each; the study's analysis says so, and the advice (gated by the
    # recorded card and hazards) is the same in the three runs.
    from pathlib import Path

    from dspark_lab.results import Runs
    from dspark_lab.results.analyses import card, hazards, tie_margin
    from studies.order import randomised_reference as study

    root = Path(__file__).resolve().parents[1] / "data" / "runs"
    runs = Runs.load(sorted(str(p) for p in root.glob("h200-reference-run[123]-*.jsonl")), cache=False)
    found = tie_margin.differences(runs.rows)
    diff = [d for d in found if d["strategy"] == "on_demand" and d["against"] == "non_blocking"]
    assert len(diff) == 3 and all(not d["within CI"] and d["ci_low"] > 0 for d in diff)
    assert tie_margin.margin_of(found) is None  # a fixed order's bias sets no tie margin
    assert "order_seed" not in runs.rows.columns or runs.rows["order_seed"].isna().all()  # recorded before the seed
    picks = study.choices(runs.rows, card.recorded(), hazards.recorded())
    assert len(picks) == 3 and len({p["choice"] for p in picks}) == 1 and picks[0]["choice"] is not None


def test_in_a_seeded_random_order_the_equal_work_strategies_agree_and_the_advice_holds(tmp_path):
    # The three reference runs recorded with the trials in a seeded random order (data/order/): the
    # same on_demand against non_blocking comparison is within its CI of zero in each, and the advice
    # (gated by the recorded card and hazards) is the same in the three runs.
    from pathlib import Path

    from dspark_lab.results import Runs
    from dspark_lab.results.analyses import card, hazards, tie_margin
    from dspark_lab.results.loading.packed import unpacked
    from studies.order import randomised_reference as study

    root = Path(__file__).resolve().parents[1] / "data" / "order"
    runs = Runs.load(unpacked(sorted(root.glob("h200-reference-randomised-run[123]-*.jsonl.gz")), tmp_path), cache=False)
    assert runs.rows["order_seed"].nunique() == 3
    diff = [d for d in tie_margin.differences(runs.rows) if d["strategy"] == "on_demand" and d["against"] == "non_blocking"]
    assert len(diff) == 3 and all(d["within CI"] for d in diff), diff
    picks = study.choices(runs.rows, card.recorded(), hazards.recorded())
    assert len(picks) == 3 and len({p["choice"] for p in picks}) == 1 and picks[0]["choice"] is not None


def test_a_study_run_is_packed_out_of_the_run_library_and_unpacked_to_load(tmp_path):
    from dspark_lab.results.loading.load import run_files
    from dspark_lab.results.loading.packed import unpacked
    from studies.order import randomised_reference as study

    run = tmp_path / "data" / "order" / "gpu-reference-randomised-run1-x.jsonl"
    run.parent.mkdir(parents=True)
    run.write_text('{"kind":"header"}\n{"kind":"row"}\n')
    gz = study.packed(run)
    assert gz.name.endswith(".jsonl.gz") and not run.exists() and run_files(tmp_path / "data") == []
    (plain,) = unpacked([gz], tmp_path)
    assert open(plain).read() == '{"kind":"header"}\n{"kind":"row"}\n'
