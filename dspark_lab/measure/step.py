"""`measure_step(fn)`: the lab's accounting (syncs, breakdown, timing) for any step callable, in
two phases: the timed trials (`timed_trials`, profiler-free) and the profiled report
(`profiled_report`), both to a `StepPlan`. inspect runs the same phases through
parallel.orchestrator.PointRun (run.callable_executor); measure_step composes them directly.

Import it as `from dspark_lab.measure.step import measure_step` (it loads torch)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import pandas as pd
import torch

from dspark_lab.measure.ranges import STEP_RANGE
from dspark_lab.results.rules.stats import median_ci
from dspark_lab.measure import breakdown, loop, syncs, trace
from dspark_lab.measure.timing import TrialTiming


@dataclass
class StepReport:
    counts: dict  # syncs/copies/allocations per step, first sync's site, debug count + mismatch + sync_note
    breakdown: pd.DataFrame  # one row per profiled step
    timing: list  # TrialTiming per trial (profiler-free)
    debug_sites: dict  # sync debug mode: "file:line function" -> syncs per step
    trace: dict  # Chrome-trace JSON (export with trace.export)
    device: str

    def summary(self) -> str:
        med, lo, hi = median_ci([t.step_ms for t in self.timing])
        c = self.counts
        syncs_text = (f"syncs/step: {c['sync_note']}" if c.get("sync_note") == syncs.NO_CUDA_NOTE
                      else f"syncs/step {c['syncs_per_step']:.2f} (sync debug mode: {c['debug_syncs_per_step']:.2f})")
        lines = [f"device {self.device}: step {med:.3f} ms (95% CI {lo:.3f}-{hi:.3f}) over {len(self.timing)} trials",
                 f"{syncs_text}  H2D pageable/step {c['h2d_pageable_per_step']:.2f}"
                 f"  pinned/step {c['h2d_pinned_per_step']:.2f}  allocations/step {c['allocs_per_step']:.2f}"]
        if c["syncs_per_step"] > 0 and len(self.breakdown) > 1:
            b = self.breakdown.iloc[1:]  # the first profiled step pays the profiler's start
            lines.append(f"host blocked {b.host_blocked_ms.mean():.3f} ms/step; GPU idle the syncs caused "
                         f"{b.gpu_idle_sync_caused_ms.mean():.3f} ms/step (every gap until the host is ahead again)")
        for site, n in sorted(self.debug_sites.items(), key=lambda kv: -kv[1]):
            lines.append(f"  sync at {site}: {n:.2f} per step")
        if c.get("sync_count_mismatch"):
            lines.append(f"WARNING: the two sync counts disagree ({c['sync_note']}): one of them missed a sync")
        if c.get("sync_note") == syncs.NO_CUDA_NOTE:
            lines.append("no CUDA device: nothing can block the host on a GPU here, so sync counts are NaN "
                         "(not measurable), not zero")
        return "\n".join(lines)


def as_step(fn: Callable[[], object]) -> Callable[[], None]:
    """Wrap a callable so each call is one step range in the trace."""
    def step() -> None:
        with torch.profiler.record_function(STEP_RANGE):
            fn()
    return step


def _whole(name: str, value, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name} must be a whole number >= {least}; got {value!r}")


@dataclass(frozen=True)
class StepPlan:
    """What to measure of step callables (parallel.orchestrator.PointRun's plan for them): `names`
    in the order measured, their timed trials interleaved (`trials` rounds of `steps` steps after
    `warmup`), then each one's profiled report over `profile_steps` steps (0: the timed trials only).
    `with_stack`: Python stacks in the trace, so each sync call is attributed to its function (costs
    some host time per op in the profiled steps; the profiler-free timing is unaffected)."""

    names: tuple = ("step",)
    steps: int = 20
    trials: int = 3
    warmup: int = 3
    profile_steps: int = 10
    with_stack: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))
        if not self.names or not all(isinstance(n, str) and n for n in self.names) or len(set(self.names)) < len(self.names):
            raise ValueError(f"names must be distinct non-empty strings, at least one; got {self.names!r}")
        for name, least in (("steps", 1), ("trials", 1), ("warmup", 0), ("profile_steps", 0)):
            _whole(name, getattr(self, name), least)


@dataclass(frozen=True)
class StepResult:
    """Step callables measured to a StepPlan: each one's timed trials ({name: [TrialTiming]}) and,
    where the plan profiles, its report ({name: StepReport}; empty when profile_steps is 0)."""

    timings: dict
    reports: dict = field(default_factory=dict)


def default_sync() -> Callable[[], None]:
    """What ends a trial: the device's synchronize on CUDA, nothing without it."""
    return torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)


def timed_trials(steps_by_name: dict, plan: StepPlan, sync: Callable[[], None],
                 on_trial: Optional[Callable[[str, TrialTiming], None]] = None) -> dict:
    """The plan's timed trials of the steps (each already a step range: as_step), interleaved and
    profiler-free: {name: [TrialTiming]}, each told to `on_trial` as it ends."""
    return loop.run_rounds(steps_by_name, loop.FixedRounds(plan.trials), steps=plan.steps, warmup=plan.warmup,
                           sync=sync, on_trial=on_trial).timings


def profiled_report(step: Callable[[], None], plan: StepPlan, sync: Callable[[], None], timing: list) -> StepReport:
    """One step's profiled pass (`plan.profile_steps` steps) and sync debug mode on CUDA, with its
    timed trials (`timing`), as a StepReport."""
    cuda = torch.cuda.is_available()
    tr = trace.capture(step, plan.profile_steps, warmup=1, sync=sync, with_stack=plan.with_stack)
    ev = trace.events(tr)
    counts = syncs.counts_per_step(ev)
    debug_sites = syncs.debug_sites_per_step(step, steps=3) if cuda else {}
    counts = {**counts, **syncs.cross_check(counts, debug_sites)} if cuda else syncs.without_cuda(counts)
    return StepReport(
        counts=counts, breakdown=breakdown.per_step(ev), timing=timing,
        debug_sites=debug_sites, trace=tr, device="cuda" if cuda else "cpu",
    )


def measure_step(fn: Callable[[], object], *, steps: int = 20, trials: int = 3, warmup: int = 3,
                 profile_steps: int = 10, sync: Optional[Callable[[], None]] = None,
                 with_stack: bool = False) -> StepReport:
    """`fn`'s timed trials, then its profiled report (options as StepPlan's; `sync` ends a trial,
    default_sync() by default). inspect runs the same two phases through PointRun
    (run.callable_executor.CallableExecutor)."""
    plan = StepPlan(steps=steps, trials=trials, warmup=warmup, profile_steps=profile_steps, with_stack=with_stack)
    sync = sync or default_sync()
    step = as_step(fn)
    return profiled_report(step, plan, sync, timed_trials({"step": step}, plan, sync)["step"])
