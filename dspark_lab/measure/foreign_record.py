"""The inspect record of a trace the kit did not make (`dspark-lab trace`): the steps it could account
for (measure.foreign_steps) charged by the kit's one rule (measure.syncs.host_waits,
measure.breakdown), in the shape of results.record.inspect_record, plus a "trace" section saying
what was found, what was left out of the totals and why, and what share of the GPU time the totals
hold.

Differences from `inspect`, said in the record: the step times are the profiled steps' wall times
(the trace has no profiler-free trials), there is no sync debug mode count and no guard. The first of
several steps is left out of the means, as in `inspect`. Where each step's wait leaves the GPU idle
until the next step's first launch (the known-cost step), the idle the first step opens with was caused
by a wait made before the trace began, which the rule cannot see, so its charge is short (in a
torch.profiler trace of the known-cost step on an H200, 2.18 ms against about 3.2 ms for each later
step); where the steps make no such wait, nothing is short and the step is left out all the same. In a
trace the kit recorded the first step also pays the profiler's start.
"""
from __future__ import annotations

import datetime as _dt
from typing import Optional

import pandas as pd

from dspark_lab.measure import breakdown, foreign_steps, syncs
from dspark_lab.measure.foreign_read import ForeignTrace
from dspark_lab.results.rules.stats import median_ci

MAX_WAIT_ROWS = 2000  # per-wait rows kept in a record (the totals hold them all)
OUTSIDE = "outside every step: no step holds it"
TIMING = "profiled: each accounted step's wall time in the trace (a trace holds no profiler-free trials)"


def _fingerprint(meta: dict) -> dict:
    props = meta.get("deviceProperties")
    name = props[0].get("name") if isinstance(props, list) and props and isinstance(props[0], dict) else None
    text = lambda v: str(v)[:80] if isinstance(v, (str, int, float)) and not isinstance(v, bool) else "n/a"  # noqa: E731
    return {"gpu": text(name) if name else "n/a (not in the trace)", "driver": text(meta.get("cuda_driver_version")),
            "cuda": text(meta.get("cuda_runtime_version")), "torch": "n/a (not in the trace)"}


def _marked(ev: pd.DataFrame, steps: foreign_steps.Steps) -> pd.DataFrame:
    """`ev` with one step range on the charged thread before its first event: the kit's frame of a
    trace none of whose steps is accounted (every wait is then outside them)."""
    first = float(ev.ts.min()) - 2.0
    mark = {"name": foreign_steps.STEP_RANGE, "cat": foreign_steps.HOST_RANGE_CAT, "ph": "X", "ts": first, "dur": 1.0,
            "end": first + 1.0, "pid": steps.thread[0], "tid": steps.thread[1]}
    return pd.concat([pd.DataFrame([mark]), ev], ignore_index=True)


def _thread_launches(ev: pd.DataFrame) -> set:
    lau = foreign_steps.launches(ev)
    return set(zip(lau.pid, lau.tid))


def abstained_waits(ev: pd.DataFrame, steps: foreign_steps.Steps) -> list[dict]:
    """Every host wait the totals leave out, with why: on the charged thread outside the accounted
    steps (in a step left out, or in none), and every sync call on another thread."""
    out = []
    left_out = {s["step"]: s["reason"] for s in steps.abstained if s["what"] == "step"}
    waits = syncs.host_waits(ev) if steps.accounted else syncs.host_waits(_marked(ev, steps))
    for r in waits[waits.step < 0].itertuples():
        win = next((w for w in steps.windows if w[0] <= r.ts < w[1]), None)
        why = f"in step {win[2]}, left out: {left_out.get(win[2], '')}" if win else OUTSIDE
        out.append({"what": "wait", "step": win[2] if win else "", "thread": f"{r.pid}/{r.tid}", "calls": r.calls,
                    "site": r.site, "blocked_ms": r.dur / 1e3, "reason": why})
    launching = _thread_launches(ev)
    others = ev[ev.cat.isin(syncs.HOST_API_CATS) & ev.name.isin(list(syncs.SYNC_KINDS))
                & ~((ev.pid == steps.thread[0]) & (ev.tid == steps.thread[1]))]
    for r in others.itertuples():
        why = ("a wait on a thread that launches no GPU work: nothing ties it to the GPU's idle"
               if (r.pid, r.tid) not in launching else
               "a wait on another thread than the charged one: the rule follows one thread's launches")
        out.append({"what": "wait", "step": "", "thread": f"{r.pid}/{r.tid}", "calls": r.name, "site": f"thread {r.tid}",
                    "blocked_ms": r.dur / 1e3, "reason": why})
    return out


def _wait_rows(ev: pd.DataFrame, calls: pd.DataFrame, table: pd.DataFrame, labels: list) -> list[dict]:
    """Each charged wait of the accounted steps: step, thread, kind, calls, op, site, its host time, charge."""
    rows = []
    for (_, c), (_, t) in zip(calls.iterrows(), table.iloc[:len(calls)].iterrows()):
        rows.append({"step": labels[int(c.step)], "thread": f"{c.pid}/{c.tid}", "wait": t.label, "calls": c.calls,
                     "op": c.op, "site": c.site, "readback": bool(c.readback), "blocked_ms": float(t.blocked_ms),
                     "cap_ms": float(t.cap_ms), "charged_ms": float(t.charged_ms), "why_nothing": t.why_nothing})
    return rows


def _sites(table: pd.DataFrame, n: int) -> list[dict]:
    """One site per Python frame (or op) the waits came from, per step: as inspect's, seen by the trace."""
    out = []
    for site, g in table.groupby("site", sort=False):
        charged = float(g.charged_ms.sum()) / n
        out.append({"site": site, "per_step": len(g) / n, "exact": False, "host_blocked_ms": float(g.blocked_ms.sum()) / n,
                    "gpu_idle_ms": charged, "wait": ", ".join(sorted(set(g.label))),
                    "why_nothing": "; ".join(sorted(set(g.why_nothing) - {""})) if charged <= 0 else "",
                    "code": None, "allowed": False})
    return sorted(out, key=lambda r: -r["per_step"])


def findings(t: ForeignTrace, steps: foreign_steps.Steps, ev: pd.DataFrame) -> dict:
    """What `trace` found in the file, whatever it could account for."""
    thread = None
    if steps.thread is not None:
        thread = {"pid": steps.thread[0], "tid": steps.thread[1], "name": t.thread_names.get(steps.thread, "")}
    return {"file": t.path, "events_read": t.total_events, "events_kept": len(t.events), "dropped": dict(t.dropped),
            "renamed": dict(t.renamed), "step_source": steps.source, "thread": thread,
            "steps_found": [w[2] for w in steps.windows], "steps_accounted": [steps.windows[i][2] for i in steps.accounted],
            "gpu_records": steps.gpu_records, "replays_without_kernels": steps.replays_without_kernels,
            "gpu_share": foreign_steps.gpu_share(t.events, steps), "abstained": list(steps.abstained),
            "abstained_waits": abstained_waits(ev, steps) if steps.thread is not None else []}


def record(t: ForeignTrace, step: Optional[str] = None) -> tuple[dict, Optional[dict]]:
    """(findings, the inspect-shaped record or None where no step could be accounted for)."""
    steps = foreign_steps.find(t.events, step)
    ev = foreign_steps.normalized(t.events, steps)
    found = findings(t, steps, ev)
    if not steps.accounted:
        return found, None
    labels = [steps.windows[i][2] for i in steps.accounted]
    skip = 1 if len(labels) > 1 else 0  # the first step's opening idle is a wait's from before the trace
    calls = syncs.sync_calls(ev)
    parts = breakdown.summary(ev, skip_first=skip, calls=calls)
    table = breakdown.wait_charges(ev, calls)
    own = table.iloc[:len(calls)]  # the rows after them are other threads' calls: left out (findings)
    kept = own[own.step >= skip]
    n = len(labels) - skip
    parts.update(breakdown.wait_summary(kept, n))
    waits = {"charges": parts.pop("wait_charges", "{}"), "note": parts.pop("wait_note", "")}
    counts = {k: v for k, v in syncs.counts_per_step(ev, calls).items() if k != "sync_site"}
    counts.update(blocking_copies_per_step=counts[syncs.SYNC_KIND_COLUMNS[syncs.COPY_WAIT]], debug_syncs_per_step=None,
                  sync_count_mismatch=None, sync_note="")
    walls = breakdown.per_step(ev, calls).wall_ms.tolist()[skip:]
    med, lo, hi = median_ci(walls)
    rows = _wait_rows(ev, calls, table, labels)
    found.update(skip_first=skip, timing=TIMING, waits=rows[:MAX_WAIT_ROWS], waits_total=len(rows))
    rec = {
        "kind": "dspark_inspect", "schema": 1, "target": t.path, "label": _label(t.path),
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": "cuda" if steps.gpu_records else "cpu", "fingerprint": _fingerprint(t.meta),
        "options": {"steps": len(labels), "trials": len(walls), "warmup": 0, "profiled_steps": len(labels)},
        "counts": counts, "parts": parts, "waits": waits, "trials": walls, "step_ms": med, "step_ms_lo": lo,
        "step_ms_hi": hi, "sites": _sites(kept[~kept.why_nothing.eq(breakdown.WHY_NOTHING["readback"])], n),
        "cost_scope": "wait", "timeline": breakdown.timeline(ev, calls=calls),
        "guard": {"checked": [], "allow": [], "violations": [], "allowed": [],
                  "note": "read from a recorded trace: no guard ran"},
        "pair": None, "trace": found,
    }
    return found, rec


def _label(path: str) -> str:
    name = str(path).replace("\\", "/").rsplit("/", 1)[-1]
    for suffix in (".gz", ".json"):
        name = name[:-len(suffix)] if name.endswith(suffix) else name
    return name or "trace"
