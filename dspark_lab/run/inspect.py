"""Inspect a user's step: measured through parallel.orchestrator.PointRun (a measure.step.StepPlan
on run.callable_executor.CallableExecutor: timed trials, then the profiled report), the guard told
once it is done (GuardObserver), turned into an inspect record (results.record.inspect_record):
`inspect_step(fn)`, or two steps with their trials interleaved, `inspect_pair(a, b)`. For a named
target in a worker process that a time limit can stop, see run/worker.py.

Sites are counted by line, each line once (results.record.sync_sites): sync debug mode's exact lines,
and the trace's blocking calls by function only where debug mode saw no line of that function (a
blocking pageable copy, another library's sync); never the guard's records, whose number per sync
is the guard's business. Each site's host blocked time and the GPU idle it caused come from
the profiled steps (measure.breakdown's rule), per function; a function holding several sync
lines has its cost split among them by their per-step counts (the record says so).
"""
from __future__ import annotations

import datetime as _dt
import uuid
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import pandas as pd

from dspark_lab import guard
from dspark_lab.measure import breakdown, idle_causes, probe, run_ahead, syncs, trace
from dspark_lab.measure.step import StepPlan, StepReport, StepResult
from dspark_lab.parallel.orchestrator import PointObserver, PointRun
from dspark_lab.run.callable_executor import CallableExecutor
from dspark_lab.results.rules.stats import median_ci
from dspark_lab.results.record.sync_sites import distinct_lines, merge_sites, same_function, try_parse

GUARD_STEPS = 3  # steps under the guard (after the measurement's warm-up)
PROFILE_STEPS = 10  # steps profiled, with Python stacks (each sync call attributed to its function)
PAIR_ROLES = ("before", "after")  # a pair's steps, as their interleaved trials name them
# Copies between host and device: without CUDA there is no device to copy to or from (n/a, never 0).
NO_CUDA_COPY_COUNTS = ("d2h_per_step", "d2h_pageable_per_step", "h2d_pageable_per_step", "h2d_pinned_per_step")
NO_CUDA_PARTS = ("host_blocked_ms", "gpu_busy_ms", "gpu_idle_ms", "gpu_idle_after_sync_ms", "gpu_idle_sync_caused_ms",
                 "gpu_idle_readback_caused_ms", "charge_ci_half_width_ms")
NO_CUDA_PARTS += idle_causes.COLUMNS + run_ahead.COLUMNS[1:]  # no GPU: no idle to name, no launch to lead
COST_SCOPE = "function"  # a site's costs are its function's, split among its lines by count


# --- one step, in this process ---------------------------------------------------------------
def inspect_step(fn: Callable[[], object], *, target: str = "(a Python callable)", label: Optional[str] = None,
                 steps: int = 20, trials: int = 5, warmup: int = 3, allow: Iterable[str] = (),
                 source_root: Optional[Path] = None, observers: Sequence[PointObserver] = ()) -> dict:
    """The inspect record of `fn` (a zero-argument step), measured through PointRun (a StepPlan on a
    CallableExecutor, `observers` told as it goes). `source_root`: only files under it are quoted in
    the record (None: none are)."""
    label = label or getattr(fn, "__name__", "step")
    plan = StepPlan((label,), steps=steps, trials=trials, warmup=warmup, profile_steps=PROFILE_STEPS, with_stack=True)
    report, guard_rec = _measured(fn, plan, allow, observers)
    return step_record(report, guard_rec, plan, target=target, label=label, allow=allow, source_root=source_root)


class GuardObserver(PointObserver):
    """The guard in counting mode over GUARD_STEPS more steps of `fn`, once the step is measured
    (on CUDA; without it the record says nothing could be checked): `record` after the run."""

    def __init__(self, fn: Callable[[], object], allow: Iterable[str]):
        self.fn, self.allow, self.record = fn, tuple(allow), None

    def on_done(self, result: StepResult) -> None:
        if any(r.device == "cuda" for r in result.reports.values()):
            self.record = _guard(self.fn, self.allow)
        else:
            self.record = {"checked": [], "allow": list(self.allow), "violations": [], "allowed": [],
                           "note": guard.NO_CUDA_MESSAGE}


def _measured(fn: Callable[[], object], plan: StepPlan, allow: Iterable[str],
              observers: Sequence[PointObserver] = ()) -> tuple[StepReport, dict]:
    """`fn`'s report to `plan` (one name) and the guard's record, through PointRun."""
    watch = GuardObserver(fn, allow)
    result = PointRun(plan, CallableExecutor({plan.names[0]: fn}), [watch, *observers]).run()
    return result.reports[plan.names[0]], watch.record


def step_record(report: StepReport, guard_rec: dict, plan: StepPlan, *, target: str, label: str,
                allow: Iterable[str] = (), source_root: Optional[Path] = None,
                timing: Optional[list] = None, pair: Optional[dict] = None) -> dict:
    """The inspect record of one measured step: its report's accounting and the guard's record;
    its step time from `timing` ([TrialTiming], default the report's own trials) and, for one of a
    pair, `pair` ({"id", "role"})."""
    ev = trace.events(report.trace)
    cuda = report.device == "cuda"
    # Every host wait, the copy calls that blocked by themselves included (measure.syncs.host_waits).
    blocking = syncs.sync_calls(ev)
    parts = breakdown.summary(ev, calls=blocking)
    # The waits by kind are text, not a part of the step: kept beside the parts.
    waits = {"charges": parts.pop("wait_charges", "{}"), "note": parts.pop("wait_note", "")}
    if not cuda:  # no GPU stream and nothing that can block on one: not measurable, never zero
        parts.update({k: float("nan") for k in NO_CUDA_PARTS})
    counts = {k: v for k, v in report.counts.items() if k != "sync_site"}
    counts["blocking_copies_per_step"] = report.counts[syncs.SYNC_KIND_COLUMNS[syncs.COPY_WAIT]] if cuda else float("nan")
    if not cuda:
        counts.update({k: float("nan") for k in NO_CUDA_COPY_COUNTS})
    sites = _sites(report.debug_sites, blocking, ev, source_root, allow) if cuda else []
    trials = [t.step_ms for t in (report.timing if timing is None else timing)]
    med, lo, hi = median_ci(trials)
    return {
        "kind": "dspark_inspect", "schema": 1, "target": target, "label": label,
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": report.device, "fingerprint": probe.fingerprint(),
        "options": {"steps": plan.steps, "trials": len(trials), "warmup": plan.warmup,
                    "profiled_steps": report.counts["steps_in_trace"]},
        "counts": counts, "parts": parts, "waits": waits,
        "trials": trials, "step_ms": med, "step_ms_lo": lo, "step_ms_hi": hi,
        "sites": sites, "cost_scope": COST_SCOPE, "timeline": breakdown.timeline(ev, calls=blocking),
        "guard": guard_rec, "pair": pair,
    }


def _guard(fn: Callable[[], object], allow: Iterable[str]) -> dict:
    """The guard in counting mode over a few steps: every record, and the distinct lines not allowed."""
    with guard.no_host_syncs(count=True, allow=tuple(allow)) as g:
        for _ in range(GUARD_STEPS):
            fn()
    recs = lambda allowed: [(s.site, s.seen_by == guard.DEBUG_MODE) for s in g.syncs if s.allowed == allowed]  # noqa: E731
    return {"checked": list(g.checked), "allow": list(allow), "steps": GUARD_STEPS,
            "violations": distinct_lines(recs(False)), "allowed": distinct_lines(recs(True)),
            "records": [[s.site, s.kind, s.seen_by, s.allowed] for s in g.syncs],
            # by-design syncs and why (the allow entry's REASON or the line's `# sync-ok: <reason>`)
            "reasons": {s.site: s.reason for s in g.syncs if s.allowed}}


def _function_costs(blocking: pd.DataFrame, ev: pd.DataFrame) -> dict:
    """(path, function) -> (host blocked, GPU idle caused) in ms per step, over the profiled steps
    after the first (it pays the profiler's start), as breakdown.summary averages them."""
    caused = breakdown.sync_caused_gaps(ev, blocking)
    steps = max(len(syncs.step_windows(ev)) - 1, 1)
    out: dict = {}

    def where(site: str):
        s = try_parse(site)
        return s.where if s else ("", site)

    for r in blocking[(~blocking.readback) & (blocking.step >= 1)].itertuples():
        b, i = out.get(where(r.site), (0.0, 0.0))
        out[where(r.site)] = (b + (r.end - r.ts) / 1e3 / steps, i)
    for r in caused[caused.sync_step >= 1].itertuples():
        b, i = out.get(where(r.sync_site), (0.0, 0.0))
        out[where(r.sync_site)] = (b, i + (r.end - r.start) / 1e3 / steps)
    return out


def _sites(debug_sites: dict, blocking: pd.DataFrame, ev: pd.DataFrame, source_root: Optional[Path],
           allow: Iterable[str]) -> list[dict]:
    """Each sync line once: sync debug mode's exact lines, and the trace's blocking calls (outside the
    by-design readback) by function where debug mode saw no line of that function; each with its
    per-step count, costs, source line, and whether the allow-list names it."""
    n = max(len(syncs.step_windows(ev)), 1)
    function_level: dict = {}
    for site in blocking[~blocking.readback].site:
        function_level[site] = function_level.get(site, 0.0) + 1.0 / n
    merged = merge_sites(debug_sites, function_level)
    costs = _function_costs(blocking, ev)
    kinds = _function_waits(blocking, ev)
    parsed = {key: try_parse(key) for key in merged}
    where = {key: (s.where if s else ("", key)) for key, s in parsed.items()}
    per_function: dict = {}
    for key, count in merged.items():
        per_function[where[key]] = per_function.get(where[key], 0.0) + count
    out = []
    for key, count in merged.items():
        blocked, idle = _costs_of(costs, where[key])
        share = count / per_function[where[key]] if per_function[where[key]] else 0.0
        wait, why = _costs_of(kinds, where[key], ("", ""))
        out.append({"site": key, "per_step": count, "exact": key in debug_sites,
                    "host_blocked_ms": blocked * share, "gpu_idle_ms": idle * share,
                    "wait": wait, "why_nothing": why if idle <= 0 else "",
                    "code": source_line(parsed[key], source_root) if parsed[key] else None,
                    "allowed": guard.is_allowed(key, tuple(allow))})
    return sorted(out, key=lambda r: -r["per_step"])


def _function_waits(blocking: pd.DataFrame, ev: pd.DataFrame) -> dict:
    """(path, function) -> (the kinds of wait it made, as views name them; why it was charged nothing
    where it was), over the steps outside the by-design readback."""
    table = breakdown.wait_charges(ev, blocking)
    table = table[(table.step >= 0) & (table.why_nothing != breakdown.WHY_NOTHING["readback"])]
    out: dict = {}
    for site, g in table.groupby("site"):
        s = try_parse(site)
        out[s.where if s else ("", site)] = (", ".join(sorted(set(g.label))),
                                             "; ".join(sorted(set(g.why_nothing) - {""})))
    return out


def _costs_of(costs: dict, where: tuple, missing: tuple = (0.0, 0.0)) -> tuple:
    """A function's costs, found under the spelling of its path the trace gave if not this one."""
    if where in costs:
        return costs[where]
    return next((v for w, v in costs.items() if same_function(w, where)), missing)


def source_line(site, root: Optional[Path]) -> Optional[str]:
    """The text of a site's line, read only from a .py file under `root` (the target's folder)."""
    if root is None:
        return None
    root = Path(root).resolve()
    short = Path(site.path)
    for cand in (root / short, root.parent / short, root / short.name):
        try:
            p = cand.resolve()
        except (OSError, RuntimeError):
            continue
        if p.suffix == ".py" and p.is_relative_to(root) and p.is_file():
            try:
                lines = p.read_text().splitlines()
            except (OSError, UnicodeDecodeError):
                return None
            return lines[site.line - 1].strip() if 1 <= site.line <= len(lines) else None
    return None


# --- two steps measured together: accounting apart, timing interleaved -----------------------
def inspect_pair(before: Callable[[], object], after: Callable[[], object], *, targets: tuple[str, str],
                 labels: tuple[str, str], steps: int = 20, trials: int = 5, warmup: int = 3,
                 source_roots: tuple = (None, None), allow: Iterable[str] = ()) -> tuple[dict, dict]:
    """Both records, each step's accounting through its own PointRun (one timed trial, the profiled
    pass, the guard), their step times from shared interleaved rounds (paired per round, a PointRun
    of both that profiles nothing)."""
    allow = tuple(allow)
    plans = [StepPlan((lab,), steps=steps, trials=1, warmup=warmup, profile_steps=PROFILE_STEPS, with_stack=True)
             for lab in labels]
    measured = [_measured(fn, plan, allow) for fn, plan in zip((before, after), plans)]
    timed = PointRun(StepPlan(PAIR_ROLES, steps=steps, trials=trials, warmup=warmup, profile_steps=0),
                     CallableExecutor(dict(zip(PAIR_ROLES, (before, after))))).run()
    pair_id = uuid.uuid4().hex[:12]
    a, b = (step_record(report, guard_rec, plan, target=t, label=lab, allow=allow, source_root=r,
                        timing=timed.timings[role], pair={"id": pair_id, "role": role})
            for (report, guard_rec), plan, t, lab, r, role in zip(measured, plans, targets, labels, source_roots, PAIR_ROLES))
    return a, b
