"""The rules: what each one finds and the one-line fix the gallery teaches for it (gallery/cases.py),
with what the runtime witnesses and torch._dynamo.explain can see of the same line (for the joined view).
One table, read by the finder, the command's output, docs/lint.md and the join with runtime sites."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str
    finds: str  # the source shape, one line
    fix: str  # the fix the gallery teaches, one line
    runtime: str  # what the runtime guard sees of it when the line runs
    graph_break: bool  # torch._dynamo.explain reports a graph break on it (traced on CPU)


_RULES = (
    Rule("item", "`.item()` on a tensor", "read the host's own copy (sum the scheduler's seq_lens_cpu mirror) "
         "or keep the value on the device", "a D2H copy and a stream sync", True),
    Rule("tolist", "`.tolist()` on a tensor", "keep the sizes on the device: fixed-capacity buffers (worst case "
         "per expert) instead of host split sizes", "a D2H copy and a stream sync", True),
    Rule("to_host", "`.cpu()`, `.to('cpu')`, `.numpy()` of a device tensor", "build the metadata on the host from "
         "the scheduler's mirror and hand host tensors to the planner", "a blocking D2H copy", True),
    Rule("python_scalar", "`int()` / `float()` / `bool()` of a tensor", "read the host mirror, or keep the value a "
         "tensor", "a D2H copy and a stream sync", True),
    Rule("tensor_condition", "`if tensor:` (also `while`, `assert`, `and`/`or`, `not`)", "mask on the device "
         "unconditionally: torch.where(cond, x, 0)", "a D2H copy and a stream sync, on the branch taken", True),
    Rule("tensor_from_host_data", "`torch.tensor(<list or name>, device=...)`", "torch.full(..., device=) for uniform "
         "values; else a fresh pinned tensor per step copied with non_blocking=True (never refill one pinned buffer "
         "while its copy may be queued: keep two, each refilled after its last copy's event)",
         "a pageable H2D copy that waits for the stream", False),
    Rule("data_dependent_shape", "`nonzero()`, `masked_select`, `unique`, one-argument `torch.where`",
         "keep the shape fixed: multiply by the mask, or torch.where(mask, x, 0)",
         "a D2H copy of the output size and a stream sync", True),
    Rule("boolean_mask", "boolean-mask indexing `x[mask]`", "keep the shape fixed: (x * mask).sum(...) or "
         "torch.where(mask, x, 0)", "a D2H copy of the output size and a stream sync", True),
    Rule("unpinned_non_blocking", "`.to(device, non_blocking=True)` / `.copy_(..., non_blocking=True)` to or from "
         "pageable host memory (torch.from_numpy, torch.tensor, a CPU op chain)", "copy through a pinned buffer "
         "(pin_memory=True), then record an event and wait only where the value is needed",
         "into pageable memory (D2H) a copy that blocks without any sync call; from it (H2D) no sync at all, "
         "a staged copy", False),
    Rule("blocking_to_device", "`.to(device)` / `.cuda()` of a host tensor without non_blocking=True",
         "make the value on the device (torch.full, torch.arange, device=), or copy from a pinned source with "
         "non_blocking=True and keep that source alive until the copy has run",
         "a blocking H2D copy: cudaMemcpyAsync, then cudaStreamSynchronize, from pinned memory too", False),
    Rule("tensor_as_number", "a tensor passed where a Python number is expected (`alpha=`, `value=`, "
         "`fill_value=`)", "pass a Python number, or fold the tensor into the op (x + t * y)",
         "a D2H copy and a stream sync inside the op", True),
    Rule("explicit_sync", "`torch.cuda.synchronize()`, `Event.synchronize()`, `Stream.synchronize()`",
         "record an event, queue the next work, and wait on the event only where the host needs the value",
         "a device, stream or event sync", False),
    Rule("sync_ok_without_reason", "`# sync-ok` with no reason", "say why: `# sync-ok: <reason>`",
         "(a comment: nothing runs)", False),
)

RULES: dict[str, Rule] = {r.id: r for r in _RULES}


def get(rule_id: str) -> Rule:
    try:
        return RULES[rule_id]
    except KeyError:
        raise ValueError(f"rule must be one of {', '.join(RULES)}; got {rule_id!r}") from None
