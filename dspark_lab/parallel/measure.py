"""Every rank measures its own steps; rows gain a rank dimension (schema.RANK_COLUMNS).

A point is (config, world size, dispatch mode) with a list of cases; a case says what each rank
does (`RankCase`: strategy, added host delay, host jitter per rank). As in run.point.measure_point,
timing trials come first, interleaved across cases, with the device drained and the ranks
joined by a barrier at every trial boundary (so all ranks run the same case at the same time),
then one profiled pass over the cases in turn, analysed per rank by the measure/ code. Each rank
runs these phases as one parallel.orchestrator.PointRun on its RankExecutor; every rank's trial
records are gathered to rank 0, which builds each row once.

Who waits for whom: a rank's `blocked_from_others_ms` / `collective_from_others_ms` are the rise
of its host wait (blocked + readback) and of its collective time over the case in which every
rank runs exactly as this rank does (same strategy, delay and jitter): what the others' being
different cost it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from dspark_lab import strategies as strategy_registry
from dspark_lab.config import LabConfig
from dspark_lab.measure import intervals as iv
from dspark_lab.measure import loop, syncs, trace
from dspark_lab.measure.profile import DEBUG_STEPS, PROFILE_STEPS, STRATEGY_RANGE, analyse, profile_strategies
from dspark_lab.results.record.schema import RANK_COLUMNS, ROW_COLUMNS
from dspark_lab.results.record import rows as rowbuild
from dspark_lab.model.dispatch import check_mode
from dspark_lab.parallel.ranks import RankContext, nccl_version
from dspark_lab.parallel.orchestrator import OnTrial, PointObserver, PointRun
from dspark_lab.parallel.spec import PointPlan, PointResult, PointSpec, TrialRecord
from dspark_lab.parallel.step import RankStep

# Host-side names of collective calls in a CPU trace (c10d ops, gloo ranges, torch's comms record).
_HOST_COLLECTIVE_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms")


@dataclass(frozen=True)
class RankCase:
    strategies: tuple  # one strategy name per rank
    host_delay_ms: tuple = ()  # per rank; empty = all 0
    host_jitter_ms: tuple = ()  # per rank, uniform 0..J ms each step; empty = all 0
    name: str = ""

    def __post_init__(self) -> None:
        n = len(self.strategies)
        if n < 1:
            raise ValueError("strategies must name one strategy per rank")
        for s in self.strategies:
            strategy_registry.get(s)
        for fname in ("host_delay_ms", "host_jitter_ms"):
            v = tuple(float(x) for x in (getattr(self, fname) or (0.0,) * n))
            if len(v) != n or any(x < 0 for x in v):
                raise ValueError(f"{fname} must give one value >= 0 per rank ({n}); got {getattr(self, fname)!r}")
            object.__setattr__(self, fname, v)
        object.__setattr__(self, "strategies", tuple(self.strategies))
        if not self.name:
            object.__setattr__(self, "name", self.default_name())

    @property
    def world_size(self) -> int:
        return len(self.strategies)

    def default_name(self) -> str:
        name = ",".join(self.strategies)
        if any(self.host_delay_ms):
            name += " delay=" + ",".join(f"{d:g}" for d in self.host_delay_ms)
        if any(self.host_jitter_ms):
            name += " jitter=" + ",".join(f"{j:g}" for j in self.host_jitter_ms)
        return name

    @property
    def point_strategy(self) -> Optional[str]:
        """The strategy when every rank runs it as it is (no delay, no jitter): such a case stands
        for the point (PointResult.point_cases); None when the ranks differ."""
        if len(set(self.strategies)) == 1 and not any(self.host_delay_ms) and not any(self.host_jitter_ms):
            return self.strategies[0]
        return None

    def rank_settings(self, rank: int) -> tuple:
        return self.strategies[rank], self.host_delay_ms[rank], self.host_jitter_ms[rank]

    def baseline_for(self, rank: int) -> "RankCase":
        """Every rank runs as `rank` does here."""
        s, d, j = self.rank_settings(rank)
        n = self.world_size
        return RankCase((s,) * n, (d,) * n, (j,) * n)


def uniform(strategy: str, world: int, delay_ms: float = 0.0, jitter_ms: float = 0.0) -> RankCase:
    return RankCase((strategy,) * world, (delay_ms,) * world, (jitter_ms,) * world)


def only_rank0(strategy: str, others: str, world: int) -> RankCase:
    return RankCase((strategy,) + (others,) * (world - 1))


def delay_rank0(strategy: str, world: int, delay_ms: float) -> RankCase:
    return RankCase((strategy,) * world, (delay_ms,) + (0.0,) * (world - 1))


def collective_ms_per_step(ev, cuda: bool) -> float:
    """Time inside collectives per step: NCCL kernels on the GPU, else collective calls' host wall time."""
    wins = syncs.step_windows(ev)
    if not wins:
        return 0.0
    if cuda:
        sel = ev[(ev.cat == "kernel") & ev.name.str.lower().str.contains("nccl")]
    else:
        host = syncs.host_events(ev)
        sel = host[host.name.str.startswith(_HOST_COLLECTIVE_PREFIXES) & (host.ph == "X")]
    spans = iv.union(zip(sel.ts, sel.end))
    inside = sum(e - s for s, e in iv.union(iv.clip(spans, wins[0][0], wins[-1][1])))
    return inside / 1e3 / len(wins)


def _where(ctx: RankContext, case: RankCase) -> dict:
    """This rank's own columns of a case's rows (PointSpec.columns lays them over the point's)."""
    s, d, j = case.rank_settings(ctx.rank)
    return dict(rank=ctx.rank, node=ctx.node, node_rank=ctx.node_rank, local_rank=ctx.local_rank, rank_case=case.name,
                rank_strategies=",".join(case.strategies), host_delay_ms=d, host_jitter_ms=j)


def _check_cases(cases: Sequence, world: int) -> list[RankCase]:
    cases = [c if isinstance(c, RankCase) else RankCase(**c) for c in cases]
    if not cases:
        raise ValueError("cases must hold at least one RankCase")
    for c in cases:
        if c.world_size != world:
            raise ValueError(f"case {c.name!r} has {c.world_size} ranks; the group has {world}")
    if len({c.name for c in cases}) != len(cases):
        raise ValueError("case names must be distinct")
    return cases


def _rank_steps(ctx: RankContext, cfg: LabConfig, my_cfg: LabConfig, dispatch: str, bucket: int,
                cases: Sequence[RankCase]) -> dict[str, RankStep]:
    """This rank's step of every case; the first one's weights and target verify are shared."""
    steps: dict[str, RankStep] = {}
    first = None
    for i, c in enumerate(cases):
        s, d, j = c.rank_settings(ctx.rank)
        steps[c.name] = RankStep(my_cfg, s, group=ctx.group, dispatch=dispatch, bucket=bucket, host_delay_ms=d,
                                 host_jitter_ms=j, jitter_seed=cfg.seed * 7919 + ctx.rank * 104729 + i,
                                 share_with=first)
        first = first or steps[c.name]
    return steps


def _case_stats(tr: dict, step: RankStep, cuda: bool, debug_sites: bool, sync) -> tuple[dict, list]:
    """One case's window of the profiled pass, with the collectives' time taken out of GPU busy."""
    stats, tl = analyse(tr)
    stats["gpu_collective_ms"] = collective_ms_per_step(trace.events(tr), cuda)
    if cuda and stats.get("gpu_busy_ms") is not None:
        stats["gpu_busy_ms"] = max(0.0, stats["gpu_busy_ms"] - stats["gpu_collective_ms"])
    if cuda and debug_sites:  # every rank runs these steps, so the collectives stay matched
        debug = syncs.debug_sites_per_step(step.step, steps=DEBUG_STEPS)
        sync()
        if debug:
            stats["sync_site"] = max(debug, key=debug.get)
            stats["sync_sites"] = json.dumps(debug, sort_keys=True)
    return stats, tl


def _case_records(spec: PointSpec, my_cfg: LabConfig, ctx: RankContext, case: RankCase, graph: bool, stats: dict,
                  timings: list) -> list[TrialRecord]:
    """A case's trial records on this rank, with the case's profiled columns (rows are built on
    rank 0, once the columns that compare the ranks are known)."""
    measured = {k: v for k, v in stats.items() if k in ROW_COLUMNS + RANK_COLUMNS}
    measured.update(graph=graph, sync_sites=stats.get("sync_sites", "{}"))  # a2a_dynamic and CPU run eagerly
    where = _where(ctx, case)
    return [TrialRecord(spec, case.rank_settings(ctx.rank)[0], t, measured, where, my_cfg) for t in timings]


def _point_setup(ctx: RankContext, cfg: LabConfig, dispatch: str, batch_sizes: Optional[Sequence[int]]) -> tuple:
    """Every rank's batch, the common capture bucket, this rank's config and the point's spec."""
    world = ctx.world_size
    batch_sizes = list(batch_sizes or [cfg.batch_size] * world)
    if len(batch_sizes) != world:
        raise ValueError(f"batch_sizes must give one batch per rank ({world}); got {batch_sizes!r}")
    spec = PointSpec.on_ranks(cfg, world, dispatch, ctx.device)
    bucket = max(spec.cfg.with_(batch_size=b).bucket_batch_size for b in batch_sizes)
    return batch_sizes, bucket, spec.cfg.with_(batch_size=batch_sizes[ctx.rank]), spec


def unfinished_rows(ctx: RankContext, cfg: LabConfig, dispatch: str, cases: Sequence[RankCase], error: BaseException, *,
                    batch_sizes: Optional[Sequence[int]] = None) -> tuple[str, list[dict]]:
    """The point id and this rank's failed rows (one per case) for a point that did not finish:
    what the writer records instead of rows, so an unfinished point is never read as ok."""
    cases = _check_cases(cases, ctx.world_size)
    _, _, my_cfg, spec = _point_setup(ctx, cfg, dispatch, batch_sizes)
    msg = f"{type(error).__name__}: {error}"
    return spec.point_id, [rowbuild.build_row(**spec.columns(c.rank_settings(ctx.rank)[0], my_cfg, _where(ctx, c)),
                                              status="failed", error=msg) for c in cases]


class RankExecutor:
    """This rank's part of a point on joined ranks (a parallel.orchestrator.PointExecutor): its step
    of every case, the timed rounds (the device drained and the ranks joined by a barrier at every
    trial boundary), the profiled pass, and every rank's records gathered to rank 0, whose result
    alone is returned (None elsewhere). Every rank runs one PointRun on one of these at a time."""

    def __init__(self, ctx: RankContext, cfg: LabConfig, dispatch: str, cases: Sequence[RankCase], *,
                 batch_sizes: Optional[Sequence[int]] = None, profile_steps: int = PROFILE_STEPS,
                 debug_sites: bool = True, on_progress=None):
        self.ctx, self.cfg, self.dispatch = ctx, cfg, check_mode(dispatch)
        self.cases = _check_cases(cases, ctx.world_size)
        self.batch_sizes, self.bucket, self.my_cfg, self.spec = _point_setup(ctx, cfg, dispatch, batch_sizes)
        self.profile_steps, self.debug_sites = profile_steps, debug_sites
        self.progress = on_progress or (lambda msg, frac: None)

    def plan(self) -> PointPlan:
        """The point these ranks measure: its spec, its cases by name (the rounds' order)."""
        return PointPlan(self.spec, tuple(c.name for c in self.cases))

    def build(self, plan: PointPlan, built: Optional[dict] = None) -> Optional[dict]:
        return _rank_steps(self.ctx, self.cfg, self.my_cfg, self.dispatch, self.bucket, self.cases)

    def execute(self, plan: PointPlan, observer: PointObserver, steps: Optional[dict]) -> Optional[PointResult]:
        ctx, cfg, cases = self.ctx, self.cfg, self.cases
        first = next(iter(steps.values()))

        def sync() -> None:  # the device drained and the ranks joined: all ranks run the same case together
            first.drain()
            ctx.barrier()

        sync()
        timed = loop.run_rounds({n: s.step for n, s in steps.items()}, loop.FixedRounds(cfg.trials), steps=cfg.steps,
                                warmup=cfg.warmup, sync=sync, progress=lambda msg, share: self.progress(msg, 0.9 * share),
                                on_trial=observer.on_trial, order_seed=cfg.seed)  # every rank: the same cfg, the same order
        sync()
        self.progress("profiling", 0.9)
        records, timelines = _profiled_records(ctx, self.spec, self.my_cfg, cases, steps, timed, self.profile_steps,
                                               self.debug_sites, sync)
        observer.on_profiled()
        samples = {c.name: np.concatenate([t.per_step_ms for t in timed.timings[c.name]]).tolist() for c in cases}
        gathered = ctx.all_gather_object((records, timelines, samples))
        if ctx.rank != 0:
            return None
        info = {"world_size": ctx.world_size, "backend": ctx.backend, "dispatch": self.dispatch,
                "nccl_version": nccl_version(), "bucket_batch_size": self.bucket, "batch_sizes": self.batch_sizes,
                "point_id": self.spec.point_id, "graph": bool(first.runner.use_graph)}
        return _gathered(gathered, cases, info)


def measure_ranks(ctx: RankContext, cfg: LabConfig, dispatch: str, cases: Sequence[RankCase], *,
                  batch_sizes: Optional[Sequence[int]] = None, profile_steps: int = PROFILE_STEPS,
                  debug_sites: bool = True, on_progress=None, on_trial=None,
                  observers: Sequence[PointObserver] = ()) -> Optional[PointResult]:
    """Run on every rank (or once, with `RankContext.single()`): a PointRun on this rank's
    RankExecutor. Returns the rows of all ranks on rank 0 and None elsewhere. `on_trial(case,
    timing)` runs after each timed trial, on every rank at the same trial boundary
    (measure.loop.run_rounds); `observers` are told too (their on_done on rank 0 only).
    `batch_sizes` gives each rank its own real batch (they pad to the largest one's capture
    bucket); by default every rank runs `cfg.batch_size`."""
    executor = RankExecutor(ctx, cfg, dispatch, cases, batch_sizes=batch_sizes, profile_steps=profile_steps,
                            debug_sites=debug_sites, on_progress=on_progress)
    told = ([OnTrial(on_trial)] if on_trial is not None else []) + list(observers)
    return PointRun(executor.plan(), executor, told).run()


def _profiled_records(ctx: RankContext, spec: PointSpec, my_cfg: LabConfig, cases: Sequence[RankCase], steps: dict,
                      timed, profile_steps: int, debug_sites: bool, sync) -> tuple[list, list]:
    """This rank's profiled pass over every case, then its trial records and timelines."""
    whole = profile_strategies(steps, profile_steps)
    sync()
    records, timelines = [], []
    for c in cases:
        tr = trace.window(whole, STRATEGY_RANGE + c.name)
        stats, tl = _case_stats(tr, steps[c.name], ctx.device == "cuda", debug_sites, sync)
        # One process: timelines keyed by the strategy, as the one-process figures and panel expect.
        name = c.name if ctx.world_size == 1 else f"{c.name} · rank {ctx.rank}"
        timelines.append({"kind": "timeline", "point_id": spec.point_id, "strategy": name, "rank": ctx.rank,
                          "rank_case": c.name, "segments": tl})
        records += _case_records(spec, my_cfg, ctx, c, bool(steps[c.name].runner.use_graph), stats,
                                 timed.timings[c.name])
    return records, timelines


def _gathered(gathered: list, cases: Sequence[RankCase], info: dict) -> PointResult:
    """Every rank's (records, timelines, samples) as one result: each row built once, with the
    columns that compare the ranks among its record's."""
    records = [r for g in gathered for r in g[0]]
    rows = [replace(r, compared=c).row() for r, c in zip(records, _compared(records, cases))]
    return PointResult(rows, [t for g in gathered for t in g[1]], analysed_in=None,  # each rank analysed its own
                       samples={c.name: {r: g[2][c.name] for r, g in enumerate(gathered)} for c in cases}, info=info,
                       point_cases={c.name: c.point_strategy for c in cases if c.point_strategy is not None})


def _mean(records: list, key: str) -> Optional[float]:
    vals = [r.value(key) for r in records if r.value(key) is not None]
    return float(np.mean(vals)) if vals else None


def _compared(records: list[TrialRecord], cases: Sequence[RankCase]) -> list[dict]:
    """Per record, in order: step_ms_max_rank (its case x trial's step_ms, maximum over the ranks),
    and who waits for whom against its rank's uniform baseline case (absent where that case was not run)."""
    by_trial: dict = {}
    for r in records:
        by_trial.setdefault((r.where["rank_case"], r.timing.trial), []).append(r.timing.step_ms)
    by_case_rank: dict = {}
    for r in records:
        by_case_rank.setdefault((r.where["rank_case"], r.where["rank"]), []).append(r)
    names = {c.name: c for c in cases}
    waits: dict = {}
    for (name, rank), rs in by_case_rank.items():
        base = names[name].baseline_for(rank)
        base_records = next((by_case_rank.get((c.name, rank)) for c in cases if
                             (c.strategies, c.host_delay_ms, c.host_jitter_ms) ==
                             (base.strategies, base.host_delay_ms, base.host_jitter_ms)), None)
        if not base_records:
            continue
        wait = lambda rr: (_mean(rr, "host_blocked_ms") or 0.0) + (_mean(rr, "host_readback_ms") or 0.0)  # noqa: E731
        coll = (_mean(rs, "gpu_collective_ms") or 0.0) - (_mean(base_records, "gpu_collective_ms") or 0.0)
        waits[(name, rank)] = {"blocked_from_others_ms": wait(rs) - wait(base_records), "collective_from_others_ms": coll}
    return [{"step_ms_max_rank": max(by_trial[(r.where["rank_case"], r.timing.trial)]),
             **waits.get((r.where["rank_case"], r.where["rank"]), {})} for r in records]


def measure_single(cfg: LabConfig, dispatch: str, strategies: Sequence[str], **kw) -> PointResult:
    """The world-size-1 case of the same code, in this process (ep_mode "single" or "predicate_only")."""
    return measure_ranks(RankContext.single(cfg.resolved_device()), cfg, dispatch,
                         [uniform(s, 1) for s in strategies], **kw)
