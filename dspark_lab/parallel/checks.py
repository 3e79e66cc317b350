"""Checks run on every rank of a group (by tests on gloo, and by studies/ep/real_ranks.py on GPUs).

`equivalence` runs each dispatch mode on this rank's own batch and compares it with the
single-process model (all experts local, no group) built from the same seed on the same input.
"""
from __future__ import annotations

import torch

from dspark_lab.config import LabConfig
from dspark_lab.model.draft import DraftRunner
from dspark_lab.model.dispatch import COUNTERS, DISPATCH_MODES
from dspark_lab.parallel.ranks import RankContext


def rank_inputs(cfg: LabConfig, bucket: int, rank: int, device, dtype):
    """This rank's padded bucket of input rows and seq_lens (different per rank, seeded)."""
    m = cfg.model_size
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(bucket * cfg.query_token_num, m.hidden, generator=g).to(device=device, dtype=dtype)
    seq = torch.randint(1, m.prefix_len, (bucket,), generator=g).to(device)
    return x, seq


def equivalence(ctx: RankContext, batch_sizes: list, modes=DISPATCH_MODES, model: str = "tiny",
                gamma: int = 2, seed: int = 0) -> dict:
    """Per mode: max |EP - reference| of layer 0's MoE output and of the final hidden state's tokens,
    pairs dispatched, pairs from padded rows dispatched, and host reads of split sizes."""
    bs = batch_sizes[ctx.rank]
    cfg = LabConfig(ep_size=ctx.world_size, batch_size=bs, gamma=gamma, model=model, seed=seed,
                    device=ctx.device, graph=False)
    bucket = max(LabConfig(batch_size=b).bucket_batch_size for b in batch_sizes)
    # float32 on every device: the comparison is about which rows go where, not bf16 rounding.
    ref = DraftRunner(cfg, ctx.device, True, dtype=torch.float32, bucket=bucket)
    x, seq = rank_inputs(cfg, bucket, ctx.rank, ref.device, ref.dtype)
    n_real = torch.tensor(cfg.num_tokens, dtype=torch.int32, device=ref.device)
    q = cfg.query_token_num
    with torch.no_grad():
        ref_moe, _ = ref.model.layers[0].moe(x, n_real)
        ref_tokens, _ = ref.model(x, seq, ref.k_cache, ref.v_cache, q, n_real)
    out = {"rank": ctx.rank, "num_tokens": cfg.num_tokens, "bucket_rows": bucket * q}
    for mode in modes:
        ep = DraftRunner(cfg, ctx.device, True, dtype=torch.float32, group=ctx.group, dispatch=mode, bucket=bucket)
        COUNTERS.reset()
        COUNTERS.enabled = True
        try:
            with torch.no_grad():
                moe_out, _ = ep.model.layers[0].moe(x, n_real)
                layer_counts = {k: COUNTERS.value(k) for k in ("pairs_sent", "padded_pairs_sent")}
                reads_one_layer = COUNTERS.host_reads
                tokens, _ = ep.model(x, seq, ep.k_cache, ep.v_cache, q, n_real)
        finally:
            COUNTERS.enabled = False
        out[mode] = {
            "moe_max_abs_diff": float((moe_out.float() - ref_moe.float()).abs().max()),
            "tokens_equal": bool(torch.equal(tokens, ref_tokens)),
            "local_experts": int(ep.model.layers[0].moe.w_in.shape[0]),
            "host_reads_per_layer": reads_one_layer,
            **layer_counts,
        }
    COUNTERS.reset()
    return out


def reference_summary(per_rank: list, modes=DISPATCH_MODES) -> dict:
    """Per dispatch mode over every rank's `equivalence` result: what a run file's header records
    as its `reference_check` (outputs equal to the one-process reference, and how far the MoE is)."""
    return {mode: {"tokens_equal": all(r[mode]["tokens_equal"] for r in per_rank),
                   "moe_max_abs_diff": max(r[mode]["moe_max_abs_diff"] for r in per_rank),
                   "padded_pairs_sent": sum(r[mode]["padded_pairs_sent"] for r in per_rank),
                   "ranks": len(per_rank)} for mode in modes}
