"""The rules: what each one finds and the one-line fix the gallery teaches for it (gallery/cases.py),
with what the runtime witnesses and torch._dynamo.explain can see of the same line (for the joined view).
One table, read by the finder, the command's output, docs/lint.md and the join with runtime sites.

Every fix is safe under host run-ahead (the host queues work and moves on before the GPU has run
it): a fix that lets the host run ahead says which host buffer it may then not refill, and when
(measure/hazards.py counts the wrong values of each form). A fix that would change what the code does
on some lines is withheld there (`Rule.withheld`, read by `fix_for`)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str
    finds: str  # the source shape, one line
    fix: str  # the fix the gallery teaches, one line
    runtime: str  # what the runtime guard sees of it when the line runs
    graph_break: bool  # torch._dynamo.explain reports a graph break on it (traced on CPU)
    # (statement keyword, why no fix is offered) for lines that open with that keyword
    withheld: tuple[tuple[str, str], ...] = ()


_RULES = (
    Rule("item", "`.item()` on a tensor", "read the host's own copy (sum the scheduler's seq_lens_cpu mirror) "
         "or keep the value on the device", "a D2H copy and a stream sync", True),
    Rule("tolist", "`.tolist()` on a tensor", "keep the values on the device (for split sizes: fixed-capacity "
         "buffers, worst case per expert), or read the host's own mirror; where the host needs the values, read "
         "them once after the next work is queued and keep that wait with `# sync-ok: <reason>`",
         "a D2H copy and a stream sync", True),
    Rule("to_host", "`.cpu()`, `.to('cpu')`, `.numpy(force=True)` of a device tensor (plain `.numpy()` raises on one)", "build the metadata on the host from "
         "the scheduler's mirror and hand host tensors to the planner", "a blocking D2H copy", True),
    Rule("python_scalar", "`int()` / `float()` / `bool()` of a tensor", "read the host mirror, or keep the value a "
         "tensor", "a D2H copy and a stream sync", True),
    Rule("tensor_condition", "`if tensor:` (also `while`, `assert`, `and`/`or`, `not`)", "where the branch only "
         "picks a value, compute both and select on the device: torch.where(cond, x, y) (a branch that raises, "
         "returns or skips work needs the value on the host: keep its wait with `# sync-ok: <reason>`)",
         "a D2H copy and a stream sync, on the branch taken", True,
         withheld=(("assert", "none offered: a Python `assert` reads the value on the host, and a mask would "
                    "drop the check; for an invariant, torch._assert_async(cond) checks it on the device without "
                    "a wait (a failure ends the CUDA context); else move it off the hot path or keep its wait "
                    "with `# sync-ok: <reason>`"),
                   ("while", "none offered: a `while` test decides on the host how many times the body runs, "
                    "which a mask does not; only where a bound on the passes is known on the host can a loop "
                    "of that many masked passes replace it; else keep its wait with `# sync-ok: <reason>`"))),
    Rule("tensor_from_host_data", "`torch.tensor(<list or name>, device=...)`", "torch.full(..., device=) for uniform "
         "values; else a fresh pinned tensor per step copied with non_blocking=True (never refill one pinned buffer "
         "while its copy may be queued: keep one more than the steps the host may run ahead (two for one step), "
         "each refilled only after waiting on its last copy's event)",
         "a blocking H2D copy: cudaMemcpyAsync, then cudaStreamSynchronize, whatever the source memory", False),
    Rule("data_dependent_shape", "`nonzero()`, `masked_select`, `unique`, one-argument `torch.where`",
         "keep the shape fixed: multiply by the mask, or torch.where(mask, x, 0)",
         "a D2H copy of the output size and a stream sync", True),
    Rule("repeat_interleave", "`repeat_interleave` with tensor repeats (or repeats not known to be a Python "
         "number) and no `output_size=`", "pass output_size=<the total of the repeats> where the caller already "
         "knows that total on the host (a host mirror's sum, a size it set): torch.repeat_interleave's "
         "documentation says that, given output_size, it avoids the stream synchronization needed to "
         "calculate the output shape. Only where the total is known: reading it back from the device to "
         "pass it still waits (one read and sync of the two); else bound the "
         "output (gallery/decode_step.py's _owner_of_rows_padded) or keep the wait with `# sync-ok: <reason>`",
         "D2H reads with stream syncs for the output size (and a check that no repeat is negative)", False),
    Rule("boolean_mask", "boolean-mask indexing `x[mask]`", "keep the shape fixed: (x * mask).sum(...) or "
         "torch.where(mask, x, 0)", "a D2H copy of the output size and a stream sync", True),
    Rule("host_mask_on_device", "boolean-mask indexing `x[mask]` with a device mask made from host values "
         "(`.to(device)` / `.cuda()` of a host tensor, or a comparison of one)", "index with the host mask itself, "
         "x[mask_cpu]: since PyTorch #156384 a CPU mask's indices can be copied up without a stream sync "
         "(vLLM #38047 relies on it for indexing; the gallery's host_bool_mask measures whether it syncs on the "
         "recorded torch)", "a D2H copy of the output size and a stream sync", True),
    Rule("unpinned_non_blocking", "`.to(device, non_blocking=True)` / `.copy_(..., non_blocking=True)` to or from "
         "pageable host memory (torch.from_numpy, torch.tensor, a CPU op chain)", "copy through pinned memory "
         "(pin_memory=True). To the device: refill a pinned buffer only after the copy that reads it has run "
         "(wait on an event recorded after that copy before the refill; keep one buffer more than the steps "
         "the host may run ahead, two for one step as pinned_double_buffer does: the wait then usually finds "
         "the copy done, and otherwise blocks, which is safe; or a fresh pinned tensor per step); to the host: "
         "read the pinned buffer only after waiting on an event recorded after the copy, and clone what you "
         "keep before queueing the next copy into it",
         "into pageable memory (D2H) a copy that blocks without any sync call; from it (H2D) no sync call: "
         "the driver may stage the copy, waiting in the call on some machines and sizes", False),
    Rule("blocking_to_device", "`.to(device)` / `.cuda()` of a host tensor without non_blocking=True",
         "make the value on the device (torch.full, torch.arange, device=), or copy from a pinned source with "
         "non_blocking=True and do not refill that source until the copy has run (an event recorded after the "
         "copy, or a fresh pinned tensor per step): the host no longer waits, so it can overwrite the source "
         "before the GPU reads it",
         "a blocking H2D copy: cudaMemcpyAsync, then cudaStreamSynchronize, from pinned memory too", False),
    Rule("tensor_as_number", "a tensor passed where a Python number is expected (`alpha=`, `value=`, "
         "`fill_value=`)", "pass a Python number, or fold the tensor into the op (x + t * y)",
         "a D2H copy and a stream sync inside the op", True),
    Rule("explicit_sync", "`torch.cuda.synchronize()`, `Event.synchronize()`, `Stream.synchronize()`",
         "record an event on each stream whose work the host then needs (torch.cuda.synchronize() waits for all "
         "streams; one event covers one), queue the next work, and wait on those events only where the host "
         "needs the value. "
         "A wait that guards buffer reuse (the host refills a pinned buffer or a graph's staging input only "
         "after the copy that reads it has run) stays: removing it lets the host overwrite the buffer before "
         "the GPU reads it; keep it with `# sync-ok: guards buffer reuse`",
         "a device, stream or event sync", False),
    Rule("sync_ok_without_reason", "`# sync-ok` with no reason", "say why: `# sync-ok: <reason>`",
         "(a comment: nothing runs)", False),
)

RULES: dict[str, Rule] = {r.id: r for r in _RULES}


def fix_for(rule_id: str, code: str, statement: str = "") -> str:
    """The fix to offer for a finding: the rule's fix, or why none is offered where its statement is one
    the rule withholds its fix for. `statement` is the keyword the finder read from the tree (a test
    continued onto later lines keeps it); without it, the first word of the line `code`."""
    rule = get(rule_id)
    words = code.lstrip().replace("(", " ").replace(":", " ").split()
    first = statement or (words[0] if words else "")
    return next((why for keyword, why in rule.withheld if keyword == first), rule.fix)


def get(rule_id: str) -> Rule:
    try:
        return RULES[rule_id]
    except KeyError:
        raise ValueError(f"rule must be one of {', '.join(RULES)}; got {rule_id!r}") from None
