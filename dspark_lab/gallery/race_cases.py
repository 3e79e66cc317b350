"""Races a fix can cause, as gallery cases: each a step in the shape of the code it comes from (made
fresh by a factory, so the race check's two runs start alike) and the fix beside it. The race check
(`dspark_lab.measure.races.check`, `dspark-lab inspect --races`, the `races` pytest fixture) flags the
step and passes the fix.

Re-implemented from the PRs' descriptions (cited per case); no code is copied.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from dspark_lab.gallery.cases import State, default_scale, make_state
from dspark_lab.results.facts.citations import cite

BATCH = 8  # requests in the batch


@dataclass(frozen=True)
class RaceCase:
    name: str
    shape: str  # the family of race, one line
    make_step: Callable[[torch.device], Callable[[int], object]]  # device -> step(i), fresh state
    make_fix: Callable[[torch.device], Callable[[int], object]]
    pr: str
    why: str


def _accepted(device: torch.device, i: int) -> torch.Tensor:
    """This step's accepted-token counts per request, made on the device (no host copy)."""
    return (torch.arange(BATCH, device=device) + i) % 5 + 1


def _condense(rows: torch.Tensor, finished: int) -> None:
    """Remove a finished request: the rows after it move down one place (host writes)."""
    rows[finished:-1] = rows[finished + 1:].clone()


def condense_during_copy(device: torch.device) -> Callable[[int], torch.Tensor]:
    """The batch's pinned accepted-count tensor receives the counts by a non-blocking device-to-host copy,
    and condense() compacts that same tensor at once, while the copy may still land."""
    accepted_cpu = torch.zeros(BATCH, dtype=torch.int64, pin_memory=device.type == "cuda")

    def step(i: int) -> torch.Tensor:
        accepted_cpu.copy_(_accepted(device, i), non_blocking=True)  # in flight
        _condense(accepted_cpu, i % BATCH)  # a host write into the buffer the copy writes
        return accepted_cpu
    return step


def condense_owned_buffer(device: torch.device) -> Callable[[int], torch.Tensor]:
    """The fix: the copy lands in a buffer the runner owns and condense() never writes; the counts are
    read from it after the copy's event, and condensed there."""
    owned = torch.zeros(BATCH, dtype=torch.int64, pin_memory=device.type == "cuda")
    accepted_cpu = torch.zeros(BATCH, dtype=torch.int64)
    done = torch.cuda.Event() if device.type == "cuda" else None

    def step(i: int) -> torch.Tensor:
        owned.copy_(_accepted(device, i), non_blocking=True)
        if done is not None:
            done.record()
            done.synchronize()  # the copy has landed: its values may be read
        accepted_cpu.copy_(owned)
        _condense(accepted_cpu, i % BATCH)
        return accepted_cpu
    return step


RACE_CASES = (
    RaceCase(
        "condense_pinned_in_flight", "a pinned buffer written by the host while its non-blocking D2H copy is in flight",
        condense_during_copy, condense_owned_buffer,
        f"{cite('vLLM', 51599)} (as {cite('vLLM', 53613)} describes it: `condense()` writes into the pinned "
        "accepted-count tensor while the D2H is in flight; the fix moves that copy to a runner-owned buffer)",
        "A non-blocking device-to-host copy into pinned memory returns before it has run. Whatever the host "
        "writes into that buffer before the copy lands is overwritten when it lands, and whatever the host "
        "reads there is the old contents: here condense() moves the rows of a finished request down in the "
        "same tensor the copy is filling. Nothing syncs, so no sync counter sees it; the race check does, "
        "by running the step with GPU work queued ahead and comparing with a run that waits for every copy.",
    ),
)
CASES = {c.name: c for c in RACE_CASES}


def with_changing_lengths(fn: Callable[[State], object]) -> Callable[[], Callable[[int], object]]:
    """A factory of steps running `fn(state)` on a fresh gallery state whose host lengths grow by one each
    step (a decode step's changing input), for the race check: fn=decode_step.decode_step_fixed checks a fix."""
    def make() -> Callable[[int], object]:
        state = make_state(scale_name=default_scale())

        def step(i: int) -> object:
            state.seq_lens_cpu += 1
            return fn(state)
        return step
    make.__name__ = f"{fn.__name__}_changing_lengths"
    return make
