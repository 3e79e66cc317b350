"""The CUDA graphs the card launches by node count: a linear chain of one tiny kernel, and a graph
shaped like a captured decode step. Nodes are counted as captured operations: each elementwise op or
reduction here is one kernel, each same-dtype device copy one memcpy; a side stream forked and joined
inside the capture adds dependencies (edges), not nodes."""
from __future__ import annotations

import torch

DECODE_UNIT_NODES = 5  # add, mul, sum (kernels), copy_ (memcpy), add on the side stream (kernel)


def _capture(body, dev: torch.device) -> torch.cuda.CUDAGraph:
    """`body()` run once eagerly on a side stream (lazy initialisation out of the capture), then captured."""
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        body()
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    torch.cuda.synchronize()
    return g


def linear_graph(nodes: int, dev: torch.device) -> tuple:
    """(the graph, its operands): `nodes` kernels in a chain, each x.add_(1) on a one-element tensor."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1; got {nodes!r}")
    x = torch.zeros(1, device=dev)

    def body():
        for _ in range(nodes):
            x.add_(1)
    return _capture(body, dev), x  # the operands must live as long as the graph


def decode_graph(nodes: int, dev: torch.device) -> tuple:
    """(the graph, its operands): `nodes` (a multiple of DECODE_UNIT_NODES) in units of a decode step's kinds: an add, a mul, a sum
    into a scalar, a device copy, and an add on a side stream forked from and joined to the main one."""
    if nodes < DECODE_UNIT_NODES or nodes % DECODE_UNIT_NODES:
        raise ValueError(f"nodes must be a positive multiple of {DECODE_UNIT_NODES}; got {nodes!r}")
    a, b, c, d = (torch.ones(256, device=dev) for _ in range(4))
    s = torch.zeros((), device=dev)
    side = torch.cuda.Stream()

    def body():
        main = torch.cuda.current_stream()
        for _ in range(nodes // DECODE_UNIT_NODES):
            a.add_(1)
            b.mul_(1.0001)
            torch.sum(a, dim=0, out=s)
            c.copy_(b)
            side.wait_stream(main)
            with torch.cuda.stream(side):
                d.add_(c)
            main.wait_stream(side)
    return _capture(body, dev), (a, b, c, d, s, side)
