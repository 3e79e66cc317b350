"""The gallery's step functions: each pitfall in the shape of the code it comes from, its fix beside it.

Every step takes the state made by `make_state` and returns a value; a case and its fix return the
same value. Each step first queues GPU work (`target_verify`: a stand-in for the target verify that
runs ahead of the host in a serving engine; at the GPU scale, GPU_SCALE, several ms of it in one
kernel, so that every case's sync really waits and the step is not bound by the host's launches),
then does the pitfall or its fix, then some host preparation (during which a GPU left idle by the
sync waits for the host), then queues the next GPU work (the draft). A new case built on
`target_verify`, `host_prep` and `draft` takes the same scale. The line that synchronizes carries a `# sync:` comment naming the call: the
gallery reads these comments as each case's documented source lines.

Re-implemented from the PRs' descriptions (cited per case in `registry.py`); no code is copied.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import torch

from dspark_lab.measure.ranges import READBACK_RANGE


@dataclass(frozen=True)
class Scale:
    """Sizes of the stand-in GPU work and host preparation."""
    rows: int  # tokens in the verify batch
    hidden: int
    layers: int  # matmul+tanh layers of the verify stand-in
    host_prep_us: float  # host work after the pitfall (scheduler bookkeeping)
    batch: int  # requests
    experts: int
    queued_gpu_ms: float = 0.0  # GPU work queued in one kernel before the layers (CUDA only; 0: none)


SCALES = {
    # The verify stand-in as 16 eager layers and 0.2 ms of host preparation: its steps are host-bound
    # (data/gallery/h200-gallery-20261201.json: the GPU idles for much of every step), so a sync there
    # finds little queued work to wait for.
    "gpu": Scale(rows=1024, hidden=4096, layers=16, host_prep_us=200.0, batch=64, experts=32),
    # The same, with 4 ms of GPU work queued ahead in one kernel: every case's sync waits for it.
    "queued": Scale(rows=1024, hidden=4096, layers=16, host_prep_us=200.0, batch=64, experts=32, queued_gpu_ms=4.0),
    # Tiny: runs anywhere in a fraction of a millisecond (tests, CPU recordings).
    "smoke": Scale(rows=8, hidden=32, layers=2, host_prep_us=0.0, batch=8, experts=4),
}
GPU_SCALE = "queued"  # what a gallery records on CUDA (scripts/gpu_gallery.py, live notebooks)
CPU_SCALE = "smoke"


def default_scale(device=None) -> str:
    """The scale to measure the gallery at on `device` (CUDA: GPU_SCALE, else CPU_SCALE)."""
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return GPU_SCALE if dev.type == "cuda" else CPU_SCALE


def scale(name: str) -> Scale:
    try:
        return SCALES[name]
    except KeyError:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}; got {name!r}") from None


@dataclass
class State:
    device: torch.device
    scale: Scale
    h: torch.Tensor  # verify activations
    w: torch.Tensor
    seq_lens: torch.Tensor  # device, int64 [batch]
    seq_lens_cpu: torch.Tensor  # the scheduler's host mirror of seq_lens (kept in lockstep)
    logits: torch.Tensor  # [batch, draft] scores of the draft tokens
    accept: torch.Tensor  # [batch, draft] bool: which draft tokens were accepted
    positions: torch.Tensor  # [rows] token positions in the padded batch
    num_non_padded: torch.Tensor  # device int scalar: tokens that are not padding
    tokens: torch.Tensor  # [rows, hidden] tokens to dispatch to experts
    expert_ids: torch.Tensor  # [rows] routed expert per token
    d2h_pageable: torch.Tensor  # host buffer in pageable memory (the pitfall)
    d2h_pinned: torch.Tensor  # host buffer in pinned memory on CUDA (the fix)


def make_state(device=None, scale_name: str = "smoke", seed: int = 0) -> State:
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sc = scale(scale_name)
    g = torch.Generator().manual_seed(seed)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    seq = torch.randint(16, 4096, (sc.batch,), generator=g)
    draft = 4
    padded = sc.rows
    cuda = device.type == "cuda"
    return State(
        device=device, scale=sc,
        h=(torch.randn(sc.rows, sc.hidden, generator=g) * 0.1).to(device, dtype),
        w=(torch.randn(sc.hidden, sc.hidden, generator=g) / sc.hidden ** 0.5).to(device, dtype),
        seq_lens=seq.to(device), seq_lens_cpu=seq.clone(),
        logits=torch.randn(sc.batch, draft, generator=g).to(device),
        accept=(torch.rand(sc.batch, draft, generator=g) < 0.6).to(device),
        positions=torch.arange(padded, device=device),
        num_non_padded=torch.tensor(padded - padded // 4, device=device),
        tokens=torch.randn(sc.rows, 8, generator=g).to(device),
        expert_ids=torch.randint(0, sc.experts, (sc.rows,), generator=g).to(device),
        d2h_pageable=torch.empty(sc.batch, dtype=torch.int64),
        d2h_pinned=torch.empty(sc.batch, dtype=torch.int64, pin_memory=cuda),
    )


# --- the surroundings every step shares --------------------------------------------------------
_SPIN_CYCLES_PER_MS: dict = {}  # device index -> GPU clock cycles per ms of torch.cuda._sleep, measured once


def spin_cycles_per_ms(device: torch.device) -> float:
    """How many cycles of `torch.cuda._sleep` take 1 ms on `device`: timed once with CUDA events."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SPIN_CYCLES_PER_MS:
        with torch.cuda.device(idx):
            torch.cuda._sleep(1_000_000)  # warm-up: the clock ramps up
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda._sleep(10_000_000)
            b.record()
            b.synchronize()
            _SPIN_CYCLES_PER_MS[idx] = 10_000_000 / a.elapsed_time(b)
    return _SPIN_CYCLES_PER_MS[idx]


def queue_gpu_work(s: State) -> None:
    """Queue `s.scale.queued_gpu_ms` of GPU work in one kernel (no host cost but its launch)."""
    if s.scale.queued_gpu_ms > 0 and s.device.type == "cuda":
        torch.cuda._sleep(int(s.scale.queued_gpu_ms * spin_cycles_per_ms(s.device)))


def target_verify(s: State) -> torch.Tensor:
    """Queue GPU work the host does not wait for (the verify forward)."""
    queue_gpu_work(s)
    h = s.h
    for _ in range(s.scale.layers):
        h = torch.tanh(h @ s.w)
    return h


def host_prep(s: State) -> None:
    """Host work between the pitfall and the next launch (building the next batch's metadata)."""
    end = time.perf_counter() + s.scale.host_prep_us * 1e-6
    while time.perf_counter() < end:
        pass


def draft(s: State, h: torch.Tensor) -> torch.Tensor:
    return torch.tanh(h[:, :8] * 2.0)


# --- 1. scalar read-back: .item() ------------------------------------------------------------
def seq_lens_sum_item(s: State) -> int:
    h = target_verify(s)
    seq_lens_sum = torch.sum(s.seq_lens).item()  # sync: .item() copies the sum to the host and waits
    host_prep(s)
    draft(s, h)
    return int(seq_lens_sum)


def seq_lens_sum_from_mirror(s: State) -> int:
    h = target_verify(s)
    seq_lens_sum = int(s.seq_lens_cpu.sum())  # the host mirror already holds the lengths
    host_prep(s)
    draft(s, h)
    return seq_lens_sum


# --- 2. scalar read-back: Python bool() of a device tensor -----------------------------------
def mask_padded_if_any(s: State) -> torch.Tensor:
    h = target_verify(s)
    out = h[:, 0].float()
    if (s.positions >= s.num_non_padded).any():  # sync: `if` calls bool() on a device tensor
        out = out.masked_fill(s.positions >= s.num_non_padded, 0.0)
    host_prep(s)
    draft(s, h)
    return out


def mask_padded_always(s: State) -> torch.Tensor:
    h = target_verify(s)
    out = h[:, 0].float()
    # Masking is cheap on the device: do it unconditionally instead of asking the host first.
    out = torch.where(s.positions < s.num_non_padded, out, torch.zeros((), device=out.device))
    host_prep(s)
    draft(s, h)
    return out


# --- 3. data-dependent output size: boolean-mask indexing and nonzero ---------------------------
def accepted_scores_compacted(s: State) -> torch.Tensor:
    h = target_verify(s)
    kept = s.logits[s.accept]  # sync: boolean-mask indexing must learn how many entries survive
    rows = s.accept.nonzero()[:, 0]  # sync: nonzero's output size depends on the data
    out = torch.zeros(s.logits.shape[0], device=s.logits.device).index_add_(0, rows, kept)
    host_prep(s)
    draft(s, h)
    return out


def accepted_scores_masked(s: State) -> torch.Tensor:
    h = target_verify(s)
    out = (s.logits * s.accept).sum(dim=1)  # fixed shape: rejected tokens contribute zero
    host_prep(s)
    draft(s, h)
    return out


# --- 4. host-side planning from device metadata ------------------------------------------------
def plan(qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_lens: torch.Tensor, tile: int = 256) -> list[int]:
    """A planner in the manner of FlashInfer's plan(): it partitions the work on the host, so it
    needs the index arrays as host values. Handed device tensors, it copies each one to the host."""
    qo = qo_indptr.to("cpu")  # sync: device-to-host copy of qo_indptr
    kv = kv_indptr.to("cpu")  # sync: device-to-host copy of kv_indptr
    lens = kv_lens.to("cpu")  # sync: device-to-host copy of kv_lens
    # Work tiles per request: KV chunks of `tile` tokens, at least one per query row group.
    chunks = (lens + tile - 1) // tile
    q_rows = qo[1:] - qo[:-1]
    return (chunks * q_rows.clamp(min=1)).tolist() + [int(kv[-1])]


def plan_verify_device_metadata(s: State) -> list[int]:
    h = target_verify(s)
    draft_tokens = 4
    qo_indptr = torch.arange(s.seq_lens.numel() + 1, device=s.device) * draft_tokens
    kv_indptr = torch.nn.functional.pad(torch.cumsum(s.seq_lens, 0), (1, 0))
    work = plan(qo_indptr, kv_indptr, s.seq_lens)
    host_prep(s)
    draft(s, h)
    return work


def plan_verify_host_metadata(s: State) -> list[int]:
    h = target_verify(s)
    draft_tokens = 4
    # The same index arrays built on the host from the scheduler's mirror: plan() copies nothing.
    qo_indptr = torch.arange(s.seq_lens_cpu.numel() + 1) * draft_tokens
    kv_indptr = torch.nn.functional.pad(torch.cumsum(s.seq_lens_cpu, 0), (1, 0))
    work = plan(qo_indptr, kv_indptr, s.seq_lens_cpu)
    host_prep(s)
    draft(s, h)
    return work


# --- 5. a device tensor built from a Python list ----------------------------------------------
def draft_lens_from_list(s: State) -> torch.Tensor:
    h = target_verify(s)
    n = s.seq_lens_cpu.numel()
    draft_tokens = 4
    lens = torch.tensor([draft_tokens] * n, dtype=torch.int32, device=s.device)  # sync: pageable list copied with a stream sync
    host_prep(s)
    draft(s, h)
    return lens


def draft_lens_full(s: State) -> torch.Tensor:
    h = target_verify(s)
    n = s.seq_lens_cpu.numel()
    draft_tokens = 4
    lens = torch.full((n,), draft_tokens, dtype=torch.int32, device=s.device)  # a fill kernel, no host copy
    host_prep(s)
    draft(s, h)
    return lens


# --- 6. split sizes read on the host before a collective ---------------------------------------
def _exchange(send: torch.Tensor, recv: torch.Tensor, splits: Optional[list[int]]) -> torch.Tensor:
    """all_to_all_single where a process group is up; on one rank the exchange is the identity."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_to_all_single(recv, send, splits, splits)
        return recv
    return send


def dispatch_with_host_splits(s: State) -> torch.Tensor:
    h = target_verify(s)
    e, x, n_exp = s.expert_ids, s.tokens, s.scale.experts
    counts = torch.zeros(n_exp, dtype=torch.int64, device=x.device).scatter_add_(0, e, torch.ones_like(e))
    order = torch.argsort(e, stable=True)
    send = x.index_select(0, order)
    splits = counts.tolist()  # sync: the host reads the receive counts to size the exchange
    recv = _exchange(send, torch.empty_like(send), splits)
    out = torch.stack([chunk.sum(0) for chunk in recv.split(splits)])
    host_prep(s)
    draft(s, h)
    return out


def dispatch_fixed_capacity(s: State) -> torch.Tensor:
    h = target_verify(s)
    e, x, n_exp = s.expert_ids, s.tokens, s.scale.experts
    cap = x.shape[0]  # worst case per expert: the receive buffer never needs the counts on the host
    onehot = (e.unsqueeze(1) == torch.arange(n_exp, device=x.device)).to(torch.int64)
    slot = onehot.cumsum(0).gather(1, e.unsqueeze(1)).squeeze(1) - 1
    recv = torch.zeros(n_exp * cap, x.shape[1], dtype=x.dtype, device=x.device)
    recv.index_copy_(0, e * cap + slot, x)
    out = recv.view(n_exp, cap, -1).sum(1)
    host_prep(s)
    draft(s, h)
    return out


# --- 7. a pageable copy that only looks non-blocking -------------------------------------------
def seq_lens_to_pageable(s: State) -> torch.Tensor:
    h = target_verify(s)
    new_lens = s.seq_lens + 1
    s.d2h_pageable.copy_(new_lens, non_blocking=True)  # sync: into pageable memory the copy returns only once it has run
    host_prep(s)
    draft(s, h)
    return s.d2h_pageable.clone()


def seq_lens_to_pinned(s: State) -> torch.Tensor:
    h = target_verify(s)
    new_lens = s.seq_lens + 1
    s.d2h_pinned.copy_(new_lens, non_blocking=True)  # pinned: truly asynchronous
    done = torch.cuda.Event() if s.device.type == "cuda" else None
    if done is not None:
        done.record()
    host_prep(s)
    draft(s, h)  # queued before the host waits: the GPU stays busy
    return read_back(s.d2h_pinned, done)


def read_back(buf: torch.Tensor, done) -> torch.Tensor:
    """The by-design wait for a result the host needs, after the next work is queued."""
    with torch.profiler.record_function(READBACK_RANGE):
        if done is not None:
            done.synchronize()
        return buf.clone()
