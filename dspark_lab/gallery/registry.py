"""The gallery's cases: name -> Case with the step, its fix, the PR, why it syncs, and the
documented count of host syncs per step for each.

"Host syncs" here is what the guard counts and the gallery checks: host-blocking CUDA API calls
outside the by-design readback (`syncs_per_step` of a measurement) plus device-to-host copies into
pageable memory that block without any sync call (`blocking_copies_per_step`; see
`dspark_lab.guard.unsynced_pageable_d2h`).
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dspark_lab.gallery import cases as C
from dspark_lab.gallery import compiled_cases, counter_cases, field_cases, spec_cases
from dspark_lab.gallery.race_cases import CASES as RACE_CASES  # noqa: F401 -- the races a fix can cause (their own step shape)
from dspark_lab.results.facts.citations import cite

SYNC_MARK = re.compile(r"#\s*sync:\s*(?P<what>.*)$")


@dataclass(frozen=True)
class Case:
    name: str
    shape: str  # the family of pitfall, one line
    step: Callable[[C.State], object]
    fix: Callable[[C.State], object]
    pr: str  # where the shape and the fix come from
    why: str  # one paragraph
    expected_syncs: int  # host syncs per step of `step`, documented
    expected_d2h: int  # device-to-host copies per step of `step`
    fix_expected_syncs: int = 0
    fix_expected_d2h: int = 0
    allow: tuple[str, ...] = ()  # by-design syncs of the fix (guard allow-list patterns)
    helpers: tuple[Callable, ...] = ()  # functions the step calls where the sync line sits

    def sites(self) -> list[str]:
        """The documented sync lines, "gallery/cases.py:LINE function", from the `# sync:` comments."""
        out = []
        for fn in (self.step,) + self.helpers:
            lines, first = inspect.getsourcelines(fn)
            for i, text in enumerate(lines):
                if SYNC_MARK.search(text):
                    out.append(f"{_short(inspect.getsourcefile(fn))}:{first + i} {fn.__name__}")
        return out


def _short(path: str) -> str:
    return "/".join(Path(path).parts[-2:])


_CASES = (
    Case(
        "scalar_item", "scalar read-back: .item()",
        C.seq_lens_sum_item, C.seq_lens_sum_from_mirror,
        f"{cite('SGLang', 20266)} (EAGLE-3 verify; {cite('SGLang', 26462)}, closed without merging, proposed the "
        "same on the draft side)",
        "`torch.sum(seq_lens).item()` needs the sum on the host, so the host copies it back and waits "
        "for the stream: for everything queued before it that has not run yet (how long is in the "
        "measured blocked time below). The host then prepares the next launch while the GPU has nothing "
        "to do. The scheduler already keeps the lengths on the host (`seq_lens_cpu`, updated in "
        "lockstep), so the fix sums the mirror: same value, no device round trip.",
        expected_syncs=1, expected_d2h=1,
    ),
    Case(
        "tensor_bool", "scalar read-back: Python bool() of a device tensor",
        C.mask_padded_if_any, C.mask_padded_always,
        "no checked PR: the generic shape (a Python `if` on a device tensor, as in padded-row masking)",
        "`if mask.any():` looks like a cheap check, but Python's `if` calls `bool()` on the tensor, "
        "which reads the value back: a copy and a stream sync, waiting for all queued work, just to "
        "decide whether to run a masking kernel. The fix runs the masking unconditionally on the "
        "device (`torch.where`), which costs a few microseconds of GPU time and no host round trip; "
        "where a host-known condition exists (the scalar is None), branch on that instead.",
        expected_syncs=1, expected_d2h=1,
    ),
    Case(
        "boolean_mask", "data-dependent output size: boolean-mask indexing and nonzero",
        C.accepted_scores_compacted, C.accepted_scores_masked,
        "no single PR: the generic shape (why graph-captured verify paths keep fixed shapes)",
        "The size of `x[mask]` and of `mask.nonzero()` depends on the data, and PyTorch must allocate "
        "the output before the kernel that fills it: it counts the survivors on the GPU, copies the "
        "count to the host and synchronizes, once per call. Keeping the shape fixed (multiply by the "
        "mask, or `torch.where`) gives the same per-request sums with no host involvement, and stays "
        "capturable in a CUDA graph.",
        expected_syncs=2, expected_d2h=2,
    ),
    Case(
        "host_plan", "host-side planning that copies device metadata to the host",
        C.plan_verify_device_metadata, C.plan_verify_host_metadata,
        f"{cite('SGLang', 27689)} (FlashInfer MLA plan() in verify and draft-extend); {cite('vLLM', 52657)} for the prefill planner",
        "A planner that partitions attention work on the host (FlashInfer's `plan()`) needs its index "
        "arrays as host values; given device tensors it calls `.to('cpu')` on each, a blocking "
        "device-to-host copy per array: three per plan here, as in the PR. The scheduler already has "
        "the lengths on the host, so the fix builds the same index arrays there and hands the planner "
        "host tensors: identical plan, no copy.",
        expected_syncs=3, expected_d2h=3, helpers=(C.plan,),
    ),
    Case(
        "list_to_device", "a device tensor built from a Python list",
        C.draft_lens_from_list, C.draft_lens_full,
        f"{cite('SGLang', 32575)} (alloc_for_extend: `torch.tensor([-1], device=...)` replaced by "
        f"`torch.full`); {cite('SGLang', 34782)}'s scalar is the one-element form",
        "`torch.tensor(python_list, device='cuda')` builds the tensor on the CPU and copies it with a "
        "blocking copy, which PyTorch makes `cudaMemcpyAsync` followed by `cudaStreamSynchronize` "
        "(from pinned memory too): the host waits for everything queued before the copy. The fix: when "
        "the values are uniform, `torch.full(..., device='cuda')` writes them with a fill kernel (the "
        "value travels as a kernel argument, no host memory). When they vary, make a fresh pinned "
        "tensor each step (`torch.tensor(values, pin_memory=True)`) and copy it with "
        "`non_blocking=True`: PyTorch's caching host allocator reuses its block only after the copy "
        "has run. Or keep two pinned buffers and refill one only after the event of its last copy. "
        "Never refill one persistent pinned buffer while its copy may still be queued: the copy reads "
        "the buffer when the GPU reaches it (notebook 04's hazards table counts the wrong values).",
        expected_syncs=1, expected_d2h=0,
    ),
    Case(
        "host_split_sizes", "split sizes read on the host before a collective",
        C.dispatch_with_host_splits, C.dispatch_fixed_capacity,
        f"DeepEP normal mode vs low-latency mode; the host/device trade of {cite('vLLM', 24105)}",
        "An all-to-all with variable splits needs the split sizes as Python ints: `counts.tolist()` "
        "copies the per-expert counts to the host and waits for the routing kernels, before the "
        "exchange can even be issued (DeepEP's normal mode waits for the receive counts on the host "
        "the same way). Low-latency mode sends into fixed-capacity buffers (worst case per expert) "
        "and keeps the counts on the device: more memory moved, no host wait. vLLM #24105 made the "
        "mirror-image trade for the DP token counts (a gloo CPU all-reduce replaced by NCCL plus a "
        "read-back). On one process the exchange is the identity; the host read is what is measured.",
        expected_syncs=1, expected_d2h=1,
    ),
    Case(
        "pageable_copy", "a pageable copy that only looks non-blocking",
        C.seq_lens_to_pageable, C.seq_lens_to_pinned,
        "no PR of this exact shape checked; on the same path "
        f"{cite('SGLang', 26128)} / {cite('SGLang', 30365)} / {cite('SGLang', 31364)} removed a per-step pinned device-to-host copy plus a stream "
        "sync (a sync the counters do see)",
        "`host.copy_(dev, non_blocking=True)` into pageable memory returns only once the copy has run "
        "(CUDA 11 documents it; 12.x says only 'might be synchronous'; the H200's card shows it at every "
        "size), so the host waits for all work queued before it, with no sync call anywhere: neither "
        "PyTorch's sync debug mode nor the profiler's sync events see it, only the copy's "
        "'Device -> Pageable' kind in the trace does. The fix copies into a pinned buffer (truly "
        "asynchronous), records an event, queues the next work, and waits on the event only where the "
        "host needs the value (a by-design readback, allowed).",
        expected_syncs=1, expected_d2h=1, fix_expected_d2h=1, allow=("read_back",),
    ),
)

_CASES += tuple(Case(**d) for d in field_cases.FIELD_CASES)  # the cases from the field
_CASES += tuple(Case(**d) for d in spec_cases.SPEC_CASES + counter_cases.COUNTER_CASES + compiled_cases.COMPILED_CASES)
CASES: dict[str, Case] = {c.name: c for c in _CASES}


def names() -> tuple[str, ...]:
    return tuple(CASES)


def get(name: str) -> Case:
    try:
        return CASES[name]
    except KeyError:
        raise ValueError(f"case must be one of {', '.join(CASES)}; got {name!r}") from None
