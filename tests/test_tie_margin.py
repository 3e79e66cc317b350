"""The advice's tie margin: equal work read from the strategy table, the margin set past the largest
equal-work difference of randomised-order runs (synthetic runs with known gaps, then the committed
data/order/ runs), printed with its evidence by the advice and the order study alike, and a stated
fallback where the data folder holds no such run."""
import contextlib
import io
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dspark_lab.results.analyses import advice, card, hazards, tie_margin
from dspark_lab.results.facts import strategy_table as T
from dspark_lab.results.loading.packed import load_packed
from dspark_lab.results.rules import summaries

ROOT = Path(__file__).resolve().parents[1]
ORDER = ROOT / "data" / "order"
READ_GROUP = ("non_blocking", "on_demand", "on_demand_pinned", "persistent_fill")  # the table's order
UNREAD_GROUP = ("on_demand", "on_demand_pinned", "persistent_fill")
EXPECTED_PAIRS = ({("EP > 1", a, b) for i, a in enumerate(READ_GROUP) for b in READ_GROUP[:i]}
                  | {("EP 1", a, b) for i, a in enumerate(UNREAD_GROUP) for b in UNREAD_GROUP[:i]})


def _run(gaps: dict, run_id: str, seed, rounds: int = 12, rng_seed: int = 0) -> pd.DataFrame:
    """One run at EP 8 and EP 1: strategy -> % over 5 ms per regime (`gaps[(ep, strategy)]`, 0 if absent),
    each round sharing a drift so that pairs are tight; `seed`: the trial order's seed (None: a fixed order)."""
    rng = np.random.default_rng(rng_seed)
    out = []
    for ep in (8, 1):
        for t in range(rounds):
            drift = rng.normal(0, 0.05)
            for s in ("device_direct", "non_blocking", "on_demand", "on_demand_pinned", "persistent_fill"):
                ms = 5.0 * (1 + gaps.get((ep, s), 0.0) / 100) + drift + rng.normal(0, 0.002)
                out.append(dict(run_id=run_id, point_id=f"{run_id}-ep{ep}", ep_size=ep, batch_size=8, gamma=4,
                                workload="sglang_profile", model="small", strategy=s, trial=t, status="ok",
                                step_ms=ms, syncs_per_step=1.0 if s == "device_direct" else 0.0, order_seed=seed,
                                recorded_at="2026-12-02T10:00:00", gpu="SYNTH-GPU", driver="1"))
    return pd.DataFrame(out)


def test_equal_work_is_read_from_the_strategy_table():
    assert {(p.regime, p.strategy, p.against) for p in tie_margin.equal_work_pairs()} == EXPECTED_PAIRS


@pytest.fixture
def table():
    kept = T.rows()
    yield
    T.reset(kept)


def test_a_registered_strategy_is_equal_work_only_when_its_row_says_so(table):
    T.add(T.StrategyRow("pinned_twin", "a pinned 4-byte copy", "a test", card_cell=("h2d", "pinned_to_nb"),
                        mirrors_sglang=True))
    T.add(T.StrategyRow("side_stream", "a copy on a side stream", "a test", card_cell=("h2d", "pinned_to_nb"),
                        stream_waits=1))
    T.add(T.StrategyRow("unknown_copy", "a copy the card has no cell for", "a test"))
    pairs = {(p.regime, p.strategy, p.against) for p in tie_margin.equal_work_pairs()}
    assert len(EXPECTED_PAIRS) == 9 and ("EP > 1", "persistent_fill", "on_demand_pinned") in EXPECTED_PAIRS
    assert pairs == (EXPECTED_PAIRS | {("EP > 1", "pinned_twin", s) for s in READ_GROUP}
                     | {("EP 1", "pinned_twin", s) for s in UNREAD_GROUP})


def test_the_margin_is_past_the_largest_equal_work_difference_of_every_run():
    # run b holds the widest gap (persistent_fill 4.5% under on_demand at EP 1); the others stay within 1.2%
    rows = pd.concat([_run({(8, "on_demand"): 1.2, (1, "on_demand_pinned"): -0.8}, "a", 1),
                      _run({(1, "persistent_fill"): -4.5, (8, "persistent_fill"): 0.5}, "b", 2, rng_seed=1)])
    diffs = tie_margin.differences(rows)
    assert len(diffs) == 18 and all(d["randomised"] for d in diffs)
    m = tie_margin.margin_of(diffs, ["a.jsonl.gz", "b.jsonl.gz"])
    top = max(max(abs(d["pct"]), abs(d["pct back"])) for d in diffs)  # each pair taken both ways
    assert 4.6 < top < 4.8  # 4.5% under on_demand is 4.7% over persistent_fill
    assert top < m.pct <= top + tie_margin.STEP_PCT  # never inside the spread, at most one step past it
    # against either strategy that does nothing at EP 1: both are 4.7% over persistent_fill there
    assert (m.largest["against"], m.largest["regime"]) == ("persistent_fill", "EP 1")
    assert m.largest["strategy"] in ("on_demand", "on_demand_pinned")
    assert (m.runs, m.pairs, m.gpus) == (2, 18, ("SYNTH-GPU",))
    assert m.apart == sum(not d["within CI"] for d in diffs) and m.apart >= 3  # the set gaps are measurable
    assert m.text().startswith(f"tie margin {m.pct:g}% = the largest equal-work difference, {top:.2f}% "
                               f"({m.largest['strategy']} against persistent_fill at EP 1")
    assert "over 2 randomised-order runs on SYNTH-GPU (a.jsonl.gz, b.jsonl.gz)" in m.text()


def test_no_committed_equal_work_pair_is_ranked_either_way():
    # the advice compares a strategy against the faster one: a pair's margin must hold it both ways
    loaded = load_packed(sorted(ORDER.glob("*.jsonl.gz")))
    m, ranked = tie_margin.recorded(), []
    for run_id, run in loaded.rows[loaded.rows["status"] == "ok"].groupby("run_id"):
        for p in tie_margin.equal_work_pairs():
            at = run[(run["ep_size"] == 1) if p.regime == tie_margin.UNREAD else (run["ep_size"] > 1)]
            for a, b in ((p.strategy, p.against), (p.against, p.strategy)):
                if advice._slower(summaries.compare(at, a, b), m.pct):
                    ranked.append((run_id, p.regime, a, b))
    assert ranked == []


def test_a_largest_difference_on_a_step_is_still_inside_the_margin():
    m = tie_margin.margin_of([{"pct": p, "run": "r", "regime": "EP 1", "strategy": "x", "against": "y", "within CI": True,
                               "gpu": "G", "randomised": True} for p in (3.0, -0.3, 0.7)])
    assert m.pct == 3.1 and tie_margin.margin_of([dict(m.largest, pct=0.3)]).pct == 0.4


def test_a_fixed_trial_order_gives_no_margin():
    # a rotated order's bias between equal-work strategies is the bench's order, not its spread
    diffs = tie_margin.differences(_run({(1, "on_demand"): 6.0}, "fixed", None))
    assert diffs and not any(d["randomised"] for d in diffs)
    assert tie_margin.margin_of(diffs) is None


def test_the_committed_order_runs_set_the_margin_the_advice_prints():
    files = sorted(ORDER.glob("h200-reference-randomised-run[123]-*.jsonl.gz"))
    m = tie_margin.recorded()
    assert [Path(f).name for f in m.files] == [f.name for f in files] and len(files) == 3
    assert (m.pct, m.runs, m.pairs, m.apart, m.gpus, m.fallback) == (4.4, 3, 27, 9, ("NVIDIA H200",), "")
    # run 1's persistent_fill 4.15% under on_demand_pinned at EP > 1, taken the way the advice compares it
    assert (m.largest["strategy"], m.largest["against"], m.largest["regime"]) == (
        "on_demand_pinned", "persistent_fill", "EP > 1")
    assert (round(m.largest["pct"], 2), round(m.largest["pct back"], 2)) == (4.33, -4.15)
    loaded = load_packed(files[:1])
    rec = advice.recommend(loaded.rows, cards=card.recorded(), hazards=hazards.recorded())
    assert rec.margin == m and m.text() in rec.text()
    assert "measurably slower by 4.4% or more" in rec.text() or "within 4.4% of" in rec.text()
    # 9 of 27 apart where 95% CIs put about 1.4 apart by chance, and 4 pairs whose CIs in two runs exclude each
    # other (run 1 against run 3: persistent_fill/on_demand_pinned at both regimes, on_demand_pinned/on_demand at
    # EP > 1, persistent_fill/on_demand at EP 1): the text says a run's CI misses the spread between runs
    assert m.split == 4
    assert "27 equal-work pair differences (each pair once a run), 9 measurably apart" in m.text()
    assert ("more than the 1.4 that 95% CIs put apart by chance on average, and for 4 pairs the CIs of two runs "
            "exclude each other, so a run's CI understates the spread between runs") in m.text()
    assert "p =" not in m.text()  # a run's pairs share strategies: no p value that takes them as independent


def _diff(run, ci, regime="EP > 1", strategy="on_demand", against="non_blocking"):
    return {"run": run, "regime": regime, "strategy": strategy, "against": against, "ci_low": ci[0], "ci_high": ci[1]}


def test_a_pair_is_split_only_where_its_cis_in_two_runs_exclude_each_other():
    assert tie_margin.split_pairs([_diff("run 1", (-4.8, -2.7)), _diff("run 2", (0.3, 5.6))]) == 1
    assert tie_margin.split_pairs([_diff("run 1", (-4.8, -0.1)), _diff("run 2", (-0.2, 5.6))]) == 0  # overlap
    # one pair split, another overlapping, a third in one run only, a run without a CI left out
    assert tie_margin.split_pairs([_diff("run 1", (1.0, 2.0)), _diff("run 2", (2.5, 3.0)),
                                   _diff("run 1", (1.0, 2.0), against="x"), _diff("run 2", (1.5, 3.0), against="x"),
                                   _diff("run 1", (9.0, 9.5), against="y"),
                                   _diff("run 2", (None, None), against="x")]) == 1


def test_the_text_says_a_runs_ci_understates_the_spread_only_where_pairs_are_apart_beyond_chance_and_split():
    largest = {"pct": 2.0, "strategy": "on_demand", "against": "non_blocking", "regime": "EP > 1", "run": "run 1"}

    def margin(apart, split):
        return tie_margin.TieMargin(2.1, ("a.jsonl.gz",), ("NVIDIA H200",), 3, 27, apart, largest, split=split)

    # 27 pairs: 1.35 apart by chance on average
    assert "1 measurably apart, each by less than the margin (results" in margin(1, 2).text()  # not beyond chance
    assert "9 measurably apart, each by less than the margin (results" in margin(9, 0).text()  # no run split a pair
    assert "understates" not in margin(1, 2).text() + margin(9, 0).text()
    assert ("2 measurably apart, each by less than the margin: more than the 1.4 that 95% CIs put apart by chance "
            "on average, and for 1 pair the CIs of two runs exclude each other, so a run's CI understates") in (
        margin(2, 1).text())


def test_the_order_study_prints_the_margin_the_advice_reads():
    from studies.order import randomised_reference as study

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert study.report(sorted(ORDER.glob("*.jsonl.gz"))) == 0
    assert tie_margin.recorded().text() in out.getvalue()
    assert "(within 4.4% of" in out.getvalue()


def test_a_data_folder_without_order_runs_falls_back_to_the_kits_record_and_says_so(tmp_path, monkeypatch):
    m = tie_margin.recorded(tmp_path)
    assert m.pct == tie_margin.recorded().pct
    assert m.text().startswith(f"no randomised-order run with an equal-work pair under {tmp_path / 'order'}")
    assert "the kit's own record gives it; tie margin 4.4%" in m.text()
    monkeypatch.setenv("DSPARK_DATA", str(tmp_path))
    rows = load_packed(sorted(ORDER.glob("*.jsonl.gz"))[:1]).rows
    assert m.text() in advice.recommend(rows).text()


def test_a_data_folder_with_its_own_order_runs_uses_them(tmp_path):
    (tmp_path / "order").mkdir()
    shutil.copy(sorted(ORDER.glob("*.jsonl.gz"))[1], tmp_path / "order")
    m = tie_margin.recorded(tmp_path)
    assert m.fallback == "" and m.runs == 1 and m.pairs == len(EXPECTED_PAIRS) == 9
    assert abs(m.largest["pct"]) < m.pct <= abs(m.largest["pct"]) + tie_margin.STEP_PCT


def test_with_no_order_runs_anywhere_the_fallback_is_no_margin_said_as_such(tmp_path, monkeypatch):
    monkeypatch.setattr(tie_margin, "REPO_ROOT", tmp_path / "kit")
    m = tie_margin.recorded(tmp_path)
    assert m.pct == tie_margin.FALLBACK_PCT == 0.0
    assert m.text() == (f"tie margin 0% (no randomised-order run with an equal-work pair under {tmp_path / 'order'} "
                        "(python -m studies.order.randomised_reference records them): fallback 0%, no measured "
                        "equal-work spread, so every measurably slower strategy is ranked)")


@pytest.mark.parametrize("bad", ["3%", -1, float("nan"), True])
def test_a_given_margin_must_be_a_number_of_percent(bad):
    with pytest.raises(ValueError, match="margin_pct must be a finite number of percent >= 0"):
        tie_margin.given(bad)


def test_a_damaged_order_file_is_skipped_with_a_warning_and_the_fallback_said(tmp_path):
    (tmp_path / "order").mkdir()
    (tmp_path / "order" / "gpu-reference-randomised-run1-x.jsonl.gz").write_bytes(b"not gzip")
    assert "cannot be unpacked" in load_packed(tie_margin.order_files(tmp_path)).warnings[0]
    m = tie_margin.recorded(tmp_path)
    assert m.fallback.startswith("no randomised-order run with an equal-work pair under") and m.pct == tie_margin.recorded().pct
