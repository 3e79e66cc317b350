"""Measure one config point (all strategies together, trials interleaved) into tidy rows."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import pandas as pd
import torch

from dspark_lab import strategies as strategy_registry
from dspark_lab.config import LabConfig
from dspark_lab.measure import diagnostics, syncs, timing, trace
from dspark_lab.measure.profile import DEBUG_STEPS, PROFILE_STEPS, STRATEGY_RANGE, analyse, profile_strategies
from dspark_lab.predicate import enable_num_token_non_padded
from dspark_lab.results import noise
from dspark_lab.results import rows as rowbuild
from dspark_lab.model.workload import LabStep



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


def config_columns(cfg: LabConfig, strategy: str) -> dict:
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
    return rowbuild.failed_rows(config_columns(cfg, ""), strategies or strategy_registry.BUILTIN, error)


def _trial_row(cfg: LabConfig, name: str, t: timing.TrialTiming, **measured) -> dict:
    """The one row of a timed trial (results.rows.build_row), its diagnostics and `measured` added."""
    return rowbuild.build_row(
        **config_columns(cfg, name), **measured, **t.diag, status="ok", error="",
        trial=t.trial, steps=t.steps, step_ms=t.step_ms, step_ms_p50=t.p50, step_ms_p90=t.p90)


def headline_half_width(cfg: LabConfig, timings: dict) -> Optional[float]:
    """The point's headline CI half-width (%) over its quiet rounds so far (results.noise)."""
    rows = pd.DataFrame([_trial_row(cfg, n, t) for n, ts in timings.items() for t in ts])
    try:
        return noise.headline(noise.mark_disturbed(rows))["half_width_pct"]
    except ValueError:  # fewer than two strategies, or no baseline: no headline to aim at
        return None


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
) -> PointResult:
    """Measure every strategy at one config point.

    Timing trials run first, without the profiler, interleaved across strategies. Then one
    profiler session over the strategies in turn gives counts, the breakdown and a timeline for
    each. Python stacks are off by default because the Python tracer inflates host time, and the
    sync's exact source line comes from torch's sync debug mode instead.

    Every trial carries measure.diagnostics fields (`diagnose=False` leaves them None) and the
    noise verdict of results.noise (`disturbed`, `disturbed_reason`). With `target_ci_pct` and
    `time_cap_s`, rounds go on past `cfg.trials` until the headline ratio's CI half-width is at
    most `target_ci_pct` % or `time_cap_s` seconds have passed; rows say which (`stop_reason`)."""
    if (target_ci_pct is None) != (time_cap_s is None):
        raise ValueError("target_ci_pct and time_cap_s go together: give both (adaptive) or neither (fixed trials)")
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

    nvml = diagnostics.nvml_for(first.device.index or 0) if diagnose and first.device.type == "cuda" else None
    diag = {n: diagnostics.TrialDiagnostics(s, nvml=nvml) for n, s in steps.items()} if diagnose else None
    # Trials first (profiler-free), interleaved so drift is shared.
    fns = {n: s.step for n, s in steps.items()}
    if target_ci_pct is None:
        timings = timing.interleaved_trials(
            fns, trials=cfg.trials, steps=cfg.steps, warmup=cfg.warmup,
            sync=sync, on_trial=lambda n, t: tick(f"trial {t + 1}/{cfg.trials}: {n}"), diag=diag,
        )
        stop_reason, half_width = "fixed_trials", headline_half_width(cfg, timings)
    else:
        clk = clock or timing.time.monotonic
        t_start, trial_part, n_trials = clk(), total - len(names), [0]

        def on_adaptive(n: str, t: int) -> None:
            # The trials' share of the bar: the larger of the minimum trials done and the time cap
            # used (both only grow, so the bar never runs backwards; the CI may end it early).
            n_trials[0] += 1
            f = max(n_trials[0] / trial_part, (clk() - t_start) / time_cap_s)
            progress(f"round {t + 1} (to ±{target_ci_pct:g}% or {time_cap_s:g} s): {n}",
                     min(f, 0.99) * trial_part / total)

        res = timing.adaptive_trials(
            fns, min_trials=cfg.trials, steps=cfg.steps, warmup=cfg.warmup, sync=sync,
            half_width=lambda tm: headline_half_width(cfg, tm), target_ci_pct=target_ci_pct,
            time_cap_s=time_cap_s, clock=clk, on_trial=on_adaptive, diag=diag,
        )
        timings, stop_reason, half_width = res.timings, res.stop_reason, res.half_width_pct
        done[0] = trial_part
    sync()
    outs = [s.last_output for s in steps.values()]
    identical = all(torch.equal(outs[0], o) for o in outs[1:])
    rows, timelines, traces = [], [], {}
    progress("profiling", done[0] / total)
    whole = profile_strategies(steps, profile_steps, with_stack=with_stack)
    for n, s in steps.items():
        tr = trace.window(whole, STRATEGY_RANGE + n)
        stats, tl = analyse(tr)
        if s.device.type == "cuda":
            # Sync debug mode on every strategy, not only where the trace found a sync: its count is
            # checked against the trace's (a sync either one misses is flagged), and it gives the exact line.
            debug = syncs.debug_sites_per_step(s.step, steps=DEBUG_STEPS)
            stats.update(syncs.cross_check(stats, debug))
            named = {k: v for k, v in debug.items() if k != syncs.UNATTRIBUTED_SITE}
            if named:  # also where only debug mode saw it: the row is flagged, and the line helps
                stats["sync_site"] = max(named, key=named.get)
        else:
            stats = syncs.without_cuda(stats)
        s.drain()
        tick(f"measured {n}")
        if keep_traces:
            traces[n] = tr
        timelines.append({"kind": "timeline", "point_id": point_id(cfg), "strategy": n, "segments": tl})
        measured = {k: v for k, v in stats.items() if k in rowbuild.schema.ROW_COLUMNS}
        for t in timings[n]:
            rows.append(_trial_row(cfg, n, t, **measured, stop_reason=stop_reason, ci_half_width_pct=half_width))
    # The noise verdict at record time (results.noise re-computes the same from the rows).
    marked = noise.mark_disturbed(pd.DataFrame(rows))
    for r, d, why in zip(rows, marked["disturbed"], marked["disturbed_reason"]):
        r.update(disturbed=bool(d), disturbed_reason=why)
    return PointResult(rows, timelines, traces, identical)
