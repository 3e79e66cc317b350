"""More of the gallery, from speculative-decoding engines: six pitfalls in the metadata a verify or
draft step builds, each beside the fix its PR (or issue) proposed.

Each step has the shape of `cases.py`'s: it takes the gallery's state (whose scale sets the GPU work
queued before the pitfall), queues that work, does the pitfall or its fix, some host preparation,
then the next GPU work. Each sync line carries a `# sync:` comment; `SPEC_CASES` holds each case's
description (the keyword arguments of `registry.Case`), registered in `registry.py`. The numbers
quoted are the PRs' own, on their machines; what the syncs cost here is the recording's to say.

Re-implemented from the PRs' descriptions; no upstream code is copied.
"""
from __future__ import annotations

import torch

from dspark_lab.gallery.cases import State, draft, host_prep, target_verify

PAGE = 64  # tokens per KV page
MAX_CONTEXT_LEN = 4096  # the engine's static bound on a request's length (make_state draws below it)
MAX_PAGES = (MAX_CONTEXT_LEN + PAGE - 1) // PAGE
LONG = 2048  # requests at least this long take the second metadata path (the boolean mask's rows)


# --- SGLang #26171: the draft side's torch.sum(seq_lens).item() --------------------------------
def draft_extend_sum_item(s: State) -> int:
    h = target_verify(s)
    d = draft(s, h)  # the draft forward, queued behind the verify
    num_tokens = torch.sum(s.seq_lens).item()  # sync: .item() waits for the verify and the draft queued before it
    host_prep(s)
    draft(s, d)
    return int(num_tokens)


def draft_extend_sum_from_mirror(s: State) -> int:
    h = target_verify(s)
    d = draft(s, h)
    num_tokens = int(s.seq_lens_cpu.sum())  # the host mirror the scheduler keeps in lockstep
    host_prep(s)
    draft(s, d)
    return num_tokens


# --- SGLang #28480: the page table's width from the lengths' maximum, read back ----------------------
def _pages_per_request(s: State, width: int) -> torch.Tensor:
    """A page table `width` pages wide filled on the device (-1 past each request's last page); the
    pages each request holds, which do not depend on the width as long as it covers the longest."""
    cols = torch.arange(width, device=s.device)
    table = torch.where(cols < ((s.seq_lens + PAGE - 1) // PAGE).unsqueeze(1), cols, -1)
    return (table >= 0).sum(1)


def page_table_width_read_back(s: State) -> torch.Tensor:
    h = target_verify(s)
    max_len = s.seq_lens.cpu().max().item()  # sync: the lengths copied to the host for their maximum
    pages = _pages_per_request(s, (int(max_len) + PAGE - 1) // PAGE)
    host_prep(s)
    draft(s, h)
    return pages


def page_table_width_static_bound(s: State) -> torch.Tensor:
    h = target_verify(s)
    pages = _pages_per_request(s, MAX_PAGES)  # the static bound: wider than needed, known without a read
    host_prep(s)
    draft(s, h)
    return pages


# --- SGLang #28106 (and #27177's GPU .max()): metadata sized by a device tensor ------------------------
def kv_indices_sized_by_device_max(s: State) -> torch.Tensor:
    h = target_verify(s)
    n_pages = (s.seq_lens + PAGE - 1) // PAGE
    width = n_pages.max()  # a 0-dim device tensor: no line here says .item()
    kv_indices = torch.full((n_pages.numel(), width), -1, device=s.device)  # sync: a device tensor as a size is read back
    cols = torch.arange(kv_indices.shape[1], device=s.device)
    kv_indices.copy_(torch.where(cols < n_pages.unsqueeze(1), cols, -1))
    host_prep(s)
    draft(s, h)
    return (kv_indices >= 0).sum(1)


def kv_indices_static_bound_device_fill(s: State) -> torch.Tensor:
    h = target_verify(s)
    n_pages = (s.seq_lens + PAGE - 1) // PAGE
    kv_indices = torch.full((n_pages.numel(), MAX_PAGES), -1, device=s.device)  # sized by the static bound
    cols = torch.arange(MAX_PAGES, device=s.device)
    kv_indices.copy_(torch.where(cols < n_pages.unsqueeze(1), cols, -1))  # the device fills the entries
    host_prep(s)
    draft(s, h)
    return (kv_indices >= 0).sum(1)


# --- vLLM #38047: a boolean mask on the device, where the host holds the same mask ---------------------
def long_rows_device_mask(s: State) -> torch.Tensor:
    h = target_verify(s)
    long_mask = s.seq_lens >= LONG
    kept = s.logits[long_mask]  # sync: a device mask: the host must learn how many rows survive
    host_prep(s)
    draft(s, h)
    return kept.sum(0)


def long_rows_host_mask(s: State) -> torch.Tensor:
    h = target_verify(s)
    long_mask_cpu = s.seq_lens_cpu >= LONG  # the same mask from the host mirror
    kept = s.logits[long_mask_cpu]  # a host mask: the count is known on the host (PyTorch #156384)
    host_prep(s)
    draft(s, h)
    return kept.sum(0)


# --- vLLM #32951: the host reads the accepted counts before it schedules the next step -----------------
def next_lens_after_read_back(s: State) -> torch.Tensor:
    h = target_verify(s)
    accepted = s.accept.sum(1).tolist()  # sync: the host waits to learn how many drafts each request kept
    next_lens = torch.tensor([n + a + 1 for n, a in zip(s.seq_lens_cpu.tolist(), accepted)])
    host_prep(s)
    draft(s, h)
    return next_lens


def next_lens_assumed_accepted(s: State) -> torch.Tensor:
    h = target_verify(s)
    draft_len = s.accept.shape[1]
    planned = torch.empty(s.seq_lens_cpu.numel(), dtype=torch.int64, pin_memory=s.device.type == "cuda")
    torch.add(s.seq_lens_cpu, draft_len + 1, out=planned)  # planned as if every draft were accepted: a bound
    rejected = draft_len - s.accept.sum(1)  # the device corrects by the rejected count, in stream order
    next_lens = planned.to(s.device, non_blocking=True) - rejected
    host_prep(s)
    draft(s, h)
    return next_lens


# --- vLLM #20078: the draft's inputs prepared on the host from read-back counts ------------------------
def draft_inputs_on_host(s: State) -> torch.Tensor:
    h = target_verify(s)
    accepted = s.accept.sum(1).cpu()  # sync: the accepted counts copied to the host
    starts = torch.cumsum(s.seq_lens_cpu, 0) - s.seq_lens_cpu
    last = (starts + accepted).tolist()  # host values: the last accepted token of each request
    idx = torch.tensor(last, device=s.device)  # sync: a pageable copy and a stream sync
    host_prep(s)
    draft(s, h)
    return idx


def draft_inputs_on_device(s: State) -> torch.Tensor:
    h = target_verify(s)
    starts = torch.cumsum(s.seq_lens, 0) - s.seq_lens
    idx = starts + s.accept.sum(1)  # the same indices made by device kernels: nothing read back
    host_prep(s)
    draft(s, h)
    return idx


# --- the descriptions: keyword arguments of registry.Case, registered in registry.py ---------------
SPEC_CASES = (
    dict(
        name="draft_sum_item", shape="scalar read-back on the draft side: torch.sum(seq_lens).item() after the draft is queued",
        step=draft_extend_sum_item, fix=draft_extend_sum_from_mirror,
        pr="SGLang #26171 (an issue, closed as inactive: EAGLE-3 on Blackwell; the PR it proposed, #26462, was closed unmerged)",
        why="On the draft side the host read `torch.sum(batch.seq_lens).item()` once the draft forward was queued, "
            "so it waited for the verify and the draft both. The issue proposed `int(batch.seq_lens_cpu.sum())`, the "
            "host mirror the scheduler already keeps, as the fix, and reported 1.00 -> 1.38x on humaneval; the PR that made the "
            "change was closed without merging. Here the sum is read after the draft is queued, as there.",
        expected_syncs=1, expected_d2h=1,
    ),
    dict(
        name="max_len_static_bound", shape="a maximum read back to size metadata where a static bound would do",
        step=page_table_width_read_back, fix=page_table_width_static_bound,
        pr="SGLang #28480 (closed; B300, TP4: seq_lens_cpu.max().item() replaced by max_context_len)",
        why="The host read the lengths' maximum to size the page table each verify cycle, a copy to the host that "
            "waits for the queued forward. Any upper bound would do, and the fix uses the engine's static one, "
            "`max_context_len`: the table is wider, its entries past each request's pages are -1, and nothing is "
            "read back. The PR reports 458 -> 521 tok/s and syncs per verify cycle 4 -> 3; it was closed.",
        expected_syncs=1, expected_d2h=1,
    ),
    dict(
        name="size_from_device_max", shape="metadata sized by a 0-dim device tensor: a sync in disguise",
        step=kv_indices_sized_by_device_max, fix=kv_indices_static_bound_device_fill,
        pr="SGLang #28106 (merged: metadata sized from a static upper bound, a device-side kernel filling the "
           "entries); the closed SGLang #27177 fell back to a GPU .max()",
        why="Sizing a buffer by `n_pages.max()` looks sync-free because no line says `.item()`, but a tensor "
            "passed as a size is converted to a Python int, a read-back and a stream sync: the GPU `.max()` of "
            "SGLang #27177 kept the sync it meant to remove. The fix of SGLang #28106 sizes the buffer from a static upper bound and lets a "
            "device kernel fill the entries. Lint cannot see the disguise (no `.item()` on the line); the guard can.",
        expected_syncs=1, expected_d2h=1,
    ),
    dict(
        name="host_bool_mask", shape="boolean-mask indexing with a device mask the host also holds",
        step=long_rows_device_mask, fix=long_rows_host_mask,
        pr="vLLM #38047 (merged: GDNAttentionMetadata.build's boolean masks moved to the CPU, relying on PyTorch #156384)",
        why="`x[mask]` with a device mask must count the surviving rows on the GPU and copy the count to the host "
            "before it can size the output: a sync. Built from the host's own lengths, the same mask is a CPU "
            "tensor, and indexing with a CPU boolean mask can run without a sync since PyTorch #156384. The PR "
            "verified in a torch profile that the syncs were gone and reports 7% more throughput and 20% lower "
            "TTFT. Whether the host mask syncs on the recorded torch is what the fix's measured count says.",
        expected_syncs=1, expected_d2h=1,
    ),
    dict(
        name="assume_accepted", shape="the host waits for the accepted counts before it plans the next step",
        step=next_lens_after_read_back, fix=next_lens_assumed_accepted,
        pr="vLLM #32951 (the CPU assumes every draft accepted, the GPU corrects)",
        why="To plan the next step the host read how many draft tokens each request accepted (`.tolist()`), "
            "waiting for the verify. The PR's fix lets the host plan as if every draft were accepted, an upper bound it "
            "knows without a read, and has the GPU subtract the rejected count in stream order. It reports TPOT "
            "9.19 -> 8.90 ms.",
        expected_syncs=1, expected_d2h=1,
    ),
    dict(
        name="draft_inputs_prep", shape="the draft's input indices prepared on the host from read-back counts",
        step=draft_inputs_on_host, fix=draft_inputs_on_device,
        pr="vLLM #20078 (closed unmerged: EAGLE input preparation moved to the GPU)",
        why="The host copied the accepted counts back (`.cpu()`), computed each request's last accepted token "
            "and copied the indices to the device with `torch.tensor(list, device=)`: a read-back and a blocking "
            "copy, two syncs. The fix makes the same indices with device kernels from the device counts: no host. The "
            "PR reports about 4-5% for two optimisations together and about 2.5% from the fused kernels alone; "
            "it was closed unmerged.",
        expected_syncs=2, expected_d2h=1,
    ),
)
