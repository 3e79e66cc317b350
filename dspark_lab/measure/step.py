"""`measure_step(fn)`: the lab's accounting (syncs, breakdown, timing) for any step callable.

Import it as `from dspark_lab.measure.step import measure_step` (it loads torch)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import pandas as pd
import torch

from dspark_lab.measure.ranges import STEP_RANGE
from dspark_lab.results.rules.stats import median_ci
from dspark_lab.measure import breakdown, loop, syncs, trace


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


def measure_step(fn: Callable[[], object], *, steps: int = 20, trials: int = 3, warmup: int = 3,
                 profile_steps: int = 10, sync: Optional[Callable[[], None]] = None,
                 with_stack: bool = False) -> StepReport:
    """with_stack: Python stacks in the trace, so each sync call is attributed to its function
    (costs some host time per op in the profiled steps; the profiler-free timing is unaffected)."""
    cuda = torch.cuda.is_available()
    sync = sync or (torch.cuda.synchronize if cuda else (lambda: None))
    step = as_step(fn)
    timings = loop.run_rounds({"step": step}, loop.FixedRounds(trials), steps=steps, warmup=warmup,
                              sync=sync).timings["step"]
    tr = trace.capture(step, profile_steps, warmup=1, sync=sync, with_stack=with_stack)
    ev = trace.events(tr)
    counts = syncs.counts_per_step(ev)
    debug_sites = syncs.debug_sites_per_step(step, steps=3) if cuda else {}
    counts = {**counts, **syncs.cross_check(counts, debug_sites)} if cuda else syncs.without_cuda(counts)
    return StepReport(
        counts=counts, breakdown=breakdown.per_step(ev), timing=timings,
        debug_sites=debug_sites, trace=tr, device="cuda" if cuda else "cpu",
    )
