"""Step functions whose sync-caused GPU idle is known by construction, to check the charging rule.

Each case is one step written as a list of ops: host work (a calibrated spin), GPU work (a
calibrated `torch.cuda._sleep`), and a blocking sync (`.item()`, which waits for every queued op).
Two numbers come from the same ops:

- expected: a model's number, not a measurement. `simulate` plays the ops on one host clock and one
  GPU stream (a launch costs nothing, a sync waits until the stream is empty) and gives the
  steady-state step time with the syncs and with them removed; the difference is the idle the
  syncs cause.
- measured: the profiler-free step-time loss (the step with its syncs against the same step without
  them, paired per round by measure.loop) and the GPU idle the trace charges to the syncs
  (measure.breakdown.SYNC_COST_RULE). `dspark-lab verify` (dspark_lab/verify/checks.py) measures both
  and judges the charge by a tolerance measured on the same step.

The set covers one, two and three syncs per step at different places, a short tail after the sync,
a host-bound step, a sync inside the next step's preparation, a sync that finds the GPU idle, and a
sync-free control, all made with `.item()`; then one step of known cost (host 1 ms, GPU 4 ms, the
wait, host 2 ms: 3 ms caused per step in steady state) for twelve forms of wait (WAIT_FORMS:
`.cpu()`, a pageable D2H with `non_blocking=True`, `nonzero`, an event wait, ...), so that the rule
is checked on every kind of wait (results.facts.wait_kinds) but the synchronous memcpy, not only on
`.item()`. It lives in the gallery wing because it is, like the gallery, a set of step
functions measured with measure/; the rule's CPU tests use synthetic traces instead
(tests/test_sync_cost.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

HOST, GPU, SYNC = "host", "gpu", "sync"


# The forms a wait takes: the Python that makes it, the kind of wait (results.facts.wait_kinds) the
# trace must name it by, and how many waits one call makes. `repeat_interleave` without output_size
# reads two values back: the output's length and a check that no repeat is negative (PyTorch's
# aten/src/ATen/native/Repeat.h); on the H200 trace the second finds the GPU already idle.
WAIT_FORMS = {
    "item": ("flag.item()", "value_read", 1),
    "cpu": ("flag.cpu()", "copy_to_host", 1),
    "tolist": ("flag.tolist()", "copy_to_host", 1),
    "pageable_d2h": ("pageable.copy_(flag, non_blocking=True)", "pageable_copy", 1),
    "pinned_event": ("pinned.copy_(flag, non_blocking=True); event.record(); event.synchronize()", "event_wait", 1),
    "tensor_list": ("torch.tensor([1, 2, 3], device='cuda')", "copy_to_device", 1),
    "nonzero": ("mask.nonzero()", "size_readback", 1),
    "bool_mask": ("values[mask]", "size_readback", 1),
    "repeat_interleave": ("values.repeat_interleave(repeats)  # no output_size", "size_readback", 2),
    "event_sync": ("event.record(); event.synchronize()", "event_wait", 1),
    "stream_sync": ("torch.cuda.current_stream().synchronize()", "stream_wait", 1),
    "device_sync": ("torch.cuda.synchronize()", "device_sync", 1),
}


@dataclass(frozen=True)
class KnownIdleCase:
    name: str
    what: str
    ops: tuple  # ((HOST, ms) | (GPU, ms) | (SYNC, 0.0), ...): one step
    wait: str = "item"  # how each SYNC is made: a key of WAIT_FORMS

    def __post_init__(self) -> None:
        for op in self.ops:
            if len(op) != 2 or op[0] not in (HOST, GPU, SYNC) or not (op[1] >= 0):
                raise ValueError(f"{self.name}: an op must be ({HOST!r}|{GPU!r}|{SYNC!r}, ms >= 0); got {op!r}")
        if self.wait not in WAIT_FORMS:
            raise ValueError(f"{self.name}: wait must be one of {', '.join(WAIT_FORMS)}; got {self.wait!r}")

    @property
    def wait_kind(self) -> str:
        """The kind of wait the trace must name each of its syncs by."""
        return WAIT_FORMS[self.wait][1]

    @property
    def waits_per_step(self) -> int:
        """The host waits the trace must see per step: each sync makes its form's number of them."""
        return self.syncs_per_step * WAIT_FORMS[self.wait][2]

    @property
    def syncs_per_step(self) -> int:
        return sum(1 for kind, _ in self.ops if kind == SYNC)

    def sync_free(self) -> tuple:
        return tuple(op for op in self.ops if op[0] != SYNC)

    def expected(self, steps: int = 20) -> dict:
        """The model's step times (ms) with and without the syncs over trials of `steps` steps, and
        the idle the syncs cause."""
        with_syncs, free = simulate(self.ops, steps), simulate(self.sync_free(), steps)
        return {"step_ms": with_syncs, "sync_free_step_ms": free, "caused_idle_ms": with_syncs - free}


def simulate(ops: tuple, steps: int = 20) -> float:
    """Step time (ms) of `steps` steps of `ops` timed as measure.timing times a trial: from a
    drained GPU to a drained GPU, divided by `steps`. The host runs the ops in order; a GPU op
    starts when the host has launched it and the stream is free; a sync holds the host until the
    stream is empty. (The launch queue is taken as unbounded: far more than 20 steps of launches fit.)"""
    if steps < 1:
        raise ValueError(f"steps must be at least 1; got {steps!r}")
    host = gpu_free = 0.0
    for _ in range(steps):
        for kind, ms in ops:
            if kind == HOST:
                host += ms
            elif kind == GPU:
                gpu_free = max(host, gpu_free) + ms
            else:
                host = max(host, gpu_free)
    return max(host, gpu_free) / steps


CASES = (
    KnownIdleCase("sync_free", "control: GPU-bound, no sync", ((GPU, 3.0), (HOST, 1.0), (GPU, 0.5), (HOST, 0.5))),
    KnownIdleCase("one_mid", "one sync mid-step, 1 ms of host work after it",
                  ((GPU, 3.0), (HOST, 0.5), (SYNC, 0.0), (HOST, 1.0))),
    KnownIdleCase("short_tail", "one sync late in the step: a short tail, then the next step's preparation",
                  ((HOST, 0.7), (GPU, 3.0), (HOST, 0.3), (SYNC, 0.0), (HOST, 0.3))),
    KnownIdleCase("host_bound", "host-bound step: the idle after the sync exceeds the time blocked in it",
                  ((HOST, 1.0), (GPU, 2.0), (HOST, 0.3), (SYNC, 0.0), (HOST, 2.0))),
    KnownIdleCase("two_syncs", "two syncs in a row, the second blocked briefly, a long tail after it",
                  ((GPU, 2.0), (HOST, 0.3), (SYNC, 0.0), (HOST, 0.5), (GPU, 0.3), (HOST, 0.1), (SYNC, 0.0),
                   (HOST, 1.5))),
    KnownIdleCase("three_syncs", "three syncs per step, as the gallery's host_plan",
                  ((GPU, 1.5), (HOST, 0.2), (SYNC, 0.0), (HOST, 0.4), (GPU, 0.5), (HOST, 0.1), (SYNC, 0.0),
                   (HOST, 0.4), (GPU, 0.3), (HOST, 0.1), (SYNC, 0.0), (HOST, 0.6))),
    KnownIdleCase("next_prep", "a sync inside the next step's preparation (waits for the previous step's GPU work)",
                  ((HOST, 0.4), (SYNC, 0.0), (HOST, 0.4), (GPU, 3.0), (HOST, 0.5))),
    KnownIdleCase("idle_gpu_sync", "a sync that finds the GPU already idle: costs nothing",
                  ((GPU, 1.0), (HOST, 3.0), (SYNC, 0.0), (HOST, 0.5))),
)
# The step of known cost every form of wait is checked on: 3 ms caused per step.
KNOWN_COST_OPS = ((HOST, 1.0), (GPU, 4.0), (SYNC, 0.0), (HOST, 2.0))
CASES += tuple(KnownIdleCase(f"wait_{form}", f"host 1 ms, GPU 4 ms, {code}, host 2 ms", KNOWN_COST_OPS, wait=form)
               for form, (code, _, _) in WAIT_FORMS.items())


def get(name: str) -> KnownIdleCase:
    for c in CASES:
        if c.name == name:
            return c
    raise ValueError(f"known-idle case must be one of {', '.join(c.name for c in CASES)}; got {name!r}")


# --- on CUDA ------------------------------------------------------------------------------------

class _WaitForms:
    """The forms of WAIT_FORMS, one method each, named by the form, each making its wait in plain
    sight (lint reads them); the tensors made once."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.flag = torch.zeros(1, device="cuda")
        self.pageable, self.pinned = torch.empty(1), torch.empty(1, pin_memory=True)
        self.mask = torch.tensor([True, False, True], device="cuda")
        self.values = torch.arange(3.0, device="cuda")
        self.repeats = torch.tensor([1, 2, 1], device="cuda")
        self.event = torch.cuda.Event()

    def item(self):
        return self.flag.item()

    def cpu(self):
        return self.flag.cpu()

    def tolist(self):
        return self.flag.tolist()

    def pageable_d2h(self):
        return self.pageable.copy_(self.flag, non_blocking=True)

    def pinned_event(self):
        self.pinned.copy_(self.flag, non_blocking=True)
        self.event.record()
        self.event.synchronize()

    def tensor_list(self):
        import torch  # spelled as users write it (cached: no cost in the step)

        return torch.tensor([1, 2, 3], device="cuda")

    def nonzero(self):
        return self.mask.nonzero()

    def bool_mask(self):
        return self.values[self.mask]

    def repeat_interleave(self):
        return self.values.repeat_interleave(self.repeats)

    def event_sync(self):
        self.event.record()
        self.event.synchronize()

    def stream_sync(self):
        self.torch.cuda.current_stream().synchronize()

    def device_sync(self):
        self.torch.cuda.synchronize()


def wait_call(form: str) -> Callable[[], object]:
    """The wait `form` (a key of WAIT_FORMS) as a call, its tensors made once: each call waits for
    every op queued on the current stream."""
    if form not in WAIT_FORMS:
        raise ValueError(f"wait must be one of {', '.join(WAIT_FORMS)}; got {form!r}")
    return getattr(_WaitForms(), form)


def make_step(ops: tuple, sync_host_s: Optional[list] = None, wait: str = "item") -> Callable[[], None]:
    """The ops as a CUDA step: spins on the host, `torch.cuda._sleep` on the GPU, each sync made the
    way `wait` says (a key of WAIT_FORMS; `.item()` by default). Calibrate the sleep first
    (`measure.probe.calibrate_sleep`). With `sync_host_s`, each sync's host time (seconds, from the
    call into it to its return) is appended to it: what the host would not spend without the sync,
    timed without a profiler."""
    from dspark_lab.measure import probe
    from dspark_lab.model.workload import spin_until

    sync = wait_call(wait)

    def step() -> None:
        for kind, ms in ops:
            if kind == HOST:
                spin_until(time.perf_counter() + ms * 1e-3)
            elif kind == GPU:
                probe.busy_kernel(ms)
            elif sync_host_s is None:
                sync()  # waits for every queued op
            else:
                t0 = time.perf_counter()
                sync()
                sync_host_s.append(time.perf_counter() - t0)
    return step
