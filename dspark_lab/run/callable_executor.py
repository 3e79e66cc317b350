"""A user's step callables measured for parallel.orchestrator.PointRun: `CallableExecutor`, the
PointExecutor of a measure.step.StepPlan (what `dspark-lab inspect` runs). build marks each callable
as one step range; execute times their trials interleaved, then profiles each one in turn, telling
the observer of every trial and of the profiled pass."""
from __future__ import annotations

from typing import Callable, Mapping, Optional

from dspark_lab.measure.step import StepPlan, StepResult, as_step, default_sync, profiled_report, timed_trials
from dspark_lab.parallel.orchestrator import PointObserver


class CallableExecutor:
    """`fns` ({name: zero-argument step}, the plan's names in order) measured in this process; `sync`
    ends a trial (measure.step.default_sync() by default)."""

    def __init__(self, fns: Mapping[str, Callable[[], object]], sync: Optional[Callable[[], None]] = None):
        bad = [n for n, fn in fns.items() if not callable(fn)]
        if bad:
            raise ValueError(f"fns must map each name to a callable step; {bad[0]!r} is a {type(fns[bad[0]]).__name__}")
        self.fns = dict(fns)
        self.sync = sync or default_sync()

    def build(self, plan: StepPlan, built: Optional[dict] = None) -> dict:
        """{name: the callable as one step range}, in the plan's order (nothing is made ahead here);
        a plan that profiles nothing times the callables as they are (the range marks a trace's steps)."""
        if not isinstance(plan, StepPlan):
            raise ValueError(f"plan must be a StepPlan for step callables; got {type(plan).__name__}")
        if list(self.fns) != list(plan.names):
            raise ValueError(f"fns must hold one callable per name, in order {list(plan.names)}; got {list(self.fns)}")
        if built:
            raise ValueError("built steps are a config point's (LabStep); step callables are built here")
        wrap = as_step if plan.profile_steps else (lambda fn: fn)
        return {n: wrap(self.fns[n]) for n in plan.names}

    def execute(self, plan: StepPlan, observer: PointObserver, steps: Optional[dict]) -> StepResult:
        """The timed trials (each told to `observer`), then, unless the plan profiles nothing, each
        step's profiled report in the plan's order."""
        timings = timed_trials(steps, plan, self.sync, on_trial=observer.on_trial)
        if not plan.profile_steps:
            return StepResult(timings)
        reports = {n: profiled_report(steps[n], plan, self.sync, timings[n]) for n in plan.names}
        observer.on_profiled()
        return StepResult(timings, reports)
