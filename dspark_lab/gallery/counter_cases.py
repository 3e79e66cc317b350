"""Three more counter-examples from the field, where the lesson is what a change did not buy: a wait
deferred is not a wait removed, a sum of API time is not a cost, and a wait added to close a race
has a price. Each is measured like every gallery case (the same shape as `cases.py`: the state's
queued GPU work, the pitfall or its fix, host preparation, the next GPU work); which group the
measurement puts it in is the recording's to say (results/analyses/sync_cost_groups.py).

`COUNTER_CASES` holds each case's description (the keyword arguments of `registry.Case`).
Re-implemented from the PRs' and issues' descriptions; no upstream code is copied.
"""
from __future__ import annotations

from typing import Optional

import torch

from dspark_lab.gallery.cases import State, draft, host_prep, read_back, target_verify


def _to_pinned(s: State, values: torch.Tensor) -> Optional[torch.cuda.Event]:
    """`values` copied into the pinned buffer, and the event recorded after the copy (None off CUDA)."""
    s.d2h_pinned.copy_(values, non_blocking=True)
    done = torch.cuda.Event() if s.device.type == "cuda" else None
    if done is not None:
        done.record()
    return done


def _copy_accepted(s: State) -> Optional[torch.cuda.Event]:
    """The accepted counts copied into the pinned buffer, and the event recorded after the copy."""
    return _to_pinned(s, s.accept.sum(1))


def _wait(done: Optional[torch.cuda.Event]) -> None:
    if done is not None:
        done.synchronize()  # sync: the host waits on the copy's event


# --- vLLM #42574: a deferred event.synchronize() -------------------------------------------------
def accepted_wait_at_once(s: State) -> torch.Tensor:
    h = target_verify(s)
    done = _copy_accepted(s)
    _wait(done)
    host_prep(s)
    draft(s, h)
    return s.d2h_pinned.clone()


def accepted_wait_deferred(s: State) -> torch.Tensor:
    h = target_verify(s)
    done = _copy_accepted(s)
    host_prep(s)  # the host's work moved before the wait ...
    _wait(done)  # ... which still waits for the queued verify
    draft(s, h)
    return s.d2h_pinned.clone()


# --- colibri #431: several read-backs after the queue has drained ------------------------------------
def _summaries(s: State) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return s.accept.sum(), s.seq_lens.max(), s.seq_lens.min()


def stats_read_after_drain(s: State) -> list[int]:
    h = target_verify(s)
    n_acc, longest, shortest = _summaries(s)
    read_back(s.d2h_pinned, _copy_accepted(s))  # the by-design wait: the queue is drained after it
    a = n_acc.item()  # sync: a read-back with nothing left queued
    b = longest.item()  # sync: a read-back with nothing left queued
    c = shortest.item()  # sync: a read-back with nothing left queued
    host_prep(s)
    draft(s, h)
    return [int(a), int(b), int(c)]


def stats_from_one_read_back(s: State) -> list[int]:
    h = target_verify(s)
    n_acc, longest, shortest = _summaries(s)
    packed = torch.nn.functional.pad(torch.stack([n_acc, longest, shortest]), (0, s.d2h_pinned.numel() - 3))
    vals = read_back(s.d2h_pinned, _to_pinned(s, packed))[:3]  # the three values ride the one by-design wait
    host_prep(s)
    draft(s, h)
    return [int(v) for v in vals]


# --- vLLM #36013: a wait added to close a race on a reused pinned buffer -----------------------------
def _refill(s: State) -> torch.Tensor:
    """The host refills its one pinned staging buffer with the next lengths and copies it up."""
    s.d2h_pinned.copy_(s.seq_lens_cpu + 1)
    return s.d2h_pinned.to(s.device, non_blocking=True)


def staging_refilled_in_flight(s: State) -> torch.Tensor:
    h = target_verify(s)
    lens = _refill(s)  # the last step's copy from this buffer may still be queued: a race
    host_prep(s)
    draft(s, h)
    return lens


def staging_refilled_after_wait(s: State) -> torch.Tensor:
    h = target_verify(s)
    if s.device.type == "cuda":
        torch.cuda.current_stream(s.device).synchronize()  # sync: the race's fix: the queued copies have run
    lens = _refill(s)
    host_prep(s)
    draft(s, h)
    return lens


# --- the descriptions: keyword arguments of registry.Case, registered in registry.py ---------------
COUNTER_CASES = (
    dict(
        name="deferred_event_sync", shape="counter-example: an event.synchronize() deferred, not removed",
        step=accepted_wait_at_once, fix=accepted_wait_deferred,
        pr="vLLM #42574 (a deferred event.synchronize(); its nsys numbers as quoted in the open vLLM #53613)",
        why="Moving `event.synchronize()` later lets the host do its own work first, but the wait is still "
            "there, and where the GPU is still running the work it waits for, it waits just as long. As quoted "
            "in vLLM #53613, vLLM #42574's own nsys numbers show the host's time in `cudaEventSynchronize` going from "
            "0.041 to 4.106 s. Here both variants wait once on the copy's event; the fix only moves the host "
            "preparation ahead of the wait.",
        expected_syncs=1, expected_d2h=1, fix_expected_syncs=1, fix_expected_d2h=1, helpers=(_wait,),
    ),
    dict(
        name="api_time_sum", shape="counter-example: read-backs whose API time adds up but whose wait is drained",
        step=stats_read_after_drain, fix=stats_from_one_read_back,
        pr="colibri #431 (a sum of API time is not a cost)",
        why="A profile's sum of time inside sync calls counts every call, but a call made after the queue has "
            "drained waits for nothing: its time is the round trip, and the GPU idle around it is owed to the "
            "wait that drained the queue. Here three `.item()` reads follow the by-design read-back; the fix "
            "puts the three values into that read-back's copy. What each costs is the charge the cost rule "
            "gives it, beside the host time the calls took.",
        expected_syncs=3, expected_d2h=4, fix_expected_syncs=0, fix_expected_d2h=1, allow=("read_back",),
    ),
    dict(
        name="race_fix_price", shape="counter-example: a wait added to close a race has a price",
        step=staging_refilled_in_flight, fix=staging_refilled_after_wait,
        pr="vLLM #36013 (a race fix: mean TTFT 67.7 -> 76.3 ms)",
        why="The host refills one pinned staging buffer each step and copies it up non-blocking; under run-ahead "
            "the previous copy from it may still be queued, so it can read the new values (a race: the hazards "
            "table counts them). Waiting for the queued work before the refill closes the race and makes the "
            "host wait again. vLLM #36013 closed a race of the other direction (the host read a pinned buffer before "
            "its non-blocking device-to-host copy had landed) with an event's wait, and reports mean TTFT 67.7 -> "
            "76.3 ms for that fix. Here the 'fix' is the wait: "
            "the measurement says what it costs. The race-free form without the wait keeps two buffers (or a "
            "fresh pinned tensor per step), as the list_to_device case teaches.",
        expected_syncs=0, expected_d2h=0, fix_expected_syncs=1, fix_expected_d2h=0,
        allow=("staging_refilled_after_wait",),  # the race's fix: the wait is its design, as in the PR
    ),
)
