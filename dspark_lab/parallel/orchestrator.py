"""One point run in explicit phases, whoever starts it (measure_point, the sweep, the live panel,
`dspark-lab ep` over a worker group, every rank under torchrun, inspect), and the observers told
as it goes.

The phases: the first look (one timed trial of a step built ahead, drawn before the others exist;
live only), build (the point's steps), rounds (interleaved timed trials), the profiled pass, rows.
A run's plan is a Plan: a config point's strategies (parallel.spec.PointPlan), or step callables
(measure.step.StepPlan: `dspark-lab inspect`), whose Result is a measure.step.StepResult.

The two seams, as typing.Protocols (structural: an implementation need not inherit them):
  PointExecutor  does the measuring: `build(plan, built) -> steps or None`, then
                 `execute(plan, observer, steps) -> Result`, telling the observer of each trial
                 and of the profiled pass. Implementations: run.point.LocalExecutor (this process),
                 parallel.measure.RankExecutor (this rank of joined ranks: each rank runs one
                 PointRun, rank 0 alone gets the result; torchrun's ranks use it directly),
                 parallel.run.GroupExecutor (launches a point on a worker group's ranks:
                 `dspark-lab ep`), parallel.run.RanksExecutor (the live panel's ranks),
                 run.live.MeasureExecutor (any measurer shaped as measure_point),
                 run.callable_executor.CallableExecutor (a user's step callables: inspect).
  PointObserver  what a point run tells as it goes (first look, built, trial, round, profiled,
                 done); its methods do nothing, so a subscriber inherits it and overrides what it
                 watches. Implementations: _Observers here (every subscriber in turn, and the
                 rounds derived from the trials), OnTrial here (a plain trial callback),
                 parallel.run.PointWriter (each point's records to its run file), run.live._LiveView,
                 run.inspect.GuardObserver (the guard over a step inspect measured).
"""
from __future__ import annotations

import time
from typing import Callable, Optional, Protocol, Sequence, Union, runtime_checkable

from dspark_lab.measure import diagnostics
from dspark_lab.measure.step import StepPlan, StepResult
from dspark_lab.measure.timing import TrialTiming, time_trial
from dspark_lab.parallel.spec import PointPlan, PointResult

# What a run measures: a config point's strategies (PointPlan), or step callables (StepPlan: inspect).
Plan = Union[PointPlan, StepPlan]
# What it gives: a point's rows, timelines and traces, or the callables' trials and reports.
Result = Union[PointResult, StepResult]


@runtime_checkable
class PointObserver(Protocol):
    """What a point run tells as it goes; a subscriber inherits this and overrides what it watches
    (each does nothing here). An exception raised by one ends the run there (a cancel)."""

    def on_first_look(self, strategy: str, timing: TrialTiming) -> None:
        """One timed trial of the step built ahead, before the others are built."""

    def on_built(self, seconds: float) -> None:
        """The point's steps were built, in `seconds`."""

    def on_trial(self, strategy: str, timing: TrialTiming) -> None:
        """A timed trial ended (in the order run)."""

    def on_round(self, rounds: int, timings: dict) -> None:
        """Every strategy has `rounds` trials ({strategy: [TrialTiming]} so far)."""

    def on_profiled(self) -> None:
        """The profiled pass ran (its analysis may still be under way)."""

    def on_done(self, result: Result) -> None:
        """The point's result, rows built (told where the result is: on real ranks, rank 0 only)."""


@runtime_checkable
class PointExecutor(Protocol):
    """Who measures a point for PointRun: builds its steps, then runs its rounds and profiled pass."""

    def build(self, plan: Plan, built: Optional[dict] = None) -> Optional[dict]:
        """The point's steps ({strategy: LabStep}, or {name: step callable} for a StepPlan) with
        `built` (made ahead) among them; None when the executor builds them elsewhere (real ranks)
        or inside execute."""

    def execute(self, plan: Plan, observer: PointObserver, steps: Optional[dict]) -> Optional[Result]:
        """The point measured on `steps` (build's answer), each trial and the profiled pass told to
        `observer`; its rows, timelines and traces (None on a rank other than 0 of joined ranks,
        whose rows went to rank 0)."""


class _Observers(PointObserver):
    """Every subscriber in turn; keeps the trials so far and tells a round when each strategy has one more."""

    def __init__(self, observers: Sequence[PointObserver], names: Sequence[str]):
        self.observers = list(observers)
        self.timings: dict = {n: [] for n in names}
        self.rounds = 0

    def on_first_look(self, strategy: str, timing: TrialTiming) -> None:
        for o in self.observers:
            o.on_first_look(strategy, timing)

    def on_built(self, seconds: float) -> None:
        for o in self.observers:
            o.on_built(seconds)

    def on_trial(self, strategy: str, timing: TrialTiming) -> None:
        self.timings[strategy].append(timing)
        for o in self.observers:
            o.on_trial(strategy, timing)
        if min(len(ts) for ts in self.timings.values()) > self.rounds:
            self.rounds += 1
            for o in self.observers:
                o.on_round(self.rounds, self.timings)

    def on_profiled(self) -> None:
        for o in self.observers:
            o.on_profiled()

    def on_done(self, result: Result) -> None:
        for o in self.observers:
            o.on_done(result)


class OnTrial(PointObserver):
    """A plain `on_trial(strategy, timing)` callback as a PointObserver."""

    def __init__(self, on_trial: Callable[[str, TrialTiming], None]):
        self.on_trial = on_trial


def first_look(cfg, built: dict) -> tuple[str, TrialTiming]:
    """One timed trial of the one step built ahead ({strategy: LabStep}), with its diagnostics."""
    (name, s), = built.items()
    return name, time_trial(s.step, cfg.steps, cfg.warmup, s.drain, trial=0,
                            diag=diagnostics.TrialDiagnostics(s, nvml=diagnostics.nvml_of(s.device)))


class PointRun:
    """Runs `plan` on `executor`, telling `observers`: first look, build, rounds, profiled pass, rows."""

    def __init__(self, plan: Plan, executor: PointExecutor, observers: Sequence[PointObserver] = ()):
        if not isinstance(plan, (PointPlan, StepPlan)):
            raise ValueError(f"plan must be a PointPlan or a StepPlan; got {type(plan).__name__}")
        self.plan, self.executor = plan, executor
        self.observers = _Observers(observers, plan.names)

    def run(self, built: Optional[dict] = None, look_first: bool = False) -> Optional[Result]:
        """`built`: steps made ahead ({strategy: LabStep}); with `look_first`, the one step there
        gives a first look before the others are built (a PointPlan's only). None (and no on_done)
        where the executor has no result here: a rank other than 0 of joined ranks."""
        if look_first and not isinstance(self.plan, PointPlan):
            raise ValueError("look_first needs a PointPlan (a config point's LabStep built ahead)")
        if built and look_first:
            self.observers.on_first_look(*first_look(self.plan.spec.cfg, built))
        t0 = time.perf_counter()
        steps = self.executor.build(self.plan, built)
        if steps is not None:
            self.observers.on_built(time.perf_counter() - t0)
        result = self.executor.execute(self.plan, self.observers, steps)
        if result is not None:
            self.observers.on_done(result)
        return result
