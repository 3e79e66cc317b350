"""The platform card on CPU: the verdict rule, the derived frame, the threshold, two cards compared,
files, the figures, the CLI and the advice that reads cards; synthetic cards (tests/helpers.py)."""
import json

import pytest

from dspark_lab.cli.main import main as cli_main
from dspark_lab.results.analyses import advice
from dspark_lab.results.analyses import card as C
from dspark_lab.views.figures import card as card_figures
from helpers import synthetic_card, synthetic_hazards
from test_advice import _rows

ALL_TIMES = {"device_direct": 8.0, "non_blocking": 5.8, "on_demand": 5.8, "on_demand_pinned": 6.3, "persistent_fill": 6.3}


@pytest.mark.parametrize("host_us, queued_ms, copy_us, want", [
    (5_001.0, 10.0, 1.0, C.WAITS),  # just over half the queue
    (5_000.0, 10.0, 1.0, C.AT_ONCE),  # exactly half is not over it
    (20.0, 0.0, 1.0, C.AT_ONCE),  # nothing queued: cannot wait for a queue
    (60.0, 0.0, 100.0, C.FOR_COPY),  # host covers half the copy's GPU time
    (40.0, 10.0, 100.0, C.AT_ONCE),  # under half the copy
    (30.0, 0.0, C.COPY_FLOOR_US - 1, C.AT_ONCE),  # a copy below the floor is lost in the call's overhead
])
def test_the_verdict_rule(host_us, queued_ms, copy_us, want):
    assert C.verdict(host_us, queued_ms, copy_us) == want


def test_a_call_slow_by_itself_is_not_a_wait():
    # 16 ms with 10 ms queued: a wait when the call takes 6 ms alone, not when it takes 15 ms alone
    assert C.verdict(16_000.0, 10.0, 14_000.0, empty_host_us=6_000.0) == C.WAITS
    assert C.verdict(16_000.0, 10.0, 14_000.0, empty_host_us=15_000.0) == C.FOR_COPY


def test_the_frame_derives_median_spread_and_verdict_from_the_raw_times():
    card = synthetic_card()
    card["cells"][0]["host_us"] = [30.0, 10.0, 20_000.0]  # an outlier: the median is not moved by it
    card["cells"][0]["queued_ms"] = 10.0
    row = C.frame(card).iloc[0]
    assert (row.host_us, row.host_us_min, row.host_us_max, row.reps) == (30.0, 10.0, 20_000.0, 3)
    assert row.verdict == C.AT_ONCE


def test_the_size_at_which_a_pageable_copy_starts_to_wait():
    t = C.wait_threshold(C.frame(synthetic_card(waits_from=4 << 20)))
    assert (t["first_waits"], t["last_at_once"], t["queued_ms"]) == (4 << 20, 1 << 20, 10.0)
    assert C.threshold_in_words(t).endswith("returns at once up to 1 MB and waits for 10 ms of queued GPU work from 4 MB")
    never = C.wait_threshold(C.frame(synthetic_card(waits_from=1 << 40)))
    assert never["first_waits"] is None and "never waited" in C.threshold_in_words(never)


def test_two_cards_differ_exactly_where_the_pageable_copy_behaves_differently():
    a, b = synthetic_card(waits_from=4 << 20), synthetic_card(gpu="SYNTH-GPU-B", waits_from=4)
    m = C.compare(a, b)
    diff = m[m["differs"]]
    staged = {"pageable_to_nb", "pinned_strided_to_nb"}
    small = {4, 64, 1 << 10, 16 << 10, 256 << 10, 1 << 20}
    assert set(zip(diff.source, diff.size_bytes, diff.queue)) == (
        {(s, n, "queued") for s in staged for n in small}
        # empty queue: only where the copy itself is long enough to see (1 MB: 54 µs at 20 KB/µs)
        | {(s, 1 << 20, "empty") for s in staged})
    lines = C.compare_lines(a, b)
    assert f"{(m['only_in'] == '').sum()} cells on both cards; {len(diff)} with a different verdict" in lines[2]


def test_cards_with_other_queue_depths_are_compared_by_queue_name():
    m = C.compare(synthetic_card(queued_ms=10.0), synthetic_card(queued_ms=5.0))
    assert not m["differs"].any() and (m["only_in"] == "").all()


@pytest.mark.parametrize("field, value, named", [
    ("kind", "x", "'kind'"), ("schema", 9, "'schema'"), ("fingerprint", None, "'fingerprint'"), ("cells", [], "'cells'")])
def test_a_bad_card_names_its_field(field, value, named):
    card = synthetic_card()
    card[field] = value
    with pytest.raises(ValueError, match=named):
        C.validate(card)


def test_a_bad_cell_names_the_field_and_the_allowed_values():
    card = synthetic_card()
    card["cells"][3]["source"] = "carrier pigeon"
    with pytest.raises(ValueError, match=r"cells\[3\]\.source must be one of pageable_to_nb"):
        C.validate(card)


def test_saved_cards_are_found_among_the_other_machine_files(tmp_path):
    machines = tmp_path / "machines"
    machines.mkdir()
    (machines / "other.json").write_text(json.dumps({"fingerprint": {}, "probe": {}}))
    card = synthetic_card()
    path = C.save(card, machines / C.file_name(card))
    assert path.name == "synth-gpu-a-card-20260101.json"
    found = C.recorded(tmp_path)
    assert [c["path"] for c in found] == [str(path)]
    assert C.frame(found[0]).equals(C.frame(card))


def test_the_claims_rest_on_the_cards_cells():
    text = "\n".join(C.claims_in_words(synthetic_card(waits_from=4)))
    assert "removed an unused allocation and copy per step; that copy here (4 B): waits" in text
    assert "so it waited here too." in text
    assert "(4 B) waits for the queued work (10112 µs with 10 ms queued)" in text
    text = "\n".join(C.claims_in_words(synthetic_card(waits_from=4 << 20)))
    assert "so here it costs only its call." in text and "waited here too" not in text
    assert "device-direct sync" not in text and "most likely" not in text  # SGLang #34759's merged diff says otherwise


def test_each_strategy_maps_to_its_cell():
    v = C.strategy_verdicts(synthetic_card(waits_from=4))
    assert v == {"device_direct": C.WAITS, "non_blocking": C.WAITS, "on_demand": C.WAITS,
                 "on_demand_pinned": C.AT_ONCE, "persistent_fill": C.AT_ONCE}


def test_the_card_figure_draws_one_heatmap_per_direction_with_the_host_times():
    fig = card_figures.card(synthetic_card(waits_from=4 << 20))
    assert [t.type for t in fig.data] == ["heatmap"] * 3
    h2d = fig.data[0]
    row = list(h2d.y).index("pageable .to(dev, non_blocking=True)")
    col = list(h2d.x).index("4 MB")
    assert h2d.z[row][col] == C.VERDICTS.index(C.WAITS) and h2d.text[row][col] == "10.3 ms"
    assert h2d.z[row][col - 1] == C.VERDICTS.index(C.AT_ONCE)
    assert "SYNTH-GPU-A" in fig.layout.title.subtitle.text


def test_the_pair_figure_marks_the_cells_that_differ():
    fig = card_figures.card_pair(synthetic_card(waits_from=4 << 20), synthetic_card(gpu="SYNTH-GPU-B", waits_from=4))
    marked = sum(str(t).startswith(card_figures.DIFFERS_MARK) for tr in fig.data for row in tr.text for t in row)
    assert marked == 2 * 12  # 12 differing queued cells, marked on both sides
    assert "12 cell(s) with a different verdict" in fig.layout.title.text


def test_doctor_compares_two_recorded_cards_without_a_gpu(tmp_path, capsys):
    a, b = synthetic_card(waits_from=4 << 20), synthetic_card(gpu="SYNTH-GPU-B", waits_from=4)
    pa, pb = C.save(a, tmp_path / "a.json"), C.save(b, tmp_path / "b.json")
    assert cli_main(["doctor", "--compare", str(pa), str(pb)]) == 0
    out = capsys.readouterr().out
    assert "with a different verdict" in out and "SYNTH-GPU-B" in out


@pytest.mark.parametrize("argv, message", [
    (["doctor", "--compare", "x.json"], "takes two recorded cards"),
    (["doctor", "--card-out", "x.json"], "--card-out needs --card"),
])
def test_doctor_card_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_doctor_refuses_a_file_that_is_not_a_card(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit):
        cli_main(["doctor", "--compare", str(bad), str(bad)])
    assert "field 'kind'" in capsys.readouterr().err


def test_advice_ranks_a_strategy_sync_free_on_every_card_above_a_faster_one_that_waits_somewhere():
    rows = _rows(ALL_TIMES)
    here = synthetic_card(gpu="NVIDIA H200", driver="1", waits_from=4 << 20)
    elsewhere = synthetic_card(gpu="SYNTH-PCIE", waits_from=4)
    safe = synthetic_hazards()
    assert advice.recommend(rows, cards=[here], hazards=safe).strategy in ("non_blocking", "on_demand")
    rec = advice.recommend(rows, cards=[here, elsewhere], hazards=safe)
    assert rec.strategy in ("on_demand_pinned", "persistent_fill")
    text = rec.text()
    assert "waits on SYNTH-PCIE" in text and advice.CARD_RULE in text


def test_advice_rules_out_what_waits_on_this_machines_own_card():
    rows = _rows(ALL_TIMES)
    rec = advice.recommend(rows, cards=[synthetic_card(gpu="NVIDIA H200", driver="1", waits_from=4)],
                           hazards=synthetic_hazards())
    assert rec.strategy in ("on_demand_pinned", "persistent_fill")
    assert "non_blocking: its copy waits for the queued work on this machine's card" in rec.text()


def test_a_damaged_card_is_skipped_with_a_warning_naming_it(tmp_path):
    machines = tmp_path / "machines"
    machines.mkdir()
    good = C.save(synthetic_card(), machines / "a-card.json")
    bad = synthetic_card()
    bad["cells"][0]["direction"] = "sideways"
    (machines / "b-card.json").write_text(json.dumps(bad))
    with pytest.warns(UserWarning, match=r"b-card.json: cells\[0\]\.direction must be one of h2d, d2h, d2d"):
        found = C.recorded(tmp_path)
    assert [c["path"] for c in found] == [str(good)]


def test_the_report_draws_each_machines_latest_card_and_the_pair(data):
    from dspark_lab.results import Runs
    from dspark_lab.views import report

    rows, timelines, headers, _ = data
    old = synthetic_card(waits_from=4, recorded="2025-01-01T10:00:00+00:00")
    cards = [old, synthetic_card(waits_from=4 << 20), synthetic_card(gpu="SYNTH-PCIE", waits_from=4)]
    doc = report.build_html(Runs(rows, timelines, headers), cards=cards, hazard_records=[])
    assert doc.count("What each copy does on this machine") == 2  # the older card of machine A is not drawn
    assert "Two machines&#x27; cards: 12 cell(s)" in doc or "Two machines' cards: 12 cell(s)" in doc
    assert "returns at once up to 1 MB and waits for 10 ms of queued GPU work from 4 MB" in doc


def test_a_wait_that_no_sync_counter_sees_is_named():
    card = synthetic_card(waits_from=4 << 20)
    for c in card["cells"]:
        if c["source"] == "pageable_to_nb":  # the driver stages it: no sync call, no debug-mode warning
            c["debug_syncs"] = c["trace_syncs"] = 0
    text = C.unseen_in_words(C.frame(card))
    assert text.endswith("h2d pageable .to(dev, non_blocking=True) at 4 MB, 16 MB, 64 MB")
    assert C.unseen_waits(C.frame(synthetic_card())).empty


def test_a_copy_that_waits_only_at_some_sizes_is_not_called_a_threshold():
    card = synthetic_card(waits_from=4 << 20)
    for c in card["cells"]:  # 16 MB returns at once again
        if c["source"] == "pageable_to_nb" and c["size_bytes"] == 16 << 20:
            c["host_us"] = [8.0]
    words = C.threshold_in_words(C.wait_threshold(C.frame(card)))
    assert words.endswith("from 4 MB (not at every larger size: waits at 4 MB, 64 MB)")


def test_a_cost_some_repeats_do_not_pay_or_that_does_not_grow_with_the_size_is_not_the_copy():
    from dspark_lab.results.analyses import card as C

    # An idle GPU's calls are bimodal (7 or 60 µs) and its event-timed 64-byte copy reads 60 µs.
    assert C.verdict(55.0, 0.0, 60.0, smallest_host_us=7.0, fastest_us=7.0) == C.AT_ONCE
    assert C.verdict(55.0, 0.0, 60.0, smallest_host_us=50.0, fastest_us=52.0) == C.AT_ONCE  # no growth
    assert C.verdict(10600.0, 0.0, 10500.0, smallest_host_us=14.0, fastest_us=10400.0) == C.FOR_COPY


H200_CARDS = ("h200-card-20261201.json", "h200-card-20261201-1406.json")  # recorded 40 minutes apart


def _recorded_card(name: str) -> dict:
    from pathlib import Path

    return C.load(Path(__file__).resolve().parents[1] / "data" / "machines" / name)


@pytest.mark.parametrize("name", H200_CARDS)
def test_on_the_recorded_h200_cards_small_empty_queue_calls_return_at_once(name):
    """With the queue empty, calls of 1 KB and less return at once (two H200 cards taken minutes
    apart disagreed on 68 small empty-queue cells before the rule asked the copy to grow with the
    size and every repeat to pay it); where a call blocks for its copy, firmly, so do the larger sizes."""
    f = C.frame(_recorded_card(name))
    small = f[(f["queue"] == "empty") & (f["size_bytes"] <= 1024)]
    assert (small["verdict"] == C.AT_ONCE).all()
    for (_, _), g in f[f["queue"] == "empty"].groupby(["direction", "source"]):
        g = g.sort_values("size_bytes")
        firm = g[(g["verdict"] == C.FOR_COPY) & (g["edge"] == "")]
        if len(firm):
            assert (g[g["size_bytes"] > firm["size_bytes"].iloc[0]]["verdict"] == C.FOR_COPY).all(), g


def test_the_two_recorded_h200_cards_differ_firmly_on_no_cell():
    """The same H200 measured twice, 40 minutes apart: every cell whose verdicts differ has one of
    them at the rule's edge (EDGE_RULE), and the comparison says so for each."""
    a, b = (_recorded_card(n) for n in reversed(H200_CARDS))
    m = C.compare(a, b)
    diff = m[m["differs"]]
    assert 0 < len(diff) <= 10 and not m["differs_firmly"].any()
    lines = C.compare_lines(a, b)
    assert f"{len(diff)} with a different verdict: 0 firmly, {len(diff)} where a verdict is at the rule's edge" in lines[2]
    assert sum("— at the edge: " in line for line in lines) == len(diff)


@pytest.mark.parametrize("reps, queued_ms, copy_us, empty_us, smallest_us, why", [
    ([67.0, 180.0, 209.0, 250.0, 292.0], 0.0, 219.0, 0.0, 7.0, "a repeat alone would be"),  # repeats straddle half the copy
    ([21_600.0, 22_000.0, 22_100.0], 10.0, 12_000.0, 16_300.0, 8.0, "over the empty queue, the bound is 5 ms"),
    ([38.0, 38.0, 39.0], 0.0, 46.0, 0.0, 14.0, "the floor is 50 µs"),  # a copy at the floor
    ([59.0, 59.5, 60.0], 0.0, 100.0, 0.0, 36.0, "the bound is 25 µs"),  # growth just under its bound
])
def test_a_verdict_at_the_rules_edge_says_why(reps, queued_ms, copy_us, empty_us, smallest_us, why):
    assert why in C.edge(reps, queued_ms, copy_us, empty_us, smallest_us)


@pytest.mark.parametrize("reps, queued_ms, copy_us, empty_us", [
    ([9_900.0, 10_000.0, 10_100.0], 10.0, 1.0, 0.0),  # waits: 10 ms over an empty queue, far from 5
    ([8.0, 9.0, 12.0], 10.0, 3.0, 7.0),  # at once, nothing near a threshold
    ([8.0, 8.1, 8.2], 0.0, 54.0, 0.0),  # at once: the copy is near the floor, but the call is far from half of it
    ([1_000.0, 1_010.0, 1_030.0], 0.0, 1_200.0, 0.0),  # blocks for a 1.2 ms copy, every repeat
])
def test_a_verdict_far_from_every_threshold_is_firm(reps, queued_ms, copy_us, empty_us):
    assert C.edge(reps, queued_ms, copy_us, empty_us, 5.0) == ""


def test_cards_that_differ_only_at_the_edge_do_not_differ_firmly():
    a, b = synthetic_card(), synthetic_card(gpu="SYNTH-GPU-B")
    cell = next(c for c in b["cells"] if c["source"] == "pinned_copy" and c["size_bytes"] == 1 << 20 and c["queued_ms"] == 0)
    cell["copy_gpu_us"], cell["host_us"] = C.COPY_FLOOR_US * 0.9, [40.0, 41.0, 42.0]  # now at once, at the floor's edge
    m = C.compare(a, b)
    row = m[m["differs"]]
    assert len(row) == 1 and not row["differs_firmly"].iloc[0] and "the floor is 50 µs" in row["edge_b"].iloc[0]
    fig = card_figures.card_pair(a, b, queue="empty")
    texts = [str(t) for tr in fig.data for r in tr.text for t in r]
    assert sum(t.startswith(card_figures.EDGE_DIFFERS_MARK) for t in texts) == 2
    assert "0 cell(s) with a different verdict" in fig.layout.title.text
