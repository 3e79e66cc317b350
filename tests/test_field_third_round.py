"""The field's newer cases (speculative-decoding metadata, three more counter-examples, a compiled step):
their documented shapes; the groups counter-examples land in on synthetic records; the guard's capture
witness (its pure parts on CPU, the sync zoo on CUDA); verify's compiled and capture verdict rules."""
from __future__ import annotations

import pytest
import torch

from dspark_lab import gallery, guard
from dspark_lab.gallery import cases as C
from dspark_lab.gallery import compiled_cases, counter_cases, spec_cases
from dspark_lab.results.analyses import sync_cost_groups as G
from dspark_lab.verify import capture as VC
from dspark_lab.verify import compiled as VCO

SPEC = {d["name"]: d for d in spec_cases.SPEC_CASES}
COUNTER = {d["name"]: d for d in counter_cases.COUNTER_CASES}
SOURCES = {"draft_sum_item": "SGLang #26171", "max_len_static_bound": "SGLang #28480",
           "size_from_device_max": "SGLang #28106", "host_bool_mask": "vLLM #38047", "assume_accepted": "vLLM #32951",
           "draft_inputs_prep": "vLLM #20078", "deferred_event_sync": "vLLM #42574", "api_time_sum": "colibri #431",
           "race_fix_price": "vLLM #36013"}


def test_the_new_cases_are_registered_with_their_sources_and_three_are_counter_examples():
    assert set(SOURCES) <= set(gallery.names()) and len(SPEC) == 6 and len(COUNTER) == 3
    for name, src in SOURCES.items():
        assert src in gallery.get(name).pr, name
    counter = {n for n in gallery.names() if gallery.get(n).shape.startswith(G.COUNTER)}
    assert set(COUNTER) <= counter
    assert "#27177" in gallery.get("size_from_device_max").pr and "closed unmerged" in gallery.get("draft_inputs_prep").pr


@pytest.mark.parametrize("name,sites,syncs,fix_syncs", [
    ("draft_sum_item", ["draft_extend_sum_item"], 1, 0),
    ("size_from_device_max", ["kv_indices_sized_by_device_max"], 1, 0),
    ("draft_inputs_prep", ["draft_inputs_on_host", "draft_inputs_on_host"], 2, 0),
    ("deferred_event_sync", ["_wait"], 1, 1),  # deferred, not removed
    ("api_time_sum", ["stats_read_after_drain"] * 3, 3, 0),
    ("race_fix_price", [], 0, 1),  # the race's fix adds the wait
])
def test_each_documented_count_is_one_marked_line_per_sync(name, sites, syncs, fix_syncs):
    c = gallery.get(name)
    assert [s.split(" ")[1] for s in c.sites()] == sites
    assert (c.expected_syncs, c.fix_expected_syncs) == (syncs, fix_syncs)


def test_the_static_bound_covers_every_length_the_state_draws():
    s = C.make_state("cpu", "smoke", seed=3)
    assert int(s.seq_lens_cpu.max()) <= spec_cases.MAX_CONTEXT_LEN
    want = (s.seq_lens_cpu + spec_cases.PAGE - 1) // spec_cases.PAGE
    assert torch.equal(spec_cases.page_table_width_static_bound(s), want)
    assert torch.equal(spec_cases.kv_indices_sized_by_device_max(s), want)


def test_the_host_mask_is_the_device_mask_and_the_optimistic_plan_is_corrected():
    s = C.make_state("cpu", "smoke", seed=1)
    s.seq_lens_cpu[:3] = torch.tensor([100, 3000, 2048])
    s.seq_lens[:3] = s.seq_lens_cpu[:3]
    assert torch.equal(s.seq_lens_cpu >= spec_cases.LONG, s.seq_lens >= spec_cases.LONG)
    assert torch.allclose(spec_cases.long_rows_host_mask(s), spec_cases.long_rows_device_mask(s))
    s.accept[:] = False  # nothing accepted: the plan's bound is corrected by every draft
    assert torch.equal(spec_cases.next_lens_assumed_accepted(s), s.seq_lens_cpu + 1)


def test_the_compiled_cases_run_on_cpu_through_dynamo_alone():
    s = C.make_state("cpu", "smoke", seed=0)
    assert compiled_cases.backend_for(s.device) == "eager"
    want = int(s.seq_lens_cpu.sum())
    assert compiled_cases.compiled_item_graph_break(s) == compiled_cases.compiled_item_captured(s) == want
    assert compiled_cases.compiled_sum_host_mirror(s) == want


# --- counter-examples in their groups, on synthetic records -------------------------------------------
def _v(step, lo, hi, syncs=1.0, caused=0.3, readback=0.0):
    return {"status": "ok", "error": "", "step_ms": step, "step_ms_lo": lo, "step_ms_hi": hi, "host_syncs_per_step": syncs,
            "readback_syncs_per_step": readback, "gpu_idle_sync_caused_ms": caused, "host_blocked_ms": 0.2,
            "expected_syncs": int(syncs), "matches": True}


def _rec():
    pair = lambda pct, lo, hi: {"pct": pct, "ci_low": lo, "ci_high": hi}  # noqa: E731
    mk = lambda n, shape, a, b, ch: {"name": n, "shape": shape, "pr": f"SYNTH #{len(n)} (x)",  # noqa: E731
                                     "variants": {"case": a, "fix": b}, "change": ch}
    return {"device": "cuda", "cases": [
        mk("pitfall", "scalar read-back", _v(5.0, 4.9, 5.1), _v(4.0, 3.9, 4.1, syncs=0, caused=0.0), pair(-20, -22, -18)),
        mk("race", "counter-example: a wait added", _v(4.0, 3.9, 4.1, syncs=0, caused=0.0), _v(4.4, 4.3, 4.5, caused=0.35),
           pair(10.0, 8.0, 12.0)),
        mk("deferred", "counter-example: a wait moved", _v(5.0, 4.9, 5.1), _v(4.98, 4.9, 5.1, caused=0.29),
           pair(-0.4, -1.0, 0.3)),
    ]}


def test_a_fix_measurably_slower_is_a_fix_that_costs_with_its_added_wait_in_the_reason():
    g = G.groups(_rec()).set_index("case")
    assert g.loc["race", "group"] == G.PRICED
    assert "keeps 1 wait(s) per step of its own, charged 0.350 ms" in g.loc["race", "why"]
    assert g.loc["race", "why"].endswith("the fix is 10.0% slower")
    assert g.loc["deferred", "group"] == G.FREE and "the wait moved, it was not removed" in g.loc["deferred", "why"]
    assert g.loc["pitfall", "group"] == G.COSTS and g.loc["pitfall", "charge ms"] == 0.3


def test_the_counter_examples_are_picked_by_their_shape_and_the_groups_come_in_order():
    rec = _rec()
    assert G.counter_examples(rec)["case"].tolist() == ["deferred", "race"]
    assert G.groups(rec)["group"].tolist() == [G.COSTS, G.FREE, G.PRICED]
    rec["cases"][1]["change"] = {"pct": -1.0, "ci_low": -3.0, "ci_high": 1.0}  # within the noise now
    assert G.groups(rec).set_index("case").loc["race", "group"] == G.FREE


# --- the capture witness: its pure parts ---------------------------------------------------------------
@pytest.mark.parametrize("message,kind", [
    ("CUDA error: operation not permitted when stream is capturing", "sync"),
    ("Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned.",
     "pageable_copy"),
    ("CUDA error: operation failed due to a previous error during capture", "sync"),
    ("CUDA out of memory", None),
])
def test_a_capture_error_is_told_from_other_errors_by_its_message(message, kind):
    assert guard.capture_error_kind(message) == kind


def _raises_at_a_known_line():
    raise RuntimeError("CUDA error: operation not permitted when stream is capturing")  # the line named


def test_a_capture_error_becomes_a_record_at_the_line_that_raised_it():
    try:
        _raises_at_a_known_line()
    except RuntimeError as e:
        rec = guard.from_capture_error(e, allow=("_raises_at_a_known_line",))
    line = _raises_at_a_known_line.__code__.co_firstlineno + 1
    assert rec.site == f"tests/test_field_third_round.py:{line} _raises_at_a_known_line"
    assert (rec.kind, rec.witnesses, rec.allowed) == ("sync", (guard.CAPTURE,), True)
    assert guard.from_capture_error(ValueError("bad shape")) is None


def test_the_capture_record_merges_with_another_witness_at_the_same_line():
    debug = guard.HostSync("a.py:3 f", "sync", (guard.DEBUG_MODE,), witness_sites=((guard.DEBUG_MODE, "a.py:3 f"),))
    other = guard.HostSync("b.py:9 g", "stream", (guard.CUPTI,), witness_sites=((guard.CUPTI, "b.py:9 g"),))
    cap = guard.HostSync("a.py:3 f", "sync", (guard.CAPTURE,), witness_sites=((guard.CAPTURE, "a.py:3 f"),))
    lone = guard.HostSync(guard.CAPTURE_UNATTRIBUTED, "sync", (guard.CAPTURE,))
    out = guard.with_capture([debug, other], [cap, lone])
    assert [r.witnesses for r in out] == [(guard.DEBUG_MODE, guard.CAPTURE), (guard.CUPTI,), (guard.CAPTURE,)]


@pytest.mark.parametrize("kwargs,err", [({"capture": "yes"}, TypeError), ({"capture_error_mode": "local"}, ValueError)])
def test_the_capture_options_are_checked_before_anything_runs(kwargs, err):
    with pytest.raises(err, match="capture"):
        with guard.no_host_syncs(**kwargs):
            pass


# --- verify's verdict rules ---------------------------------------------------------------------------
def test_the_compiled_variants_verdict_needs_one_sync_the_charge_and_the_graph_breaks():
    assert VCO.variant_check("compiled", 1.0, 1.0, 1.1, 1).passed
    assert VCO.variant_check("eager", 1.0, 1.0, 0.8, None).passed
    assert not VCO.variant_check("compiled, capture_scalar_outputs", 1.0, 1.0, 1.0, 1).passed  # a break left
    assert not VCO.variant_check("compiled", 0.0, 1.0, 1.0, 1).passed  # the guard missed it
    assert not VCO.variant_check("compiled", 1.0, 1.0, 0.2, 1).passed  # the charge is off
    assert not VCO.variant_check("compiled", 1.0, 1.0, None, 1).passed


@pytest.mark.parametrize("wrong,syncs,passed,says", [(0, 1.0, True, "ordered"), (12, 0.0, True, "pytorch #182190"),
                                                    (0, 0.0, False, "unexpected"), (3, 1.0, False, "unexpected")])
def test_the_ordering_verdict_is_consistency_and_names_the_torch(wrong, syncs, passed, says):
    c = VCO.order_check("9.9.9", wrong, 20, syncs)
    assert c.passed is passed and says in c.detail and c.detail.startswith("torch 9.9.9:")


def test_the_capture_verdict_wants_a_caught_sync_at_a_syncing_line_and_nothing_else():
    assert VC.capture_check("item", 1, ["sync"], [12], [12]).passed
    assert not VC.capture_check("item", 1, ["sync"], [40], [12]).passed  # caught, at the wrong line
    assert not VC.capture_check("item", 1, [], [], [12]).passed
    assert VC.capture_check("device_only", 0, [], [], []).passed
    assert not VC.capture_check("device_only", 0, ["sync"], [3], []).passed


# --- on CUDA ----------------------------------------------------------------------------------------------
@pytest.mark.cuda
def test_the_capture_witness_catches_every_kind_in_the_sync_zoo():
    checks = VC.capture_checks()
    assert all(c.passed for c in checks), [c.line() for c in checks if not c.passed]


@pytest.mark.cuda
def test_the_capture_witness_joins_the_others_on_one_record():
    from dspark_lab.verify import known_syncs as KS

    s = KS.State(torch.device("cuda"))
    KS.item_once(s)
    with guard.no_host_syncs(count=True, capture=True) as g:
        KS.item_once(s)
    [rec] = [r for r in g.syncs if guard.CAPTURE in r.witnesses]
    assert guard.CAPTURE in g.checked and guard.DEBUG_MODE in rec.witnesses, g.summary()
    assert rec.site.split(" ")[0].endswith(f":{KS.CASES[0].lines()[0]}")


def test_dynamo_counts_the_item_graph_break_of_the_compiled_form_and_none_with_scalar_capture():
    """The break at `.item()` ends the function, so Dynamo's graph_break_count can say 0 while its
    break_reasons name it: the check reads both (an H200 under torch 2.11 failed verify on the count)."""
    import torch

    from dspark_lab.verify import compiled as V

    x = torch.ones(4)
    assert V.graph_breaks("compiled", x) == 1
    assert V.graph_breaks("compiled, capture_scalar_outputs", x) == 0
    assert V.graph_breaks("eager", x) is None
