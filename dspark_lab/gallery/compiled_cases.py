"""A compiled step in the gallery: `.item()` inside a `torch.compile`d function, compiled as Dynamo
does by default (a graph break at the `.item()`) and with `torch._dynamo.config.capture_scalar_outputs`
(no graph break: the scalar is read inside the compiled code). Either way the host needs the number,
so either way it waits: capture_scalar_outputs removes the graph break, not the sync. The fix keeps
the sum on the device and takes the count the host needs from the host mirror.

On CUDA the functions are compiled by Inductor (the default backend); elsewhere by Dynamo alone
(backend "eager": no compiler needed, so the CPU tests trace the same code). `compiled()` says which.
"""
from __future__ import annotations

from typing import Callable

import torch

from dspark_lab.gallery.cases import State, draft, host_prep, target_verify

_COMPILED: dict = {}


def backend_for(device: torch.device) -> str:
    return "inductor" if device.type == "cuda" else "eager"


def compiled(fn: Callable, device: torch.device, *, capture_scalars: bool = False) -> Callable:
    """`fn` compiled once per (function, backend, capture_scalars); the config applies at trace time,
    so it is set around every call (a recompile would trace under it too)."""
    key = (fn, backend_for(device), capture_scalars)
    if key not in _COMPILED:
        inner = torch.compile(fn, backend=key[1], dynamic=False)

        def call(*args):
            with torch._dynamo.config.patch(capture_scalar_outputs=capture_scalars):
                return inner(*args)
        _COMPILED[key] = call
    return _COMPILED[key]


def token_count_read_back(seq_lens: torch.Tensor) -> int:
    return seq_lens.sum().item() + 0  # sync: .item() inside the compiled function


def token_count_read_back_captured(seq_lens: torch.Tensor) -> int:
    return seq_lens.sum().item() + 0  # sync: read inside the compiled graph: no graph break, the same wait


def token_sum_on_device(seq_lens: torch.Tensor) -> torch.Tensor:
    return seq_lens.sum()


def compiled_item_graph_break(s: State) -> int:
    h = target_verify(s)
    n = compiled(token_count_read_back, s.device)(s.seq_lens)
    host_prep(s)
    draft(s, h)
    return int(n)


def compiled_item_captured(s: State) -> int:
    h = target_verify(s)
    n = compiled(token_count_read_back_captured, s.device, capture_scalars=True)(s.seq_lens)
    host_prep(s)
    draft(s, h)
    return int(n)


def compiled_sum_host_mirror(s: State) -> int:
    h = target_verify(s)
    total = compiled(token_sum_on_device, s.device)(s.seq_lens)  # stays on the device for the GPU's use
    n = int(s.seq_lens_cpu.sum())  # the count the host needs, from its mirror
    host_prep(s)
    draft(s, h + total.to(h.dtype) * 0)
    return n


_WHY = ("Inside a `torch.compile`d function `.item()` still reads a number back. By default Dynamo breaks the "
        "graph there and runs the `.item()` eagerly; with `torch._dynamo.config.capture_scalar_outputs = True` the "
        "read happens inside the compiled code and the graph break is gone, but the host still needs the value, "
        "so it still waits for the queued work. The fix keeps the sum on the device and takes the count from the "
        "host mirror. The guard, inspect and the cost rule count and charge a compiled step's syncs as they do an "
        "eager step's, since they watch the CUDA calls; the line they name is where the read ran, which with "
        "capture_scalar_outputs is a line of Inductor's generated module, not the compiled function's.")
COMPILED_CASES = (
    dict(name="compiled_item", shape="compiled code: .item() in a torch.compile'd function (a graph break)",
         step=compiled_item_graph_break, fix=compiled_sum_host_mirror,
         pr="no single PR: the kit's compiled step (torch.compile's default capture_scalar_outputs=False)",
         why=_WHY, expected_syncs=1, expected_d2h=1, helpers=(token_count_read_back,)),
    dict(name="compiled_item_captured", shape="compiled code: .item() with capture_scalar_outputs (no graph break)",
         step=compiled_item_captured, fix=compiled_sum_host_mirror,
         pr="no single PR: the kit's compiled step under torch._dynamo.config.capture_scalar_outputs=True",
         why=_WHY, expected_syncs=1, expected_d2h=1, helpers=(token_count_read_back_captured,)),
)
