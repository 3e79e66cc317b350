"""Inspect a user's step: `measure_step` plus the guard, turned into an inspect record
(results.record.inspect_record): `inspect_step(fn)`, or two steps with their trials interleaved,
`inspect_pair(a, b)`. For a named target in a worker process that a time limit can stop, see
run/worker.py.

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
from typing import Callable, Iterable, Optional

import pandas as pd
import torch

from dspark_lab import guard
from dspark_lab.measure import breakdown, idle_causes, loop, probe, run_ahead, syncs, trace
from dspark_lab.measure.step import measure_step
from dspark_lab.results.rules.stats import median_ci
from dspark_lab.results.record.sync_sites import distinct_lines, merge_sites, same_function, try_parse

GUARD_STEPS = 3  # steps under the guard (after the measurement's warm-up)
# Copies between host and device: without CUDA there is no device to copy to or from (n/a, never 0).
NO_CUDA_COPY_COUNTS = ("d2h_per_step", "d2h_pageable_per_step", "h2d_pageable_per_step", "h2d_pinned_per_step")
NO_CUDA_PARTS = ("host_blocked_ms", "gpu_busy_ms", "gpu_idle_ms", "gpu_idle_after_sync_ms", "gpu_idle_sync_caused_ms")
NO_CUDA_PARTS += idle_causes.COLUMNS + run_ahead.COLUMNS[1:]  # no GPU: no idle to name, no launch to lead
COST_SCOPE = "function"  # a site's costs are its function's, split among its lines by count


# --- one step, in this process ---------------------------------------------------------------
def inspect_step(fn: Callable[[], object], *, target: str = "(a Python callable)", label: Optional[str] = None,
                 steps: int = 20, trials: int = 5, warmup: int = 3, allow: Iterable[str] = (),
                 source_root: Optional[Path] = None) -> dict:
    """The inspect record of `fn` (a zero-argument step). `source_root`: only files under it are
    quoted in the record (None: none are)."""
    label = label or getattr(fn, "__name__", "step")
    report = measure_step(fn, steps=steps, trials=trials, warmup=warmup, with_stack=True)
    ev = trace.events(report.trace)
    cuda = report.device == "cuda"
    # Every host wait, the copy calls that blocked by themselves included (measure.syncs.host_waits).
    blocking = syncs.sync_calls(ev)
    parts = breakdown.summary(ev, calls=blocking)
    # The waits by kind are text, not a part of the step: kept beside the parts.
    waits = {"charges": parts.pop("wait_charges", "{}"), "note": parts.pop("wait_note", "")}
    if not cuda:  # no GPU stream and nothing that can block on one: not measurable, never zero
        parts.update({k: float("nan") for k in NO_CUDA_PARTS})
    n = report.counts["steps_in_trace"]
    counts = {k: v for k, v in report.counts.items() if k != "sync_site"}
    counts["blocking_copies_per_step"] = report.counts[syncs.SYNC_KIND_COLUMNS[syncs.COPY_WAIT]] if cuda else float("nan")
    if not cuda:
        counts.update({k: float("nan") for k in NO_CUDA_COPY_COUNTS})
    guard_rec = _guard(fn, allow) if cuda else {"checked": [], "allow": list(allow), "violations": [], "allowed": [],
                                                "note": guard.NO_CUDA_MESSAGE}
    sites = _sites(report.debug_sites, blocking, ev, source_root, allow) if cuda else []
    med, lo, hi = median_ci([t.step_ms for t in report.timing])
    return {
        "kind": "dspark_inspect", "schema": 1, "target": target, "label": label,
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": report.device, "fingerprint": probe.fingerprint(),
        "options": {"steps": steps, "trials": trials, "warmup": warmup, "profiled_steps": n},
        "counts": counts, "parts": parts, "waits": waits,
        "trials": [t.step_ms for t in report.timing], "step_ms": med, "step_ms_lo": lo, "step_ms_hi": hi,
        "sites": sites, "cost_scope": COST_SCOPE, "timeline": breakdown.timeline(ev, calls=blocking),
        "guard": guard_rec, "pair": None,
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
    """Both records, their step times from shared interleaved rounds (paired per round)."""
    allow = tuple(allow)
    recs = [inspect_step(fn, target=t, label=lab, steps=steps, trials=1, warmup=warmup, allow=allow, source_root=r)
            for fn, t, lab, r in zip((before, after), targets, labels, source_roots)]
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    timings = loop.run_rounds({"before": before, "after": after}, loop.FixedRounds(trials), steps=steps, warmup=warmup, sync=sync).timings
    pair_id = uuid.uuid4().hex[:12]
    for rec, role in zip(recs, ("before", "after")):
        rec["trials"] = [t.step_ms for t in timings[role]]
        rec["step_ms"], rec["step_ms_lo"], rec["step_ms_hi"] = median_ci(rec["trials"])
        rec["options"]["trials"] = trials
        rec["pair"] = {"id": pair_id, "role": role}
    return recs[0], recs[1]

