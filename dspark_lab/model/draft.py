"""A small, faithful re-implementation of the DSpark draft forward (`DraftBlockProposer._run_forward`).

What is kept from SGLang: a ForwardBatch-like record with the fields SGLang sets, `input_ids` taken
from a persistent block buffer (anchor/bonus token in column 0, the mask token after it), batch
sizes padded up to CUDA-graph capture buckets, the forward replayed as a CUDA graph that reads its
inputs from static buffers, and a MoE top-k that CONSUMES `num_token_non_padded`: rows at or past
it are padding and are dispatched to no expert. What is simplified: one GPU stands for an EP rank
(all experts are computed locally), attention is over a fixed-size KV prefix masked by seq_lens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from dspark_lab.config import LabConfig, ModelSize
from dspark_lab.model import dispatch as dispatch_modes

TARGET_VERIFY = "TARGET_VERIFY"  # ForwardMode.TARGET_VERIFY
DSPARK = "DSPARK"  # SpeculativeAlgorithm.DSPARK
CAPTURE_HIDDEN_NULL = "NULL"  # CaptureHiddenMode.NULL
INVALID_EXPERT = -1


class MissingNumTokenNonPadded(RuntimeError):
    """A consumer needs the device scalar but the batch carries None (a silent bug in SGLang)."""


@dataclass
class DraftForwardBatch:
    """The fields SGLang's DSpark `_run_forward` sets on its ForwardBatch (sglang 0.5.23).

    SGLang 0.5.23 names the last pair `global_num_token_non_padded[_cpu]`; earlier releases and
    the PRs this lab studies call them `num_token_non_padded[_cpu]` (see sglang_adapter.FIELD_ALIASES).
    """

    forward_mode: str
    batch_size: int
    input_ids: torch.Tensor  # [bs * q] view of the persistent block buffer
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    out_cache_loc: torch.Tensor
    seq_lens_sum: Optional[int]
    seq_lens_cpu: Optional[torch.Tensor]
    positions: torch.Tensor
    input_embeds: Optional[torch.Tensor]
    spec_algorithm: str
    spec_info: object
    capture_hidden_mode: str
    num_token_non_padded: Optional[torch.Tensor]  # int32 device scalar, or None
    num_token_non_padded_cpu: int  # always set

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def route_top_k(router_logits: torch.Tensor, top_k: int, num_token_non_padded: Optional[torch.Tensor]):
    """Top-k expert routing that marks rows at or past `num_token_non_padded` as padding.

    Padded rows get expert id INVALID_EXPERT and weight 0, so they are dispatched nowhere. The
    comparison reads the device scalar inside the graph: replays see the current value.
    """
    weights, ids = torch.topk(router_logits.softmax(-1), top_k, dim=-1)
    if num_token_non_padded is not None:
        rows = torch.arange(router_logits.shape[0], device=router_logits.device)
        padded = (rows >= num_token_non_padded)[:, None]
        ids = ids.masked_fill(padded, INVALID_EXPERT)
        weights = weights.masked_fill(padded, 0.0)
    return weights, ids


class MoE(nn.Module):
    """With a process group of world size > 1, this rank keeps experts [rank*E/N, (rank+1)*E/N)
    of the same seeded weights and joins the ranks with `dispatch` (model/dispatch.py); with no
    group (or world size 1) all experts are local and no collective runs."""

    def __init__(self, hidden: int, experts: int, top_k: int, group=None, dispatch: str = "allreduce"):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, hidden, 2 * hidden) / math.sqrt(hidden))
        self.w_out = nn.Parameter(torch.randn(experts, 2 * hidden, hidden) / math.sqrt(2 * hidden))
        self.group, self.dispatch, self.expert_lo = None, dispatch, 0
        if group is not None and torch.distributed.get_world_size(group) > 1:
            dispatch_modes.check_mode(dispatch)
            world, rank = torch.distributed.get_world_size(group), torch.distributed.get_rank(group)
            if experts % world:
                raise ValueError(f"ep world size must divide the model's {experts} experts; got {world}")
            local = experts // world
            # All experts are drawn first (same RNG stream as one process), then sliced.
            self.expert_lo = rank * local
            self.w_in = nn.Parameter(self.w_in.data[self.expert_lo:self.expert_lo + local].clone())
            self.w_out = nn.Parameter(self.w_out.data[self.expert_lo:self.expert_lo + local].clone())
            self.group = group

    def forward(self, x, num_token_non_padded):
        weights, ids = route_top_k(self.gate(x), self.top_k, num_token_non_padded)
        if self.group is not None:
            return dispatch_modes.dispatch(self.dispatch, x, weights, ids, self, self.group, num_token_non_padded), ids
        out = torch.zeros_like(x)
        # Dense over experts with per-row weights: static shapes, so it can be graph-captured.
        for e in range(self.w_in.shape[0]):
            w_e = (weights * (ids == e)).sum(-1, keepdim=True)
            out = out + w_e * (F.silu(x @ self.w_in[e]) @ self.w_out[e])
        return out, ids


class DraftLayer(nn.Module):
    def __init__(self, m: ModelSize, group=None, dispatch: str = "allreduce"):
        super().__init__()
        self.heads = m.heads
        self.norm1, self.norm2 = RMSNorm(m.hidden), RMSNorm(m.hidden)
        self.qkv = nn.Linear(m.hidden, 3 * m.hidden, bias=False)
        self.o = nn.Linear(m.hidden, m.hidden, bias=False)
        self.moe = MoE(m.hidden, m.experts, m.top_k, group=group, dispatch=dispatch)

    def forward(self, x, k_prefix, v_prefix, key_mask, num_token_non_padded):
        bs, P, H, D = k_prefix.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.view(bs, -1, H, D).transpose(1, 2)  # [bs, H, q, D]
        # Block-parallel draft: each row attends to its request's prefix and to the whole block.
        k = torch.cat([k_prefix, k.view(bs, -1, H, D)], 1).transpose(1, 2)
        v = torch.cat([v_prefix, v.view(bs, -1, H, D)], 1).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :])
        x = x + self.o(a.transpose(1, 2).reshape(x.shape))
        h, ids = self.moe(self.norm2(x), num_token_non_padded)
        return x + h, ids


class DraftModel(nn.Module):
    def __init__(self, m: ModelSize, mask_token: int, group=None, dispatch: str = "allreduce"):
        super().__init__()
        self.m = m
        self.mask_token = mask_token
        self.embed = nn.Embedding(m.vocab, m.hidden)
        self.layers = nn.ModuleList(DraftLayer(m, group, dispatch) for _ in range(m.layers))
        self.norm = RMSNorm(m.hidden)
        self.lm_head = nn.Linear(m.hidden, m.vocab, bias=False)

    def forward(self, input_embeds, seq_lens, k_cache, v_cache, q_len, num_token_non_padded):
        """input_embeds [bs*q, hidden]; returns (draft token ids [bs*q], expert ids of layer 0)."""
        bs = seq_lens.shape[0]
        P = k_cache.shape[2]
        key_mask = torch.cat(
            [
                torch.arange(P, device=seq_lens.device)[None, :] < seq_lens[:, None],
                torch.ones(bs, q_len, dtype=torch.bool, device=seq_lens.device),
            ],
            1,
        )
        x = input_embeds
        first_ids = None
        for i, layer in enumerate(self.layers):
            x, ids = layer(x, k_cache[i, :bs], v_cache[i, :bs], key_mask, num_token_non_padded)
            first_ids = ids if first_ids is None else first_ids
        logits = self.lm_head(self.norm(x))
        return logits.argmax(-1), first_ids


class DraftRunner:
    """Runs the draft forward for one config: eagerly, or as a CUDA-graph replay per capture bucket.

    Like SGLang's graph runner, replay copies the batch's device tensors into static inputs
    (device-to-device) and pads the batch up to its bucket; the padded rows exist and are real
    input to the MoE, so only `num_token_non_padded` keeps them from being dispatched.
    """

    def __init__(self, cfg: LabConfig, device: str, consume_num_token_non_padded: bool, dtype=None,
                 share_weights_with: Optional["DraftRunner"] = None, *, group=None, dispatch: str = "allreduce",
                 bucket: Optional[int] = None):
        """`group`/`dispatch`: expert parallelism over a torch.distributed group (parallel/); `bucket`
        overrides the capture bucket, so ranks with different batches pad to a common one."""
        self.cfg = cfg
        self.device = torch.device(device)
        self.consume = consume_num_token_non_padded
        m = cfg.model_size
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.q = cfg.query_token_num
        self.bucket = bucket or cfg.bucket_batch_size
        if self.bucket < cfg.batch_size:
            raise ValueError(f"bucket must be at least batch_size {cfg.batch_size}; got {bucket}")
        if share_weights_with is not None:
            # Strategies measured side by side read the same weights and KV prefix (built once).
            src = share_weights_with
            self.model, self.k_cache, self.v_cache = src.model, src.k_cache, src.v_cache
        else:
            # Built on the device itself (fast); the seed makes every runner of a config equal.
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []), self.device:
                torch.manual_seed(cfg.seed)
                self.model = DraftModel(m, mask_token=m.vocab - 1, group=group, dispatch=dispatch).to(self.dtype).eval().requires_grad_(False)
                hd = m.hidden // m.heads
                shape = (m.layers, self.bucket, m.prefix_len, m.heads, hd)
                self.k_cache = (torch.randn(shape) * 0.5).to(self.dtype)
                self.v_cache = torch.randn(shape).to(self.dtype)
        tokens = self.bucket * self.q
        # Static graph inputs (persistent addresses, as SGLang's graph runner keeps them).
        self.static_embeds = torch.zeros(tokens, m.hidden, device=self.device, dtype=self.dtype)
        self.static_seq_lens = torch.ones(self.bucket, dtype=torch.int64, device=self.device)
        self.static_num_token_non_padded = torch.zeros((), dtype=torch.int32, device=self.device)
        self.use_graph = cfg.graph and self.device.type == "cuda"
        if group is not None and torch.distributed.get_world_size(group) > 1:
            self.use_graph = self.use_graph and dispatch_modes.GRAPH_CAPTURABLE[dispatch]  # host-sized splits: eager
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.static_out: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    def _forward_static(self):
        return self.model(
            self.static_embeds,
            self.static_seq_lens,
            self.k_cache,
            self.v_cache,
            self.q,
            self.static_num_token_non_padded if self.consume else None,
        )

    def warm(self, runs: int = 1) -> None:
        """Eager forwards on a side stream: the first one loads the kernels' CUDA modules."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(runs):
                self._forward_static()
        torch.cuda.current_stream().wait_stream(s)

    def capture(self) -> None:
        """Capture the bucket's graph (warm up on a side stream first, as torch requires)."""
        self.warm(2)
        self.graph = torch.cuda.CUDAGraph()
        # With NCCL collectives in the graph, other threads (NCCL's watchdog) keep querying events
        # during capture: only this thread's calls must be capture-safe.
        mode = {"capture_error_mode": "thread_local"} if self.model.layers[0].moe.group is not None else {}
        with torch.cuda.graph(self.graph, **mode), torch.no_grad():
            self.static_out = self._forward_static()

    def embed(self, input_ids: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """SGLang embeds the block outside the graph by default (embed_module(draft_block_ids))."""
        if out is None:
            return self.model.embed(input_ids)
        return torch.index_select(self.model.embed.weight, 0, input_ids, out=out)

    def run(self, batch: DraftForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (draft tokens [bs*q], layer-0 expert ids [bucket*q, top_k]) of the padded bucket."""
        if self.consume and batch.num_token_non_padded is None:
            raise MissingNumTokenNonPadded(
                "num_token_non_padded is None but the MoE top-k consumes it (enable_num_token_non_padded() "
                f"is true for {self.cfg.parallel}); padded rows would be dispatched to experts"
            )
        n = batch.input_ids.shape[0]
        bs = batch.batch_size
        # Replay-prepare: device-to-device copies into the static inputs; pad the tail.
        self.static_embeds[:n].copy_(batch.input_embeds)
        self.static_embeds[n:].zero_()
        self.static_seq_lens[:bs].copy_(batch.seq_lens)
        self.static_seq_lens[bs:].fill_(1)
        if self.consume:
            src = batch.num_token_non_padded
            if src.data_ptr() != self.static_num_token_non_padded.data_ptr():
                self.static_num_token_non_padded.copy_(src)
        if self.use_graph:
            if self.graph is None:
                self.capture()
            self.graph.replay()
            tokens, ids = self.static_out
        else:
            with torch.no_grad():
                tokens, ids = self._forward_static()
        return tokens[:n], ids
