"""The kinds of host wait: what made the host wait for the GPU, one row per kind.

measure/syncs.py names each wait it finds in a trace by one of these keys (from the framework op
around the blocking call and the call itself, `classify`); every view that shows a wait or its
charge prints the kind's label. Torch-free and pandas-free: the views and the facts read it.

A wait is a wait whatever made it: a sync call (`cudaStreamSynchronize` inside `.item()`), a copy
call that blocks (a D2H into pageable memory returns only after the copy ran, whatever its
`non_blocking` said: CUDA 11's "API synchronization behavior" documents it, 12.x says only "might be
synchronous", and every H200 trace here shows it), an event or stream wait, or an op that reads a
size back before it can allocate its output.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass(frozen=True)
class WaitKind:
    key: str
    label: str       # what views call it
    made_by: str     # the Python that makes it (teaching text; the forms of known_idle.WAIT_FORMS are verify cost cases)


WAIT_KINDS = (
    WaitKind("value_read", "a value read back", "`.item()`, `bool()`/`int()`/`float()` of a tensor, `if tensor:`"),
    WaitKind("size_readback", "a size read back", "`nonzero`, a boolean-mask index, `masked_select`, "
             "`repeat_interleave` without `output_size`, `unique`"),
    WaitKind("copy_to_host", "a copy to the host that waits", "`.cpu()`, `.tolist()`, `.numpy(force=True)`, `.to('cpu')`"),
    WaitKind("copy_to_device", "a blocking copy to the device", "`torch.tensor(data, device=)`, `.to(device)` "
             "or `.cuda()` without `non_blocking=True`"),
    WaitKind("pageable_copy", "a pageable copy that waits inside the copy call",
             "`pageable.copy_(x, non_blocking=True)` from the GPU; a pageable H2D the driver synchronized before staging"),
    WaitKind("event_wait", "an event wait", "`Event.synchronize()`"),
    WaitKind("stream_wait", "a stream wait", "`Stream.synchronize()`"),
    WaitKind("device_sync", "a device sync", "`torch.cuda.synchronize()`"),
    WaitKind("sync_memcpy", "a synchronous memcpy", "`cudaMemcpy` to or from the host (another library's copy; a "
             "device-to-device one does not block)"),
)
KEYS = tuple(k.key for k in WAIT_KINDS)
LABELS = {k.key: k.label for k in WAIT_KINDS}

# ATen ops that read a size back to allocate their output (the innermost op around the wait may be
# the `.item()` they call: any op around it counts).
SIZE_OPS = frozenset({"aten::nonzero", "aten::nonzero_static", "aten::masked_select", "aten::repeat_interleave",
                      "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
                      "aten::unique_dim_consecutive", "aten::argwhere", "aten::nonzero_numpy"})
COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize",
                      "aten::cpu", "aten::lift_fresh_copy"})
VALUE_OPS = frozenset({"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero"})
BY_API = {"event": "event_wait", "stream": "stream_wait", "device": "device_sync", "memcpy": "sync_memcpy"}


def classify(ops: Iterable[str], api_kind: Optional[str], *, copy_direction: Optional[str] = None,
             copy_call_waited: bool = False) -> str:
    """The wait kind of one wait. `ops`: the ATen ops around it (any order); `api_kind`: the sync
    call's kind (measure.syncs.SYNC_KINDS' values) or None where a copy call alone waited;
    `copy_direction`: "DtoH" / "HtoD" of the copy inside its op, where there is one;
    `copy_call_waited`: the wait happened inside a pageable copy call, no sync call of its own."""
    ops = set(ops)
    if ops & SIZE_OPS:
        return "size_readback"
    if copy_call_waited and api_kind is None:
        return "pageable_copy"
    if ops & COPY_OPS:
        return "copy_to_device" if copy_direction == "HtoD" else "copy_to_host"
    if ops & VALUE_OPS:
        return "value_read"
    return of_api(api_kind)


def of_api(api_kind: Optional[str]) -> str:
    """The kind of wait of a bare sync call (measure.syncs.SYNC_KINDS' value; a stream wait where unknown)."""
    return BY_API.get(api_kind or "", "stream_wait")


def label(key: str) -> str:
    """A kind's label; an unknown key (a record from a newer kit) is shown as itself."""
    return LABELS.get(key, key)


def charges_text(charges_json: Optional[str]) -> str:
    """A `wait_charges` value (measure.breakdown.wait_summary: JSON per kind) as one line, largest
    charge first: "a copy to the host that waits 3.00 per step, blocked 3.45 ms, charged 0.83 ms; ...".
    "" where there is none (a run recorded before the kinds were named, or no wait)."""
    import json

    if not charges_json or not isinstance(charges_json, str):
        return ""
    try:
        charges = json.loads(charges_json)
    except ValueError:
        return ""
    if not isinstance(charges, dict):
        return ""
    parts = sorted(((k, v) for k, v in charges.items() if isinstance(v, dict)), key=lambda kv: -float(kv[1].get("charged_ms") or 0))
    return "; ".join(f"{label(k)} {float(v.get('per_step') or 0):.2f} per step, blocked {float(v.get('blocked_ms') or 0):.2f} ms, "
                     f"charged {float(v.get('charged_ms') or 0):.2f} ms" for k, v in parts)
