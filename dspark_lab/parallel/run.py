"""Headless EP runs on real ranks (the CLI's `dspark-lab ep` and studies/ep/real_ranks.py), and the
persistent group the live panel drives (`EPLive`)."""
from __future__ import annotations

import threading
from typing import Callable, Optional, Sequence

from dspark_lab.results.record import store
from dspark_lab import strategies as strategy_registry
from dspark_lab.config import LabConfig
from dspark_lab.measure.probe import fingerprint as fp
from dspark_lab.model.dispatch import DISPATCH_MODES, check_mode
from dspark_lab.parallel import checks
from dspark_lab.parallel.measure import RankCase, delay_rank0, measure_ranks, only_rank0, uniform
from dspark_lab.parallel.orchestrator import PointObserver, PointRun
from dspark_lab.parallel.spec import PointPlan, PointResult, PointSpec
from dspark_lab.parallel.workers import WorkerError, WorkerGroup, device_count, resolve_backend
from dspark_lab.results.facts.strategy_table import BASELINE, HEADLINE_PAIR, SYNC_FREE


def standard_cases(world: int, strategies: Optional[Sequence[str]] = None, *, rank0_only: Sequence[str] = (BASELINE,),
                   others: str = SYNC_FREE, rank0_delay_ms: float = 0.0,
                   delay_strategies: Sequence[str] = (SYNC_FREE, BASELINE),
                   jitter_ms: float = 0.0) -> list[RankCase]:
    """Every strategy on all ranks; then `rank0_only` strategies on rank 0 alone (the others run
    `others`); a host delay on rank 0; random host jitter on every rank."""
    names = list(strategies or strategy_registry.BUILTIN)
    cases = [uniform(s, world) for s in names]
    if world > 1:
        cases += [only_rank0(s, others, world) for s in rank0_only if s != others]
        if rank0_delay_ms:
            cases += [delay_rank0(s, world, rank0_delay_ms) for s in delay_strategies]
        if jitter_ms:
            cases += [uniform(s, world, jitter_ms=jitter_ms) for s in delay_strategies]
    out, seen = [], set()
    for c in cases:
        if c.name not in seen:
            seen.add(c.name)
            out.append(c)
    return out


def check_world(world: int, backend: str) -> None:
    if backend == "nccl" and world > device_count():
        raise ValueError(f"ep world size must be at most the {device_count()} GPUs present; got {world} "
                         "(larger EP sizes: ep_mode predicate_only through `dspark-lab sweep`, or results.analyses.ep_predict)")


def reference_args(cfg: LabConfig, world: int, dispatches: Sequence[str], batch_sizes) -> dict:
    """checks.equivalence's arguments for this run: its model, gamma, seed and every rank's batch."""
    return {"batch_sizes": list(batch_sizes or [cfg.batch_size] * world), "modes": list(dispatches),
            "model": cfg.model, "gamma": cfg.gamma, "seed": cfg.seed}


def create_writer(out, cfg: LabConfig, world: int, dispatches: Sequence[str], cases: Sequence[RankCase], *,
                  backend: str, batch_sizes, fingerprint: dict, rank0: dict, launcher: str, **extra) -> store.RunWriter:
    """An EP run file whose header says how it was run (both launchers write the same header;
    `rank0` is rank 0's RankContext.describe())."""
    return store.RunWriter.create(
        out, fingerprint=fingerprint,
        sweep={"base": cfg.to_dict(), "world_size": world, "dispatch": list(dispatches),
               "cases": [c.name for c in cases], "batch_sizes": batch_sizes},
        world_size=world, backend=backend, nccl_version=rank0.get("nccl_version"), dispatch=list(dispatches),
        ep_mode="real", run_kind="ep_real", torch_ranks=rank0.get("torch"), launcher=launcher, **extra)


class PointWriter(PointObserver):
    """Each point's rows and timelines to the run file as its point run ends (a PointObserver)."""

    def __init__(self, writer: store.RunWriter):
        self.writer = writer

    def on_done(self, result: PointResult) -> None:
        self.writer.write_point(result.info["point_id"], result.rows, result.timelines)


class _OnPoint(PointObserver):
    """A plain `on_point(dispatch, result)` callback, told as each point run ends."""

    def __init__(self, dispatch: str, on_point: Callable[[str, PointResult], None]):
        self.dispatch, self.on_point = dispatch, on_point

    def on_done(self, result: PointResult) -> None:
        self.on_point(self.dispatch, result)


def point_observers(writer: Optional[store.RunWriter], dispatch: str,
                    on_point: Optional[Callable[[str, PointResult], None]]) -> list[PointObserver]:
    """What an EP run's point runs tell: the run file first (where this process writes it), then `on_point`."""
    return ([PointWriter(writer)] if writer is not None else []) + ([_OnPoint(dispatch, on_point)] if on_point else [])


class GroupExecutor:
    """A point launched on a worker group's ranks (a PointExecutor, `dspark-lab ep`): every rank
    runs measure_ranks (its own PointRun on a RankExecutor) and rank 0's result is the point's. The
    ranks build their own steps. `group` needs only `call(fn, timeout_s=..., **kwargs) -> [per rank]`."""

    def __init__(self, group, dispatch: str, cases: Sequence[RankCase], *, batch_sizes=None, profile_steps: int = 12,
                 timeout_s: Optional[float] = None):
        self.group, self.dispatch, self.cases = group, check_mode(dispatch), list(cases)
        self.batch_sizes, self.profile_steps, self.timeout_s = batch_sizes, profile_steps, timeout_s

    def plan(self, cfg: LabConfig, device: str) -> PointPlan:
        """The point the ranks measure on `device` (PointSpec.on_ranks), its cases by name."""
        return PointPlan(PointSpec.on_ranks(cfg, self.group.world_size, self.dispatch, device),
                         tuple(c.name for c in self.cases))

    def build(self, plan: PointPlan, built: Optional[dict] = None) -> None:
        return None

    def execute(self, plan: PointPlan, observer: PointObserver, steps: Optional[dict] = None) -> PointResult:
        return self.group.call(measure_ranks, cfg=plan.spec.cfg, dispatch=self.dispatch, cases=self.cases,
                               batch_sizes=self.batch_sizes, profile_steps=self.profile_steps,
                               timeout_s=self.timeout_s)[0]


def rank_device(info: dict, backend: str) -> str:
    """The device the ranks measure on: rank 0's own word (RankContext.describe), else the backend's."""
    return info.get("device") or ("cuda" if backend == "nccl" else "cpu")


def run_ep(cfg: LabConfig, world: int, dispatches: Sequence[str] = DISPATCH_MODES, cases: Optional[Sequence[RankCase]] = None,
           *, out=None, backend: str = "auto", batch_sizes=None, group: Optional[WorkerGroup] = None,
           profile_steps: int = 12, on_point: Optional[Callable[[str, PointResult], None]] = None,
           fingerprint: Optional[dict] = None, timeout_s: Optional[float] = None, check_reference: bool = False) -> dict:
    """Measure every dispatch mode x case on `world` real ranks: one PointRun per dispatch mode on
    a GroupExecutor, its result written by a PointWriter to one run file (under `out`, default
    data/runs/) with world size, backend, NCCL version and dispatch modes in its header.
    Returns {dispatch: PointResult} and the run file's path under "path". `check_reference` first
    compares every rank's output with the one-process reference (header `reference_check`)."""
    for d in dispatches:
        check_mode(d)
    backend = resolve_backend(backend)
    check_world(world, backend)
    cases = list(cases or standard_cases(world))
    own = group is None
    group = group or WorkerGroup(world, backend).start()
    try:
        if group.world_size != world:
            raise ValueError(f"group has {group.world_size} ranks; world is {world}")
        info = group.info[0] if group.info else {}
        reference = None
        if check_reference:
            reference = checks.reference_summary(group.call(checks.equivalence, timeout_s=timeout_s,
                                                            **reference_args(cfg, world, dispatches, batch_sizes)),
                                                 dispatches)
        writer = create_writer(out, cfg, world, dispatches, cases, backend=backend, batch_sizes=batch_sizes,
                               fingerprint=fp() if fingerprint is None else fingerprint, rank0=info,
                               launcher="workers", reference_check=reference)
        with writer:
            try:
                results: dict = {}
                for d in dispatches:
                    executor = GroupExecutor(group, d, cases, batch_sizes=batch_sizes, profile_steps=profile_steps,
                                             timeout_s=timeout_s)
                    run = PointRun(executor.plan(cfg, rank_device(info, backend)), executor,
                                   point_observers(writer, d, on_point))
                    results[d] = run.run()
            except BaseException:
                writer.discard_if_empty()  # a header alone would list as a run with 0 points
                raise
        return {**results, "path": writer.path}
    finally:
        if own:
            group.close()


# A live update measures every strategy at one setting, sized like panel.LIVE_* (~3 s on an H200).
EP_LIVE_STEPS, EP_LIVE_WARMUP, EP_LIVE_TRIALS, EP_LIVE_PROFILE_STEPS = 8, 2, 3, 4


class RanksCancelled(RuntimeError):
    """The ranks stopped a live measurement at a trial boundary, as WorkerGroup.cancel asked."""


def live_cases(strategies: Sequence[str], world: int) -> list[RankCase]:
    """Every strategy on all ranks (the panel's figures), then device_direct on rank 0 alone with
    non_blocking elsewhere: the case that shows who waits for whom (its ranks differ)."""
    cases = [uniform(s, world) for s in strategies]
    if set(HEADLINE_PAIR) <= set(strategies):
        cases.append(only_rank0(*HEADLINE_PAIR, world))
    return cases


def live_ranks(ctx, *, cfg: LabConfig, dispatch: str, cases: Sequence[RankCase], profile_steps: int):
    """Run on every rank: measure_ranks, rank 0 sending each trial to the parent as it ends, and
    every rank stopping at the same trial boundary when the parent cancels (the ranks agree by an
    all-gather, so no rank is left waiting in a collective)."""
    def on_trial(case: str, timing) -> None:
        if any(ctx.all_gather_object(ctx.cancel_requested())):
            raise RanksCancelled(f"request {ctx.request} cancelled")
        if ctx.rank == 0 and ctx.emit is not None:
            ctx.emit((case, timing))

    return measure_ranks(ctx, cfg=cfg, dispatch=dispatch, cases=cases, profile_steps=profile_steps,
                         debug_sites=False, on_trial=on_trial)


class EPLive:
    """Real ranks for the live panel: one persistent WorkerGroup, restarted when the EP size changes."""

    def __init__(self, backend: str = "auto", dispatch: str = "allreduce", profile_steps: int = EP_LIVE_PROFILE_STEPS):
        self.backend = resolve_backend(backend)
        self.profile_steps = profile_steps
        self.dispatch = check_mode(dispatch)
        self.group: Optional[WorkerGroup] = None
        self._lock = threading.Lock()

    def fits(self, ep_size: int) -> bool:
        """EP sizes that run for real here: 2 .. the GPUs present (gloo: any size, for tests)."""
        return ep_size > 1 and (self.backend == "gloo" or ep_size <= device_count())

    def measure(self, cfg: LabConfig, strategies: Sequence[str], *, profile_steps: Optional[int] = None,
                dispatch: Optional[str] = None, on_trial: Optional[Callable] = None,
                cancel: Optional[threading.Event] = None) -> PointResult:
        """All strategies on every rank (live_cases) with `dispatch` (default: this EPLive's).
        `on_trial(strategy, timing)` gets rank 0's trials of the uniform cases as they end; an
        exception it raises, or `cancel` being set, cancels the ranks at their next trial boundary,
        and the exception (else RanksCancelled) is raised here once they have stopped."""
        dispatch = check_mode(dispatch or self.dispatch)
        with self._lock:
            if self.group is None or self.group.world_size != cfg.ep_size or not self.group.alive():
                self.close()
                self.group = WorkerGroup(cfg.ep_size, self.backend).start()
            group = self.group
            cases = live_cases(strategies, cfg.ep_size)
            uniform_names = {c.name: c.point_strategy for c in cases if c.point_strategy is not None}
            stop: list = []

            def on_partial(item) -> None:  # on the group's reader thread: never raises
                case, timing = item
                if stop:
                    return
                try:
                    if cancel is not None and cancel.is_set():
                        raise RanksCancelled("cancelled by a newer setting")
                    if on_trial is not None and case in uniform_names:
                        on_trial(uniform_names[case], timing)
                except BaseException as e:  # noqa: BLE001 - handed to the caller below
                    stop.append(e)
                    group.cancel()

            try:
                res = group.call(live_ranks, cfg=cfg, dispatch=dispatch, cases=cases,
                                 profile_steps=profile_steps or self.profile_steps, on_partial=on_partial)[0]
            except WorkerError as e:
                if stop:
                    raise stop[0] from None
                if "RanksCancelled" in str(e):
                    raise RanksCancelled(str(e).splitlines()[-1]) from None
                raise
            if stop:  # cancelled after the last trial (the profiled pass ran on)
                raise stop[0]
            return res

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None


class RanksExecutor:
    """A point on the live panel's real ranks (EPLive), as parallel.orchestrator.PointRun drives it: the
    ranks build their own steps; rank 0's trials of the cases that stand for the point reach the
    observer as they end; `cancel` stops every rank at its next trial boundary."""

    def __init__(self, ep_live: EPLive, cancel: Optional[threading.Event] = None):
        self.ep_live, self.cancel = ep_live, cancel

    def build(self, plan: PointPlan, built: Optional[dict] = None) -> None:
        return None

    def execute(self, plan: PointPlan, observer: PointObserver, steps: Optional[dict] = None) -> PointResult:
        return self.ep_live.measure(plan.spec.cfg, list(plan.names), dispatch=plan.spec.dispatch,
                                    on_trial=observer.on_trial, cancel=self.cancel)
