"""The ways to make the per-step int32 scalar `num_token_non_padded`.

Each strategy is a function `(num_tokens, device, parallel, *, buffer=None) -> Tensor | None`.
`buffer` is a persistent int32 device scalar owned by the caller; only `persistent_fill` uses it.
The lines that allocate or copy are kept one per strategy so that sync attribution (which names
the file and line that caused a sync) points at exactly one of them.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional

import torch

from dspark_lab.predicate import ParallelSettings, enable_num_token_non_padded
from dspark_lab.results.facts import strategy_table
# Every function here of the strategy signature is a built-in, bound to its table row at import (bind).


def device_direct(num_tokens: int, device, parallel: ParallelSettings, *, buffer=None):
    """`torch.tensor(n, device=...)`: a blocking host-to-device copy, so a stream sync every call.

    PyTorch builds the tensor on the CPU and moves it with `.to(device, non_blocking=False)`; every
    blocking host<->device copy is a `cudaMemcpyAsync` followed by `cudaStreamSynchronize`, from
    pinned memory too (the card's blocking pinned copy waits for the whole queue). SGLang #34782's
    profile shows 21 such syncs, 71.4 ms of host-blocked time (42% of an 8.4 ms step): time the host
    could not run ahead, which costs step time only where the GPU then waits for the host.
    """
    return torch.tensor(num_tokens, dtype=torch.int32, device=device)


def non_blocking(num_tokens: int, device, parallel: ParallelSettings, *, buffer=None):
    """Pageable host tensor, `.to(device, non_blocking=True)`: SGLang #34782's fix, no stream sync.

    The pageable temporary is freed at once. That was safe under run-ahead on the recorded H200 (the
    hazards record: the driver had copied or staged the source before the call returned), a measurement rather
    than a CUDA guarantee: CUDA promises a return only once staged for a synchronous copy, and says
    that for an asynchronous one from pageable memory the driver may synchronize and stage. Whether
    the call then waits for queued work depends on the machine and on the copy's size (the platform
    card); at 4 bytes on the recorded H200 card it returns at once.
    """
    return torch.tensor(num_tokens, dtype=torch.int32).to(device, non_blocking=True)


def on_demand(num_tokens: int, device, parallel: ParallelSettings, *, buffer=None):
    """None unless a consumer reads it (SGLang #34759, fixing SGLang #33465's EP-1 regression); else
    SGLang #34782's non-blocking copy from a pageable host tensor."""
    if not enable_num_token_non_padded(parallel):
        return None
    return torch.tensor(num_tokens, dtype=torch.int32).to(device, non_blocking=True)


def on_demand_pinned(num_tokens: int, device, parallel: ParallelSettings, *, buffer=None):
    """On demand from a pinned host tensor, as SGLang 0.5.23's `_make_num_token_non_padded`."""
    if not enable_num_token_non_padded(parallel):
        return None
    pinned = torch.device(device).type == "cuda"  # SGLang: is_pin_memory_available(device)
    return torch.tensor(num_tokens, dtype=torch.int32, pin_memory=pinned).to(device, non_blocking=True)


def persistent_fill(num_tokens: int, device, parallel: ParallelSettings, *, buffer=None):
    """A persistent device scalar updated in place with `fill_`: a kernel launch, no host copy
    (`fill_(n)` passes the Python int as a kernel argument).

    Graph-safe only while the `fill_` runs before `replay()`, outside the graph: the graph holds the
    buffer's address and reads this step's value. A `fill_` captured in the graph records n as a
    kernel argument and replays that value forever (the hazards' graph_python_value form).
    SGLang 0.5.23 keeps such buffers for graph inputs.
    """
    if buffer is None:
        buffer = torch.zeros((), dtype=torch.int32, device=device)
    return buffer.fill_(num_tokens)

StrategyFn = Callable[..., Optional[torch.Tensor]]
StrategyRow, StrategyTableError = strategy_table.StrategyRow, strategy_table.StrategyTableError
STRATEGY_PARAMETERS = ("num_tokens", "device", "parallel")  # what makes a function of this module a strategy


@dataclass(frozen=True)
class Strategy:
    name: str
    fn: StrategyFn
    description: str  # one line, for widgets and the CLI
    source: str  # the PR or release it comes from

    @classmethod
    def of(cls, fn: StrategyFn, row: StrategyRow) -> "Strategy":
        return cls(row.name, fn, row.description, row.source)


def strategy_functions(namespace: dict, module: str) -> list[StrategyFn]:
    """The functions defined in `module` (its namespace) whose first parameters are a strategy's."""
    return [f for f in namespace.values() if callable(f) and getattr(f, "__module__", None) == module
            and getattr(getattr(f, "__code__", None), "co_varnames", ())[:3] == STRATEGY_PARAMETERS]


def bind(functions: Iterable[StrategyFn], rows: Iterable[StrategyRow]) -> dict[str, Strategy]:
    """name -> Strategy, each function paired with the row of its name, in the rows' order;
    StrategyTableError naming the strategy when a function has no row or a row has no function."""
    fns = {f.__name__: f for f in functions}
    by_name = {r.name: r for r in rows}
    no_row = [n for n in fns if n not in by_name]
    if no_row:
        raise StrategyTableError(f"strategy {', '.join(map(repr, no_row))} has a function in strategies.py but no "
                                 "row in results/facts/strategy_table.py (BUILTIN_ROWS): add its row there")
    no_fn = [n for n in by_name if n not in fns]
    if no_fn:
        raise StrategyTableError(f"strategy {', '.join(map(repr, no_fn))} has a row in results/facts/"
                                 "strategy_table.py (BUILTIN_ROWS) but no function of that name in strategies.py")
    return {n: Strategy.of(fns[n], r) for n, r in by_name.items()}


_REGISTRY: dict[str, Strategy] = bind(strategy_functions(dict(globals()), __name__), strategy_table.BUILTIN_ROWS)
BUILTIN = tuple(_REGISTRY)


def register(fn: StrategyFn, row: StrategyRow) -> Strategy:
    """Add a strategy by its function and its row (StrategyTableError when the row does not fit); it
    then appears wherever the table is read: the CLI's choices, the figures, the card and the advice."""
    if not callable(fn):
        raise StrategyTableError(f"strategy {getattr(row, 'name', row)!r}: its function must be callable; got {fn!r}")
    strategy_table.add(row)
    _REGISTRY[row.name] = Strategy.of(fn, row)
    return _REGISTRY[row.name]


@contextmanager
def registered(fn: StrategyFn, row: StrategyRow) -> Iterator[Strategy]:
    """`register(fn, row)` for the block only: the table and the registry are as before afterwards."""
    with restored():
        yield register(fn, row)


@contextmanager
def restored() -> Iterator[None]:
    """What is registered inside the block is undone after it (tests register freely)."""
    rows_before, registry_before = strategy_table.rows(), dict(_REGISTRY)
    try:
        yield
    finally:
        strategy_table.reset(rows_before)
        _REGISTRY.clear()
        _REGISTRY.update(registry_before)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get(name: str) -> Strategy:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"strategy must be one of {', '.join(_REGISTRY)}; got {name!r}") from None


def describe() -> dict[str, str]:
    return strategy_table.describe()
