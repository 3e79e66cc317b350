"""Measure one config point in this process (all strategies together, trials interleaved) into tidy
rows: the executor of parallel.orchestrator.PointRun here (a parallel.orchestrator.PointExecutor), and
`measure_point`, its public entry."""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from typing import Callable, Optional, Sequence, Union

import pandas as pd
import torch

from dspark_lab import strategies as strategy_registry
from dspark_lab.config import LabConfig
from dspark_lab.measure import diagnostics, loop, syncs
from dspark_lab.measure.timing import TrialTiming
from dspark_lab.measure.analysis_worker import WorkerFailed
from dspark_lab.measure.profile import DEBUG_STEPS, PROFILE_STEPS, analyse, profile_strategies, strategy_windows
from dspark_lab.results.rules import noise
from dspark_lab.model.workload import LabStep
from dspark_lab.parallel.spec import PointPlan, PointResult, PointSpec, TrialRecord
from dspark_lab.results.record import schema
from dspark_lab.parallel.orchestrator import OnTrial, PointObserver, PointRun


def point_id(cfg: LabConfig) -> str:
    """The one-process point's id (parallel.spec.PointSpec.point_id)."""
    return PointSpec(cfg).point_id


def failed_rows(cfg: LabConfig, strategies: Optional[Sequence[str]], error: BaseException) -> list[dict]:
    return PointSpec(cfg).failed_rows(strategies or strategy_registry.BUILTIN, error)


def timing_rows(point: Union[LabConfig, PointSpec], timings: dict) -> list[dict]:
    """Rows of the timed trials so far ({strategy: [TrialTiming]}) of `point` (a spec, or a config
    measured in one process), before the profiled pass: step times, diagnostics and the noise
    verdict, profiled columns None (a live update in progress)."""
    spec = point if isinstance(point, PointSpec) else PointSpec(point)
    return _with_noise_verdict([TrialRecord(spec, n, t) for n, ts in timings.items() for t in ts])


def _with_noise_verdict(records: Sequence[TrialRecord]) -> list[dict]:
    """The records' rows, each built once with the noise verdict among its record's columns (the
    verdict is judged over the point's trials together; results.rules.noise re-computes the same
    from the rows): no row is changed after it is built."""
    if not records:
        return []
    marked = noise.mark_disturbed(pd.DataFrame([r.row() for r in records]))
    return [replace(r, measured={**r.measured, "disturbed": bool(d), "disturbed_reason": why}).row()
            for r, d, why in zip(records, marked["disturbed"], marked["disturbed_reason"])]


def build_steps(cfg: LabConfig, names: Sequence[str], built: Optional[dict] = None) -> dict[str, LabStep]:
    """One LabStep per strategy, in the order of `names`; the first one made owns the weights and
    the target verify, and the rest share them. `built` ({strategy: LabStep} of `cfg`, e.g. the one
    run.live's warm-up made) are kept and the others share with the first of them."""
    built = dict(built or {})
    if set(built) - set(names):
        raise ValueError(f"built steps {sorted(set(built) - set(names))} are not among the strategies {list(names)}")
    owner = next(iter(built.values()), None)
    if owner is None:
        owner = built[names[0]] = LabStep(cfg, names[0])
    return {n: built[n] if n in built else LabStep(cfg, n, share_with=owner) for n in names}


def stop_rule(cfg: LabConfig, target_ci_pct: Optional[float], time_cap_s: Optional[float]):
    """cfg.trials fixed rounds, or rounds to a CI target within a time cap (cfg.trials at least)."""
    if (target_ci_pct is None) != (time_cap_s is None):
        raise ValueError("target_ci_pct and time_cap_s go together: give both (adaptive) or neither (fixed trials)")
    if target_ci_pct is None:
        return loop.FixedRounds(cfg.trials)
    return loop.CITarget(target_ci_pct, time_cap_s, min_trials=cfg.trials)


def _debug_sites(s: LabStep) -> Optional[dict]:
    """On CUDA, sync debug mode over a few steps: sites per step (None without CUDA)."""
    return syncs.debug_sites_per_step(s.step, steps=DEBUG_STEPS) if s.device.type == "cuda" else None


def _with_debug(stats: dict, debug: Optional[dict]) -> dict:
    """One strategy's profiled counts with sync debug mode's, run on every strategy, not only where
    the trace found a sync: its count is checked against the trace's (a sync either one misses is
    flagged), and it gives the exact line."""
    if debug is None:
        return syncs.without_cuda(stats)
    stats.update(syncs.cross_check(stats, debug))
    named = {k: v for k, v in debug.items() if k != syncs.UNATTRIBUTED_SITE}
    if named:  # also where only debug mode saw it: the row is flagged, and the line helps
        stats["sync_site"] = max(named, key=named.get)
    return stats


# The longest wait for a worker's analysis before this process analyses the trace itself.
ANALYSIS_TIMEOUT_S = 30.0


class _ProfiledPass:
    """The profiled pass over every strategy (one profiler session), sync debug mode on each, and
    its analysis: in this process, or sent to an analysis worker (measure.analysis_worker) whose
    result `analysed()` collects, analysing here if the worker fails. Owns the trace file."""

    def __init__(self, steps: dict, profile_steps: int, with_stack: bool, worker=None):
        self.names = list(steps)
        self.path: Optional[str] = None
        self.whole: Optional[dict] = None
        self._windows: Optional[dict] = None
        self.job = None
        self.where = "this process"
        if worker is not None and worker.alive:
            self.path = profile_strategies(steps, profile_steps, with_stack=with_stack, keep_file=True)
            with contextlib.suppress(WorkerFailed):  # not ready or gone: analysed here instead
                self.job = worker.submit(self.path, self.names)  # analysed there while this process goes on
        else:
            self.whole = profile_strategies(steps, profile_steps, with_stack=with_stack)
        self.debug = {n: _debug_sites(s) for n, s in steps.items()}
        for s in steps.values():
            s.drain()

    def analysed(self) -> dict:
        """{strategy: (stats with sync debug mode's, timeline)}; `where` says where it was analysed."""
        res = None
        if self.job is not None:
            try:
                res = self.job.result(ANALYSIS_TIMEOUT_S)
                self.where = "a worker process"
            except WorkerFailed as e:
                self.where = f"this process ({e})"  # analysed here instead
        if res is None:
            res = {n: analyse(w) for n, w in self.windows().items()}
        return {n: (_with_debug(stats, self.debug[n]), tl) for n, (stats, tl) in res.items()}

    def windows(self) -> dict:
        """{strategy: its window of the trace}, cut once (the analysis here and the kept traces share them)."""
        if self._windows is None:
            self._windows = strategy_windows(self.whole if self.whole is not None else self.path, self.names)
        return self._windows

    def discard(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            self.path = None


class LocalExecutor:
    """A point in this process (a PointExecutor): build its steps, time the rounds, the profiled
    pass, the rows (parallel.orchestrator.PointRun drives it). Options as measure_point's."""

    def __init__(self, *, on_progress: Optional[Callable[[str, float], None]] = None, profile_steps: int = PROFILE_STEPS,
                 keep_traces: bool = True, with_stack: bool = False, diagnose: bool = True,
                 target_ci_pct: Optional[float] = None, time_cap_s: Optional[float] = None,
                 clock: Optional[Callable[[], float]] = None, profile_after_round: Optional[int] = None,
                 analysis_worker=None, timer: Optional[Callable[[], float]] = None):
        if profile_after_round is not None and (not isinstance(profile_after_round, int) or profile_after_round < 1):
            raise ValueError(f"profile_after_round must be a whole number of rounds >= 1; got {profile_after_round!r}")
        self.progress = on_progress or (lambda msg, frac: None)
        self.profile_steps, self.keep_traces, self.with_stack, self.diagnose = profile_steps, keep_traces, with_stack, diagnose
        self.target_ci_pct, self.time_cap_s, self.clock = target_ci_pct, time_cap_s, clock or time.monotonic
        self.profile_after_round, self.analysis_worker = profile_after_round, analysis_worker
        self.timer = timer or time.perf_counter  # times the steps (a fake in tests: load-free step times)

    def build(self, plan: PointPlan, built: Optional[dict] = None) -> Optional[dict]:
        return build_steps(plan.spec.cfg, plan.names, built)

    def execute(self, plan: PointPlan, observer: PointObserver, steps: Optional[dict]) -> PointResult:
        cfg, names = plan.spec.cfg, plan.names
        # The bar: the trials' share, then one step per strategy profiled.
        self._total, self._trial_part = cfg.trials * len(names) + len(names), cfg.trials * len(names)
        passes: list = []
        try:
            timed, identical = self._rounds(cfg, steps, observer, passes)
            if not passes:
                self._profile(steps, observer, passes)
            analysed, where = passes[0].analysed(), passes[0].where
            windows = passes[0].windows() if self.keep_traces else {}
        finally:
            for pp in passes:
                pp.discard()
        result = self._result(plan, timed, analysed, windows)
        result.outputs_identical, result.analysed_in = identical, where
        return result

    def _rounds(self, cfg: LabConfig, steps: dict, observer: PointObserver, passes: list) -> tuple:
        """The timed rounds (measure.loop.run_rounds), the profiled pass after `profile_after_round`
        of them where asked; then whether every strategy's draft tokens came out the same."""
        first = next(iter(steps.values()))
        nvml = diagnostics.nvml_of(first.device) if self.diagnose else None
        diag = {n: diagnostics.TrialDiagnostics(s, nvml=nvml) for n, s in steps.items()} if self.diagnose else None

        def after_round(done: int) -> None:
            if done == self.profile_after_round and not passes:
                self._profile(steps, observer, passes)

        share = self._trial_part / self._total
        timed = loop.run_rounds({n: s.step for n, s in steps.items()}, stop_rule(cfg, self.target_ci_pct, self.time_cap_s),
                                steps=cfg.steps, warmup=cfg.warmup, sync=first.drain, diag=diag, clock=self.clock, timer=self.timer,
                                on_trial=observer.on_trial, progress=lambda msg, f: self.progress(msg, f * share),
                                after_round=after_round if self.profile_after_round is not None else None,
                                order_seed=cfg.seed)  # the trial order is seeded by the point's seed, recorded per trial
        first.drain()
        outs = [s.last_output for s in steps.values()]
        return timed, all(torch.equal(outs[0], o) for o in outs[1:])

    def _profile(self, steps: dict, observer: PointObserver, passes: list) -> None:
        self.progress("profiling", self._trial_part / self._total)
        passes.append(_ProfiledPass(steps, self.profile_steps, self.with_stack, self.analysis_worker))
        observer.on_profiled()

    def _result(self, plan: PointPlan, timed, analysed: dict, windows: dict) -> PointResult:
        """The rows phase: every trial's record as a row, with its strategy's profiled columns."""
        spec, rows, timelines, traces = plan.spec, [], [], {}
        for i, n in enumerate(plan.names):
            stats, tl = analysed[n]
            self.progress(f"measured {n}", min((self._trial_part + i + 1) / self._total, 1.0))
            if self.keep_traces:
                traces[n] = windows[n]
            timelines.append({"kind": "timeline", "point_id": spec.point_id, "strategy": n, "segments": tl})
            measured = {k: v for k, v in stats.items() if k in schema.ROW_COLUMNS}
            measured.update(stop_reason=timed.stop_reason, ci_half_width_pct=timed.half_width_pct)
            rows += [TrialRecord(spec, n, t, measured) for t in timed.timings[n]]
        return PointResult(_with_noise_verdict(rows), timelines, traces)


def measure_point(
    cfg: LabConfig,
    strategies: Optional[Sequence[str]] = None,
    *,
    on_progress: Optional[Callable[[str, float], None]] = None,
    profile_steps: int = PROFILE_STEPS,
    keep_traces: bool = True,
    with_stack: bool = False,
    diagnose: bool = True,
    target_ci_pct: Optional[float] = None,
    time_cap_s: Optional[float] = None,
    clock: Optional[Callable[[], float]] = None,
    on_trial: Optional[Callable[[str, TrialTiming], None]] = None,
    steps: Optional[dict] = None,
    profile_after_round: Optional[int] = None,
    analysis_worker=None,
    timer: Optional[Callable[[], float]] = None,
) -> PointResult:
    """Measure every strategy at one config point (parallel.orchestrator.PointRun on a LocalExecutor).

    Timing trials run first, without the profiler, interleaved across strategies (measure/loop.py).
    Then one profiler session over the strategies in turn gives counts, the breakdown and a
    timeline for each. Python stacks are off by default because the Python tracer inflates host
    time, and the sync's exact source line comes from torch's sync debug mode instead.

    Every trial carries measure.diagnostics fields (`diagnose=False` leaves them None) and the
    noise verdict of results.rules.noise (`disturbed`, `disturbed_reason`). With `target_ci_pct` and
    `time_cap_s`, rounds go on past `cfg.trials` until the headline ratio's CI half-width is at
    most `target_ci_pct` % or `time_cap_s` seconds (`clock`) have passed; rows say which (`stop_reason`).
    `timer` times the steps (seconds; default the host's perf_counter; a fake in tests). `on_trial(strategy, timing)` sees each timed trial as it ends (measure.loop.run_rounds); `steps`
    (build_steps(cfg, names), e.g. built and graph-captured ahead by run.live) are used instead of new ones.

    A live update (run.live) profiles after `profile_after_round` rounds instead of after all of
    them, and sends the trace to `analysis_worker` (measure.analysis_worker.AnalysisWorker), so that
    its analysis runs in another process while the remaining rounds are timed; without a worker
    (or when it fails) the trace is analysed here."""
    stop_rule(cfg, target_ci_pct, time_cap_s)  # a bad pair is refused before anything is built
    names = list(strategies or strategy_registry.BUILTIN)
    for n in names:
        strategy_registry.get(n)
    if steps is not None and list(steps) != names:
        raise ValueError(f"steps must hold one LabStep per strategy, in order {names}; got {list(steps)}")
    executor = LocalExecutor(on_progress=on_progress, profile_steps=profile_steps, keep_traces=keep_traces,
                             with_stack=with_stack, diagnose=diagnose, target_ci_pct=target_ci_pct,
                             time_cap_s=time_cap_s, clock=clock, profile_after_round=profile_after_round,
                             analysis_worker=analysis_worker, timer=timer)
    observers = [OnTrial(on_trial)] if on_trial is not None else []
    return PointRun(PointPlan(PointSpec(cfg), names), executor, observers).run(built=steps)
