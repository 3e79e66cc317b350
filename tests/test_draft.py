import pytest
import torch

from dspark_lab import strategies
from dspark_lab.config import LabConfig
from dspark_lab.model.draft import INVALID_EXPERT, DraftForwardBatch, MissingNumTokenNonPadded, route_top_k
from dspark_lab.model import sglang_adapter
from dspark_lab.model.workload import LabStep

TINY = dict(model="tiny", workload="tiny", device="cpu")


def run(cfg, name, steps=3):
    s = LabStep(cfg, name)
    for _ in range(steps):
        s.step()
    return s


def test_padded_rows_get_no_expert_and_real_rows_match_across_strategies():
    cfg = LabConfig(ep_size=2, batch_size=5, gamma=4, **TINY)  # bucket 8: 12 padded rows
    n, bucket_rows = cfg.num_tokens, cfg.bucket_batch_size * cfg.query_token_num
    outs = {}
    for name in strategies.BUILTIN:
        s = run(cfg, name)
        ids = s.last_expert_ids
        assert ids.shape[0] == bucket_rows > n
        assert (ids[n:] == INVALID_EXPERT).all(), name
        assert (ids[:n] != INVALID_EXPERT).all(), name
        outs[name] = s.last_output
    ref = outs["device_direct"]
    assert all(torch.equal(ref, o) for o in outs.values())


def test_without_the_predicate_padded_rows_are_routed():
    # EP 1: nobody reads the scalar, so padded rows do reach experts (harmless: their outputs are dropped).
    s = run(LabConfig(ep_size=1, batch_size=5, gamma=4, **TINY), "on_demand")
    assert (s.last_expert_ids != INVALID_EXPERT).all()


def test_none_reaching_the_consumer_while_predicate_true_raises():
    cfg = LabConfig(ep_size=2, batch_size=5, gamma=4, **TINY)
    s = LabStep(cfg, "device_direct")
    s.step()
    s.strategy = strategies.Strategy("buggy", lambda *a, **k: None, "returns None always", "test")
    with pytest.raises(MissingNumTokenNonPadded, match="num_token_non_padded is None but the MoE top-k consumes it"):
        s.step()


def test_route_top_k_masks_rows_at_or_past_the_count():
    logits = torch.randn(6, 4)
    w, ids = route_top_k(logits, 2, torch.tensor(4, dtype=torch.int32))
    assert (ids[4:] == INVALID_EXPERT).all() and (w[4:] == 0).all() and (ids[:4] >= 0).all()
    w2, ids2 = route_top_k(logits, 2, None)
    assert (ids2 >= 0).all()


def test_the_step_fills_the_record_sglang_sets_from_its_own_state():
    cfg = LabConfig(ep_size=2, batch_size=3, gamma=4, **TINY)
    s = LabStep(cfg, "non_blocking")
    seen, run_batch = [], s.runner.run
    s.runner.run = lambda batch: (seen.append(batch), run_batch(batch))[1]
    s.step()
    (b,) = seen
    assert isinstance(b, DraftForwardBatch) and b.batch_size == 3
    assert b.input_ids.data_ptr() == s.block_ids.data_ptr() and b.input_ids.numel() == 3 * cfg.query_token_num
    assert b.req_pool_indices is s.req_pool_indices and b.seq_lens is s.seq_lens
    assert b.seq_lens_cpu.tolist() == s.seq_lens_host and b.seq_lens_sum == sum(s.seq_lens_host)
    assert torch.equal(b.positions, (s.seq_lens[:, None] + s.offsets).view(-1))
    assert torch.equal(b.out_cache_loc, (b.positions.view(3, -1) + s.cache_base).view(-1))
    assert b.input_embeds.data_ptr() == s.input_embeds.data_ptr()
    assert int(b.num_token_non_padded) == b.num_token_non_padded_cpu == cfg.num_tokens
    # Every field is set (SGLang's drafter passes no speculative info to the draft's own batch).
    assert [f for f in DraftForwardBatch.field_names() if getattr(b, f) is None] == ["spec_info"]
    # The renamed pair the sglang adapter maps is a pair of this record's fields.
    assert set(sglang_adapter.FIELD_ALIASES) <= set(DraftForwardBatch.field_names())


def test_input_ids_come_from_the_block_buffer_with_anchor_then_mask_tokens():
    cfg = LabConfig(ep_size=2, batch_size=3, gamma=4, **TINY)
    s = run(cfg, "non_blocking", steps=1)
    block = s.block_ids[: cfg.batch_size]
    assert (block[:, 1:] == s.runner.model.mask_token).all()
    assert torch.equal(block[:, 0], s.target.bonus[: cfg.batch_size])


@pytest.mark.cuda
@pytest.mark.parametrize("graph", [True, False])
def test_cuda_graph_and_eager_outputs_identical_across_strategies(graph):
    cfg = LabConfig(ep_size=8, batch_size=5, gamma=4, workload="tiny", graph=graph, device="cuda")
    outs = [run(cfg, n).last_output for n in strategies.BUILTIN]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
