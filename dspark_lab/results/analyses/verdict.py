"""The one line `dspark-lab inspect` and `diff` end with: the verdict, why, and the next step.
Torch-free: it reads an inspect record (results.record.inspect_record) or a diff (step_diff.diff).

A site "costs" when the GPU idle it caused is at least COST_SHARE of the step: below that the GPU
stayed busy while the host waited, and removing the sync would buy nothing measurable.
"""
from __future__ import annotations

import math
import re

import pandas as pd

COST_SHARE = 0.05
GUARD = "dspark_lab.guard.no_host_syncs"
# A line that names its sync: a read-back, a host-built device tensor, a copy, an explicit wait.
NAMES_A_SYNC = re.compile(r"\.item\(|\.tolist\(|\.cpu\(|\.numpy\(|torch\.tensor\(|\.to\(|synchronize\(|\bbool\(|\bif\b")


def _num(v) -> float:
    return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def costliest(rec: dict):
    """The site whose syncs caused the most GPU idle per step, or None."""
    sites = [s for s in rec["sites"] if not s.get("allowed")]
    return max(sites, key=lambda s: (_num(s["gpu_idle_ms"]), _num(s["host_blocked_ms"])), default=None)


def inspect_line(rec: dict) -> str:
    """verdict / why / next for one inspected step."""
    if rec["device"] != "cuda":
        return ("verdict: not measurable here; why: without CUDA nothing can block the host on a GPU; "
                "next: run it on a GPU, or read a recording made on one")
    top, step = costliest(rec), _num(rec["step_ms"])
    if top is None:
        return (f"verdict: no host sync outside the allow-list; why: the trace and sync debug mode saw none; "
                f"next: keep it so in CI with {GUARD}")
    idle = _num(top["gpu_idle_ms"])
    if step and idle >= COST_SHARE * step:
        return (f"verdict: {top['site']} costs most: {idle:.3f} ms of GPU idle per {step:.3f} ms step "
                f"({idle / step:.0%}); why: the host waits there for the queued GPU work, then the GPU waits for "
                f"the host; next: remove that sync, then prove it with `dspark-lab diff BEFORE AFTER`")
    n = len([s for s in rec["sites"] if not s.get("allowed")])
    return (f"verdict: {n} sync site(s), none costs measurably (the costliest caused {idle:.3f} ms of GPU idle "
            f"per {step:.3f} ms step); why: the GPU stayed busy while the host waited; "
            f"next: leave them, or name them in allow= of {GUARD} so a new one fails CI")


def diff_line(d: dict) -> str:
    """verdict / why / next for a diff (step_diff.diff)."""
    st, sites = d["step_time"], d["sites"]
    removed = sites[sites["status"] == "removed"]["site"].tolist()
    added = sites[sites["status"] == "added"]["site"].tolist()
    what = (f"removed {', '.join(removed)}" if removed else "no site removed") + (f"; added {', '.join(added)}" if added else "")
    if not d["cuda"]:
        return ("verdict: not measurable here; why: measured without CUDA, so sync costs are not measurable; "
                "next: run the diff on a GPU")
    if st["measurable"] and st["pct"] < 0:
        return (f"verdict: AFTER is {st['difference']}; why: {what}; "
                f"next: guard the fixed step in CI with {GUARD} (allow= the syncs that cost nothing)")
    if st["measurable"]:
        return (f"verdict: AFTER is {st['difference']}; why: {what}; "
                f"next: inspect AFTER's added or changed sites before merging")
    return (f"verdict: {st['difference']}; why: {what}, and what it removed cost nothing here; "
            f"next: inspect the step again and fix the site that costs most")


def site_costs(rec: dict) -> pd.DataFrame:
    """Each sync line of an inspected step with what it cost: GPU idle caused per step, its share of
    the step, the reading (costs most / costs / costs nothing here, by COST_SHARE) and whether the
    line itself names a sync or the sync is inside a library call."""
    step, top = _num(rec["step_ms"]), costliest(rec)
    rows = []
    for s in rec["sites"]:
        idle = _num(s["gpu_idle_ms"])
        share = idle / step if step else 0.0
        reading = ("by design (allowed)" if s.get("allowed") else "costs most" if s is top and share >= COST_SHARE
                   else "costs" if share >= COST_SHARE else "costs nothing here")
        code = s.get("code") or ""
        rows.append({"site": s["site"], "code": code, "per step": s["per_step"], "host blocked ms": _num(s["host_blocked_ms"]),
                     "GPU idle caused ms": idle, "share of step": share, "reading": reading,
                     "the sync is": "named in the line" if NAMES_A_SYNC.search(code) else "inside a library call" if code else "not quoted"})
    cols = ["site", "code", "per step", "host blocked ms", "GPU idle caused ms", "share of step", "reading", "the sync is"]
    return pd.DataFrame(rows, columns=cols).sort_values("GPU idle caused ms", ascending=False, kind="stable").reset_index(drop=True)
