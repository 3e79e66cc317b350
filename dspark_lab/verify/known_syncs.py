"""Step functions whose syncs are known by construction: how many per step, and on which lines
(each line that syncs ends with the marker comment `# syncs here`, read from this file's source, so
an edit cannot move a line away from its expectation).

`debug_sees`: whether PyTorch's sync debug mode flags the sync (it flags the ops torch itself
synchronizes in — `.item()`, a blocking copy, `nonzero` — not an explicit `torch.cuda.synchronize()`
or `Event.synchronize()`, which the trace and CUPTI see).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import torch

MARK = "# syncs here"


class State:
    def __init__(self, dev: torch.device) -> None:
        self.dev = dev
        self.x = torch.arange(8, dtype=torch.float32, device=dev)
        self.mask = self.x > 3
        self.pinned = torch.ones(8, dtype=torch.int32, pin_memory=True)
        self.event = torch.cuda.Event()


def item_once(s: State) -> None:
    s.x.sum().item()  # syncs here


def item_three_times_on_one_line(s: State) -> None:
    for _ in range(3):
        s.x.max().item()  # syncs here


def item_on_two_lines(s: State) -> None:
    a = s.x.sum().item()  # syncs here
    y = s.x * a
    y.max().item()  # syncs here


def tensor_on_device(s: State) -> None:
    torch.tensor(7, dtype=torch.int32, device=s.dev)  # syncs here


def to_cpu(s: State) -> None:
    s.x.cpu()  # syncs here


def tolist(s: State) -> None:
    s.x.tolist()  # syncs here


def nonzero(s: State) -> None:
    torch.nonzero(s.mask)  # syncs here


def branch_on_a_tensor(s: State) -> None:
    if s.x.sum() > 0:  # syncs here
        s.x.add_(0)


def cuda_synchronize(s: State) -> None:
    s.x.add_(0)
    torch.cuda.synchronize()  # syncs here


def event_synchronize(s: State) -> None:
    s.event.record()
    s.event.synchronize()  # syncs here


def pinned_non_blocking_copy(s: State) -> None:
    s.pinned.to(s.dev, non_blocking=True)


def device_only(s: State) -> None:
    s.x.mul_(1.0).add_(0.0)


@dataclass(frozen=True)
class KnownSyncs:
    fn: Callable[[State], None]
    per_step: int
    debug_sees: bool = True

    @property
    def name(self) -> str:
        return self.fn.__name__

    def lines(self) -> list[int]:
        """The absolute line numbers in this file that carry the marker."""
        src, first = inspect.getsourcelines(self.fn)
        return [first + i for i, line in enumerate(src) if line.rstrip().endswith(MARK)]


CASES = (
    KnownSyncs(item_once, 1),
    KnownSyncs(item_three_times_on_one_line, 3),
    KnownSyncs(item_on_two_lines, 2),
    KnownSyncs(tensor_on_device, 1),
    KnownSyncs(to_cpu, 1),
    KnownSyncs(tolist, 1),
    KnownSyncs(nonzero, 1),
    KnownSyncs(branch_on_a_tensor, 1),
    KnownSyncs(cuda_synchronize, 1, debug_sees=False),
    KnownSyncs(event_synchronize, 1, debug_sees=False),
    KnownSyncs(pinned_non_blocking_copy, 0),
    KnownSyncs(device_only, 0),
)
