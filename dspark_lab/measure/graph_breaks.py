"""A second static-ish witness: the graph breaks `torch._dynamo.explain` reports for a step traced on
CPU (no GPU needed). Data-dependent operators break the graph (`.item()` as `aten._local_scalar_dense`,
`nonzero`, `if tensor:`), so a break names a line that will sync on a GPU; a pageable copy makes no
break, so this witness cannot see it (the lint rules table says which rules it sees)."""
from __future__ import annotations

from typing import Callable


# Breaks that are not a sync's: a call dynamo does not trace (time.perf_counter in a host spin).
NOT_A_SYNC = ("marked as skipped",)


def graph_breaks(fn: Callable, *args) -> list[dict]:
    """[{"file", "line", "reason"}] for each graph break of `fn(*args)` that a data-dependent operator
    made (NOT_A_SYNC left out), in the order dynamo met them; RuntimeError when dynamo cannot trace
    here (it is optional: the lint does not need it)."""
    try:
        import torch._dynamo as dynamo
    except ImportError as e:  # a torch without dynamo
        raise RuntimeError(f"torch._dynamo is not available: {e}") from None
    dynamo.reset()
    try:
        out = dynamo.explain(fn)(*args)
    except Exception as e:  # dynamo's own failures come in many types; the caller only needs to know
        raise RuntimeError(f"torch._dynamo.explain could not trace {getattr(fn, '__name__', fn)}: "
                           f"{type(e).__name__}: {str(e)[:200]}") from None
    rows = []
    for b in out.break_reasons:
        if any(m in str(b.reason) for m in NOT_A_SYNC):
            continue
        frame = b.user_stack[-1] if getattr(b, "user_stack", None) else None
        rows.append({"file": getattr(frame, "filename", ""), "line": getattr(frame, "lineno", 0),
                     "reason": str(b.reason).splitlines()[0][:200]})
    return rows
