"""How the MoE joins the ranks: three dispatch modes, side by side, as SGLang's MoE backends do it.

Each mode is a function `(x, weights, ids, moe, group) -> out` where `x` is this rank's [T, hidden]
rows (padded to the capture bucket), `weights`/`ids` its top-k routing (padded rows carry id -1
and weight 0, see draft.route_top_k), and `moe` holds this rank's local experts
(`moe.w_in[l]` is global expert `moe.expert_lo + l`). The result is this rank's [T, hidden] output.

  allreduce    MoE all-to-all backend "none": tokens replicated on every rank (an all-gather, as
               ranks may hold different batches), each rank runs its local experts, rows with id -1
               contribute nothing, one all-reduce per MoE layer (`token_dispatcher/standard.py`,
               `FusedMoE.forward_impl` in sglang 0.5.23).
  a2a_fixed    fixed-capacity buffers [local_experts, capacity x ranks, hidden], slots assigned on
               the GPU by a cumulative sum: no host read, graph-capturable (DeepEP low-latency-like).
  a2a_dynamic  per-destination counts exchanged, then READ ON THE HOST (`.tolist()`) to size a
               split all-to-all: two host syncs per layer, eager only (DeepEP normal-mode-like).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dspark_lab.predicate import DISPATCH_MODES

# Modes whose collectives have fixed sizes known at capture time (a CUDA graph can hold them).
GRAPH_CAPTURABLE = {"allreduce": True, "a2a_fixed": True, "a2a_dynamic": False}


@dataclass
class DispatchCounters:
    """What the dispatch did, for tests and notebooks. `host_reads` counts device-to-host reads of
    split sizes (always counted: a Python int). Row counts are device tensors accumulated without a
    host read, and only while `enabled` (they cost kernels)."""

    enabled: bool = False
    host_reads: int = 0
    rows: dict = field(default_factory=dict)  # name -> accumulated device tensor

    def add(self, name: str, value: torch.Tensor) -> None:
        if self.enabled:
            prev = self.rows.get(name)
            self.rows[name] = value.detach().clone() if prev is None else prev + value

    def value(self, name: str) -> int:
        v = self.rows.get(name)
        return 0 if v is None else int(v)

    def reset(self) -> None:
        self.host_reads = 0
        self.rows = {}


COUNTERS = DispatchCounters()


def check_mode(mode: str) -> str:
    if mode not in DISPATCH_MODES:
        raise ValueError(f"dispatch must be one of {', '.join(DISPATCH_MODES)}; got {mode!r}")
    return mode


def _ffn(x: torch.Tensor, moe, l: int) -> torch.Tensor:
    return F.silu(x @ moe.w_in[l]) @ moe.w_out[l]


def _count(ids_flat: torch.Tensor, sent: torch.Tensor, k: int, n_real) -> None:
    """Count (row, expert) pairs dispatched, and those from padded rows (must stay 0)."""
    if not COUNTERS.enabled:
        return
    COUNTERS.add("pairs_sent", sent.sum())
    if n_real is not None:
        rows = torch.arange(ids_flat.shape[0], device=ids_flat.device) // k
        COUNTERS.add("padded_pairs_sent", (sent & (rows >= n_real)).sum())


def _all_gather(t: torch.Tensor, group) -> torch.Tensor:
    world = dist.get_world_size(group)
    out = t.new_empty((world * t.shape[0],) + tuple(t.shape[1:]))
    with warnings.catch_warnings():  # torch 2.13 renames the *_tensor collectives
        warnings.simplefilter("ignore", FutureWarning)
        dist.all_gather_into_tensor(out, t.contiguous(), group=group)
    return out


def allreduce(x, weights, ids, moe, group, n_real=None):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    T, k = ids.shape
    xs, ws, es = _all_gather(x, group), _all_gather(weights, group), _all_gather(ids, group)
    L = moe.w_in.shape[0]
    # Every routed pair of this rank's rows reaches every rank (the padded ones carry id -1).
    _count(ids.reshape(-1), (ids >= 0).reshape(-1), k, n_real)
    out = torch.zeros_like(xs)
    for l in range(L):
        w_e = (ws * (es == moe.expert_lo + l)).sum(-1, keepdim=True)
        out = out + w_e * _ffn(xs, moe, l)
    dist.all_reduce(out, group=group)
    return out[rank * T:(rank + 1) * T]


def _slots(ids_flat: torch.Tensor, experts: int):
    """Slot of each (row, expert) pair in its expert's buffer, computed on the device."""
    valid = ids_flat >= 0
    e = ids_flat.clamp(min=0)
    onehot = (e[:, None] == torch.arange(experts, device=e.device)) & valid[:, None]
    slot = (onehot.long().cumsum(0) - 1).gather(1, e[:, None]).squeeze(1)
    return valid, e, slot


def a2a_fixed(x, weights, ids, moe, group, n_real=None):
    world = dist.get_world_size(group)
    T, k = ids.shape
    H = x.shape[1]
    L = moe.w_in.shape[0]
    E = L * world
    cap = T  # top-k ids of a row are distinct: a rank sends at most T rows to one expert
    ids_flat = ids.reshape(-1)
    valid, e, slot = _slots(ids_flat, E)
    _count(ids_flat, valid, k, n_real)
    # Global expert e = dest * L + l, so [E, cap] is [world, L, cap]: one even split per rank.
    index = torch.where(valid, e * cap + slot, torch.full_like(e, E * cap))  # invalid -> a dump row
    rows = torch.arange(T * k, device=x.device) // k
    send = x.new_zeros(E * cap + 1, H)
    send.index_copy_(0, index, x[rows])
    recv = torch.empty_like(send[: E * cap])
    dist.all_to_all_single(recv, send[: E * cap], group=group)
    recv = recv.view(world, L, cap, H)
    y = torch.stack([_ffn(recv[:, l].reshape(-1, H), moe, l).view(world, cap, H) for l in range(L)], 1)
    back = torch.empty_like(recv).view(E * cap, H)
    dist.all_to_all_single(back, y.reshape(E * cap, H).contiguous(), group=group)
    back = torch.cat([back, back.new_zeros(1, H)])
    return (back[index] * weights.reshape(-1, 1)).view(T, k, H).sum(1)


def a2a_dynamic(x, weights, ids, moe, group, n_real=None):
    world = dist.get_world_size(group)
    T, k = ids.shape
    H = x.shape[1]
    L = moe.w_in.shape[0]
    ids_flat = ids.reshape(-1)
    valid = ids_flat >= 0
    dest = torch.where(valid, ids_flat // L, torch.full_like(ids_flat, world))
    _count(ids_flat, valid, k, n_real)
    order = torch.sort(dest, stable=True).indices  # by destination; invalid pairs last
    send_counts = (dest[:, None] == torch.arange(world, device=x.device)).sum(0)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    # The hidden sync: split sizes must be host integers before the all-to-all can be issued.
    send_splits = send_counts.tolist()
    recv_splits = recv_counts.tolist()
    COUNTERS.host_reads += 2
    sel = order[: sum(send_splits)]
    send_x = x[sel // k]
    send_l = ids_flat[sel] - dest[sel] * L
    recv_x = x.new_empty(sum(recv_splits), H)
    recv_l = send_l.new_empty(sum(recv_splits))
    dist.all_to_all_single(recv_x, send_x, recv_splits, send_splits, group=group)
    dist.all_to_all_single(recv_l, send_l, recv_splits, send_splits, group=group)
    y = torch.zeros_like(recv_x)
    for l in range(L):
        y = y + (recv_l == l)[:, None].to(y.dtype) * _ffn(recv_x, moe, l)
    back = x.new_empty(sel.shape[0], H)
    dist.all_to_all_single(back, y, send_splits, recv_splits, group=group)
    out = torch.zeros_like(x)
    out.index_add_(0, sel // k, back * weights.reshape(-1)[sel, None])
    return out


MODES: dict[str, Callable] = {"allreduce": allreduce, "a2a_fixed": a2a_fixed, "a2a_dynamic": a2a_dynamic}


def dispatch(mode: str, x, weights, ids, moe, group, n_real=None) -> torch.Tensor:
    return MODES[check_mode(mode)](x, weights, ids, moe, group, n_real)
