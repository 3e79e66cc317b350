"""More of the gallery, from the field: four pitfalls that public PRs fixed, and two counter-examples
where removing syncs bought little or nothing in their PRs (a sync count is not a cost; what they cost
here is the recording's to say).

Each step has the shape of `cases.py`'s: it takes the gallery's state (whose scale sets the GPU work
queued before the pitfall), queues that work, does the pitfall or its fix, some host preparation,
then the next GPU work. Each sync line carries a `# sync:` comment; `FIELD_CASES` holds each case's
description (the keyword arguments of `registry.Case`), registered in `registry.py`.

Re-implemented from the PRs' descriptions; no upstream code is copied.
"""
from __future__ import annotations

import torch

from dspark_lab.gallery.cases import State, draft, host_prep, read_back, target_verify

BLOCK = 64  # tokens per KV block (the sparse-attention block selection)
MAX_BLOCKS = 72  # blocks per request the selection scores (4096 / BLOCK plus headroom)
VOCAB = 32000
MOE_EXPERTS = 2  # the counter-example's point: at two experts its PR measured no gain on bare-metal Linux
# How many times each documented sync line runs per step, where a line sits in a loop (default 1).
LINE_RUNS = {"moe_per_expert_masks": MOE_EXPERTS}


# --- TensorRT-LLM #16680: a CPU tensor moved to the device inside the per-call block selection ------
def _select_blocks(n_valid_blocks: torch.Tensor, device) -> torch.Tensor:
    """Which of each request's MAX_BLOCKS blocks may be selected: the first n_valid_blocks."""
    return torch.arange(MAX_BLOCKS, device=device) < n_valid_blocks.unsqueeze(1)


def valid_blocks_copied_per_call(s: State) -> torch.Tensor:
    h = target_verify(s)
    n_valid_blocks = ((s.seq_lens_cpu + BLOCK - 1) // BLOCK).to(torch.int32)  # the host's count, a CPU tensor
    keep = _select_blocks(n_valid_blocks.to(device=s.device, dtype=torch.long), s.device)  # sync: a blocking pageable H2D
    host_prep(s)
    draft(s, h)
    return keep


def valid_blocks_on_device(s: State) -> torch.Tensor:
    h = target_verify(s)
    n_valid_blocks = (s.seq_lens + BLOCK - 1) // BLOCK  # made on the device from the device lengths
    keep = _select_blocks(n_valid_blocks, s.device)
    host_prep(s)
    draft(s, h)
    return keep


# --- tokenspeed #45: .max().item() where a pinned host mirror already holds the lengths ------------
def max_seq_len_item(s: State) -> int:
    h = target_verify(s)
    max_len = s.seq_lens.max().item()  # sync: .item() waits for the queued forward to read one number
    host_prep(s)
    draft(s, h)
    return int(max_len)


def max_seq_len_from_mirror(s: State) -> int:
    h = target_verify(s)
    max_len = int(s.seq_lens_cpu.max())  # the host mirror the scheduler keeps in lockstep
    host_prep(s)
    draft(s, h)
    return max_len


# --- Advanced_Optimizers #5: a tensor passed where a Python number is expected ----------------------
def _grad_and_weight(s: State) -> tuple[torch.Tensor, torch.Tensor]:
    g = s.logits  # the gradient stand-in
    w = s.logits.flip(1) * 0.5 + 0.1  # the weight stand-in the gradient is projected against
    return g, w


def orthogonal_grad_alpha_tensor(s: State) -> torch.Tensor:
    h = target_verify(s)
    g, w = _grad_and_weight(s)
    proj = (g * w).sum() / (w * w).sum()  # a 0-dim device tensor
    g_orth = g.sub(w, alpha=proj)  # sync: alpha is a Python number: PyTorch calls .item() on the tensor
    host_prep(s)
    draft(s, h)
    return g_orth


def orthogonal_grad_on_device(s: State) -> torch.Tensor:
    h = target_verify(s)
    g, w = _grad_and_weight(s)
    proj = (g * w).sum() / (w * w).sum()
    g_orth = g.sub(w * proj)  # the product stays on the device: a broadcast multiply, no read-back
    host_prep(s)
    draft(s, h)
    return g_orth


# --- SGLang #28491: prepare_for_decode's blocking torch.tensor(..., device=) ----------------------
def _last_output_ids(s: State) -> list[int]:
    """Each request's last output token, as the scheduler holds it: Python ints."""
    return [int(n) * 7919 % VOCAB for n in s.seq_lens_cpu.tolist()]


def latest_output_ids_blocking(s: State) -> torch.Tensor:
    h = target_verify(s)
    last = _last_output_ids(s)
    ids = torch.tensor(last, dtype=torch.int64, device=s.device)  # sync: a pageable copy and a stream sync
    host_prep(s)
    draft(s, h)
    return ids


def latest_output_ids_non_blocking(s: State) -> torch.Tensor:
    h = target_verify(s)
    last = _last_output_ids(s)
    # Pinned, so the copy is asynchronous on every driver; the forward reads it in stream order.
    src = torch.tensor(last, dtype=torch.int64, pin_memory=s.device.type == "cuda")
    ids = src.to(s.device, non_blocking=True)
    host_prep(s)
    draft(s, h)
    return ids


# --- minimind #837 (counter-example): per-expert mask.any() + nonzero() + boolean indexing ----------
def _expert(x: torch.Tensor, k: int) -> torch.Tensor:
    return torch.tanh(x * (k + 1.0))


def _route_to_expert(x: torch.Tensor, expert_of: torch.Tensor, k: int, out: torch.Tensor) -> None:
    mask = expert_of == k
    if mask.any():  # sync: `if` reads the tensor's truth value back
        rows = mask.nonzero().squeeze(1)  # sync: nonzero's size depends on the data
        out.index_copy_(0, rows, _expert(x[mask], k))  # sync: boolean indexing counts the survivors


def moe_per_expert_masks(s: State) -> torch.Tensor:
    h = target_verify(s)
    x, expert_of = s.tokens, s.expert_ids % MOE_EXPERTS
    out = torch.zeros_like(x)
    for k in range(MOE_EXPERTS):
        _route_to_expert(x, expert_of, k, out)
    host_prep(s)
    draft(s, h)
    return out


def moe_sorted_dispatch(s: State) -> torch.Tensor:
    h = target_verify(s)
    x, expert_of = s.tokens, s.expert_ids % MOE_EXPERTS
    order = torch.argsort(expert_of, stable=True)
    counts = torch.zeros(MOE_EXPERTS, dtype=torch.int64, device=x.device).scatter_add_(0, expert_of, torch.ones_like(expert_of))
    bounds = counts.tolist()  # sync: one read of the per-expert counts per layer
    chunks = x.index_select(0, order).split(bounds)
    ys = [_expert(c, k) for k, c in enumerate(chunks) if bounds[k]]  # empty experts skipped on host ints
    out = torch.zeros_like(x).index_copy_(0, order, torch.cat(ys))
    host_prep(s)
    draft(s, h)
    return out


# --- sparkinfer #725 (counter-example): a stream sync right before the by-design read-back ---------
def _sync_stream(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()  # sync: the explicit post-verify stream sync


def _accepted_lens(s: State, after_sync: bool) -> torch.Tensor:
    accepted = s.accept.sum(1)  # the verify's result: accepted draft tokens per request
    s.d2h_pinned.copy_(accepted, non_blocking=True)
    done = torch.cuda.Event() if s.device.type == "cuda" else None
    if done is not None:
        done.record()
    if after_sync:
        _sync_stream(s.device)
    return read_back(s.d2h_pinned, done)  # the host needs the lengths before the next draft


def accept_lens_after_stream_sync(s: State) -> torch.Tensor:
    h = target_verify(s)
    lens = _accepted_lens(s, after_sync=True)
    host_prep(s)
    draft(s, h)
    return lens


def accept_lens_read_back_only(s: State) -> torch.Tensor:
    h = target_verify(s)
    lens = _accepted_lens(s, after_sync=False)
    host_prep(s)
    draft(s, h)
    return lens


# --- the descriptions: keyword arguments of registry.Case, registered in registry.py ---------------
FIELD_CASES = (
    dict(
        name="blocks_to_device", shape="a host tensor moved to the device with .to(device=, dtype=) in a per-call helper",
        step=valid_blocks_copied_per_call, fix=valid_blocks_on_device,
        pr="NVIDIA/TensorRT-LLM #16680 (select_blocks_from_maxscore's n_valid_blocks)",
        why="`n_valid_blocks.to(device=device, dtype=torch.long)` looks like a cast, but the tensor lives on the "
            "host: `.to()` without `non_blocking` is a blocking copy, so the host queues the copy and then waits "
            "until the stream has run everything before it and the copy, every call. The PR's fix creates the "
            "tensor on the device once per step; the thread reports request latency P50 298.2 -> 269.6 ms. Here the "
            "counts are computed on the device from `seq_lens`: the same mask, no host copy.",
        expected_syncs=1, expected_d2h=0,
    ),
    dict(
        name="max_item_mirror", shape="scalar read-back: .max().item() where a host mirror already exists",
        step=max_seq_len_item, fix=max_seq_len_from_mirror,
        pr="lightseekorg/tokenspeed #45 (_init_extend_metadata's seq_lens.max().item())",
        why="`seq_lens.max().item()` reads one number back, so the host waits behind everything queued before "
            "it: the thread measured the saving (mean TTFT 107.3 -> 97.4 ms) as about the queued forward the "
            "host had been waiting behind. The scheduler already kept the lengths in a pinned CPU mirror; the "
            "fix takes the maximum of the mirror: same value, no round trip.",
        expected_syncs=1, expected_d2h=1,
    ),
    dict(
        name="tensor_as_alpha", shape="a device tensor passed as a Python-number argument (alpha=)",
        step=orthogonal_grad_alpha_tensor, fix=orthogonal_grad_on_device,
        pr="Koratahiu/Advanced_Optimizers #5 (an optimizer's orthogonal-gradient step)",
        why="`g.sub(w, alpha=proj)` takes `alpha` as a Python number; given a 0-dim device tensor, PyTorch "
            "converts it silently with `.item()`, a read-back and a stream sync hidden inside a library call. "
            "No line says `.item()`, so a reader cannot see it; sync debug mode and the guard can. The fix "
            "multiplies on the device, `g.sub(w * proj)`, and the PR reports an optimizer step about 50% faster.",
        expected_syncs=1, expected_d2h=1,
    ),
    dict(
        name="decode_output_ids", shape="per-request ids gathered into a device tensor with a blocking torch.tensor(..., device=)",
        step=latest_output_ids_blocking, fix=latest_output_ids_non_blocking,
        pr="SGLang #28491 (prepare_for_decode's latest_output_ids; the spec-decode path in #28500)",
        why="Every decode step `prepare_for_decode` built `latest_output_ids` with `torch.tensor(list, device=...)`, "
            "unlike the other copies on that path: a pageable copy followed by a stream sync, so the host stalled "
            "behind the forward in flight, most visible at small batch. The same pattern as the DSpark scalar "
            "(#34782), elsewhere in the same engine. The fix copies with `non_blocking=True` (the forward stream "
            "already waits for the schedule stream); here the source is pinned too, so no driver stages it "
            "synchronously.",
        expected_syncs=1, expected_d2h=0,
    ),
    dict(
        name="moe_per_expert_masks", shape="counter-example: per-expert mask.any(), nonzero() and boolean indexing in an MoE loop",
        step=moe_per_expert_masks, fix=moe_sorted_dispatch,
        pr="jingyaogong/minimind #837 (MoE dispatch: one host sync per layer instead of 3 x num_experts)",
        why="Each expert's `if mask.any()`, `mask.nonzero()` and `x[mask]` each read a value back: three syncs "
            "per expert per layer (96 -> 8 per forward in the PR). The fix sorts the tokens by expert and reads "
            "the per-expert counts once (`counts.tolist()`), then splits on host ints. On bare-metal Linux (a "
            "26 us round trip) the thread measured 1.2-1.5x at four experts and more, and no gain at two (0.89-1.07x); "
            "on a WSL2 laptop with a 116 us round trip, 1.29x at two. After the first sync has drained the queue, "
            "the next ones wait for almost nothing, and the fix keeps one sync that waits just as long. A sync "
            "count is not a cost; here, at two experts, the measurement decides.",
        expected_syncs=3 * MOE_EXPERTS, expected_d2h=3 * MOE_EXPERTS, fix_expected_syncs=1, fix_expected_d2h=1,
        allow=("moe_sorted_dispatch",),  # the fix's one read of the counts is its design, as in the PR
        helpers=(_route_to_expert,),
    ),
    dict(
        name="redundant_stream_sync", shape="counter-example: a stream sync right before a by-design read-back",
        step=accept_lens_after_stream_sync, fix=accept_lens_read_back_only,
        pr="gittensor-ai-lab/sparkinfer #725 (a post-verify stream sync removed)",
        why="In the PR a stream sync followed the post-verify commit kernels although the host read nothing they "
            "produced (stream order already ordered their consumers); removing it together with pinning a staging "
            "buffer measured +0.28% on a decode loop about 94% GPU-busy. Here the extra stream sync sits just "
            "before the by-design read-back (the accepted lengths copied into pinned memory, then a wait on the "
            "copy's event), which waits for the same work, so removing it removes a sync and only a small part "
            "of the step time. The fix keeps the read-back (allowed) and drops the extra "
            "sync; whether that is worth anything is what the step time says.",
        expected_syncs=1, expected_d2h=1, fix_expected_d2h=1, allow=("read_back",), helpers=(_sync_stream,),
    ),
)
