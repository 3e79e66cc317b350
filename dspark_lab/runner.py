"""Measure one config point (all strategies together, trials interleaved) into tidy rows."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from . import strategies as strategy_registry
from .config import LabConfig
from .measure import breakdown, syncs, timing, trace
from .predicate import enable_num_token_non_padded
from .schema import ROW_COLUMNS
from .workload import LabStep

PROFILE_STEPS = 12  # profiled steps per strategy (the first is dropped from medians)
STRATEGY_RANGE = "dspark:strategy:"


@dataclass
class PointResult:
    rows: list[dict]
    timelines: list[dict]
    traces: dict[str, dict] = field(default_factory=dict)
    outputs_identical: Optional[bool] = None  # draft tokens equal across strategies after the trials


def point_id(cfg: LabConfig) -> str:
    d = cfg.to_dict()
    d.pop("strategy")
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def _config_columns(cfg: LabConfig, strategy: str) -> dict:
    return dict(
        point_id=point_id(cfg), ep_size=cfg.ep_size, batch_size=cfg.batch_size, gamma=cfg.gamma,
        strategy=strategy, model=cfg.model, workload=cfg.workload, graph=cfg.graph,
        device=cfg.resolved_device(), query_token_num=cfg.query_token_num,
        bucket_batch_size=cfg.bucket_batch_size, num_tokens=cfg.num_tokens,
        target_verify_ms=cfg.workload_costs.target_verify_ms, predicate=enable_num_token_non_padded(cfg.parallel),
        # One process: EP > 1 only flips the predicate (schema.RANK_COLUMNS; parallel/ runs real ranks).
        rank=0, world_size=1, ep_mode="predicate_only" if cfg.ep_size > 1 else "single", dispatch="",
    )


def failed_rows(cfg: LabConfig, strategies: Optional[Sequence[str]], error: BaseException) -> list[dict]:
    msg = f"{type(error).__name__}: {error}"
    rows = []
    for s in strategies or strategy_registry.BUILTIN:
        r = {c: None for c in ROW_COLUMNS}
        r.update(_config_columns(cfg, s), status="failed", error=msg)
        rows.append(r)
    return rows


def profile_strategies(steps: dict, profile_steps: int, with_stack: bool = False) -> dict:
    """One profiler session over all strategies in turn (starting a profiler costs more than a few
    steps); each strategy's steps sit in a `dspark:strategy:<name>` range, drained at its end."""
    def run_all() -> None:
        for n, s in steps.items():
            with torch.profiler.record_function(STRATEGY_RANGE + n):
                for _ in range(profile_steps):
                    s.step()
                s.drain()

    for s in steps.values():  # the trials left them warm; make sure nothing is queued
        s.drain()
    return trace.capture(run_all, 1, warmup=0, with_stack=with_stack, sync=lambda: None)


def analyse(tr: dict) -> tuple[dict, list]:
    """Counts, breakdown medians and a timeline from one Chrome trace (live or recorded)."""
    ev = trace.events(tr)
    calls = syncs.sync_calls(ev)
    out = syncs.counts_per_step(ev, calls)
    out.update(breakdown.summary(ev, calls=calls))
    return out, breakdown.timeline(ev, calls=calls)


def measure_point(
    cfg: LabConfig,
    strategies: Optional[Sequence[str]] = None,
    *,
    on_progress: Optional[Callable[[str, float], None]] = None,
    profile_steps: int = PROFILE_STEPS,
    keep_traces: bool = True,
    with_stack: bool = False,
) -> PointResult:
    """Measure every strategy at one config point.

    Timing trials run first, without the profiler, interleaved across strategies. Then one
    profiler session over the strategies in turn gives counts, the breakdown and a timeline for
    each. Python stacks are off by default because the Python tracer inflates host time, and the
    sync's exact source line comes from torch's sync debug mode instead."""
    names = list(strategies or strategy_registry.BUILTIN)
    for n in names:
        strategy_registry.get(n)
    progress = on_progress or (lambda msg, frac: None)
    first = LabStep(cfg, names[0])
    steps = {names[0]: first, **{n: LabStep(cfg, n, share_with=first) for n in names[1:]}}
    sync = first.drain
    total = cfg.trials * len(names) + len(names)
    done = [0]

    def tick(msg: str) -> None:
        done[0] += 1
        progress(msg, min(done[0] / total, 1.0))

    # Trials first (profiler-free), interleaved so drift is shared.
    timings = timing.interleaved_trials(
        {n: s.step for n, s in steps.items()}, trials=cfg.trials, steps=cfg.steps, warmup=cfg.warmup,
        sync=sync, on_trial=lambda n, t: tick(f"trial {t + 1}/{cfg.trials}: {n}"),
    )
    sync()
    outs = [s.last_output for s in steps.values()]
    identical = all(torch.equal(outs[0], o) for o in outs[1:])
    rows, timelines, traces = [], [], {}
    progress("profiling", done[0] / total)
    whole = profile_strategies(steps, profile_steps, with_stack=with_stack)
    for n, s in steps.items():
        tr = trace.window(whole, STRATEGY_RANGE + n)
        stats, tl = analyse(tr)
        # The exact line from sync debug mode, where the trace found a sync to attribute.
        debug = syncs.debug_sites_per_step(s.step, steps=3) if stats["syncs_per_step"] > 0 else {}
        s.drain()
        tick(f"measured {n}")
        if debug:
            stats["sync_site"] = max(debug, key=debug.get)
        if keep_traces:
            traces[n] = tr
        timelines.append({"kind": "timeline", "point_id": point_id(cfg), "strategy": n, "segments": tl})
        for t in timings[n]:
            r = {c: None for c in ROW_COLUMNS}
            r.update(_config_columns(cfg, n), status="ok", error="")
            r.update(trial=t.trial, steps=t.steps, step_ms=t.step_ms, step_ms_p50=t.p50, step_ms_p90=t.p90)
            r.update({k: v for k, v in stats.items() if k in r})
            rows.append(r)
    return PointResult(rows, timelines, traces, identical)
