"""The gallery's cases sorted by what their syncs cost on the machine that recorded them: syncs that
cost (the fix is measurably faster) and syncs that cost nothing here, with the reason read from the
same record. Torch-free: it reads a recorded gallery (gallery/report.py's format) as a dict.

The step-time change is the case's `change` (fix against case, trials paired per round: in a gallery
recorded by gallery/report.py's measure_case, the same rounds that give the step times the gallery
table shows) where present; otherwise the two variants' 95% CIs: apart, it costs; overlapping, no
measurable difference. Each row also carries whether the case's charge accounts for the fix's saving
(charge_accounting.RULE). A fix measurably slower than its case is a fix that costs
(a wait added to close a race, a wait moved where it waits longer): the counter-examples' group
where the data puts them there. A case is a counter-example where its shape says so (registry).
"""
from __future__ import annotations

import pandas as pd

from dspark_lab.results.analyses import charge_accounting

COSTS, FREE, UNMEASURED = "syncs that cost", "syncs that cost nothing here", "not measurable here"
PRICED = "fixes that cost"  # the fix is measurably slower than the case
GROUP_ORDER = (COSTS, FREE, PRICED, UNMEASURED)
COUNTER = "counter-example"  # how a counter-example's shape begins
GPU_BUSY_SHARE = 0.05  # a sync that starves the GPU for less than 5% of the step left it busy


def _change(c: dict) -> tuple[float, float, float, str]:
    """(pct, lo, hi, how): the fix's step time against the case's, in percent (< 0: the fix is faster)."""
    ch = c.get("change")
    if ch:
        how = "paired per round, the step times' own rounds" if ch.get("same_rounds") else "paired per round"
        return ch["pct"], ch["ci_low"], ch["ci_high"], how
    a, b = c["variants"]["case"], c["variants"]["fix"]
    pct = (b["step_ms"] / a["step_ms"] - 1) * 100
    lo, hi = (b["step_ms_lo"] / a["step_ms_hi"] - 1) * 100, (b["step_ms_hi"] / a["step_ms_lo"] - 1) * 100
    return pct, lo, hi, "from the two CIs"


def _caused(r: dict) -> float:
    """The GPU idle a variant's waits caused per step (measure.breakdown.SYNC_COST_RULE's charge)."""
    return r.get("gpu_idle_sync_caused_ms") or 0.0


def _kept(b: dict) -> tuple[float, float]:
    """The fix's own waits per step: (all of them, of them the by-design read-backs)."""
    readback = b.get("readback_syncs_per_step") or 0.0
    return (b.get("host_syncs_per_step") or 0.0) + readback, readback


def _fix_keeps(b: dict) -> str:
    """What the fix's own waits still cost in its step ('' where it keeps none)."""
    kept, readback = _kept(b)
    if not kept:
        return ""
    text = f"the fix keeps {kept:g} wait(s) per step of its own, charged {_caused(b):.3f} ms of GPU idle in its step"
    if readback:
        text += (f" ({readback:g} of them a by-design read-back, which the rule charges nothing: the GPU idle "
                 f"charged to no wait is {b['gpu_idle_ms'] - _caused(b):.3f} ms in the fix's step)"
                 if b.get("gpu_idle_ms") is not None else
                 f" ({readback:g} of them a by-design read-back, which the rule charges nothing)")
    return text


def _why_free(c: dict) -> str:
    a, b = c["variants"]["case"], c["variants"]["fix"]
    caused, step = _caused(a), a["step_ms"]
    if _kept(b)[0]:
        return _fix_keeps(b) + ": where it waits for the same queued work, the wait moved, it was not removed"
    if caused < GPU_BUSY_SHARE * step:
        return (f"the GPU stayed busy: the syncs caused {caused:.3f} ms of GPU idle in a {step:.3f} ms step, "
                f"so the host's wait was hidden behind GPU work")
    return f"the syncs caused {caused:.3f} ms of GPU idle per step, but the fix's step is no faster within the noise"


def _why_costs(c: dict, pct: float) -> str:
    a, b = c["variants"]["case"], c["variants"]["fix"]
    text = (f"the host blocked {a['host_blocked_ms']:.3f} ms per step and the syncs caused {_caused(a):.3f} ms of "
            f"GPU idle; the fix saves {-pct:.1f}% of the step")
    kept = _fix_keeps(b)
    return f"{text}; {kept}" if kept else text


def _why_priced(c: dict, pct: float) -> str:
    a, b = c["variants"]["case"], c["variants"]["fix"]
    kept = _fix_keeps(b) or "the fix keeps no wait of its own"
    return (f"the case's waits caused {_caused(a):.3f} ms of GPU idle per step; {kept}; the fix is {pct:.1f}% "
            f"slower")


def groups(rec: dict) -> pd.DataFrame:
    """One row per case: group, the step-time change (fix vs case) with its CI, how it was compared, why."""
    rows = []
    for c in rec["cases"]:
        a, b = c["variants"]["case"], c["variants"]["fix"]
        row = {"case": c["name"], "from": c["pr"].split(" (")[0], "syncs case": a["host_syncs_per_step"],
               "syncs fix": b["host_syncs_per_step"], "counter-example": str(c.get("shape", "")).startswith(COUNTER),
               "charge ms": _caused(a) if a["status"] == "ok" else None,
               "charge vs saving": charge_accounting.account(rec, c)["verdict"]}
        if a["status"] != "ok" or b["status"] != "ok" or not a["step_ms"] or not b["step_ms"]:
            rows.append({**row, "group": UNMEASURED, "why": a["error"] or b["error"] or "no step time"})
            continue
        pct, lo, hi, how = _change(c)
        row.update({"change %": pct, "CI low %": lo, "CI high %": hi, "change ms": (c.get("change") or {}).get("ms"),
                    "compared": how})
        if rec.get("device") != "cuda":
            row.update(group=UNMEASURED, why="recorded without CUDA: nothing can sync, every count is zero by construction")
        elif hi < 0:
            row.update(group=COSTS, why=_why_costs(c, pct))
        elif lo > 0:
            row.update(group=PRICED, why=_why_priced(c, pct))
        else:
            row.update(group=FREE, why=_why_free(c))
        rows.append(row)
    cols = ["group", "case", "from", "counter-example", "syncs case", "syncs fix", "charge ms", "change %", "CI low %",
            "CI high %", "change ms", "compared", "charge vs saving", "why"]
    out = pd.DataFrame(rows, columns=cols)
    order = out["group"].map({g: i for i, g in enumerate(GROUP_ORDER)})
    return out.iloc[order.argsort(kind="stable")].reset_index(drop=True)


def counter_examples(rec: dict) -> pd.DataFrame:
    """The counter-examples' rows of `groups(rec)`: where the measurement put each, and why."""
    g = groups(rec)
    return g[g["counter-example"]].reset_index(drop=True)


def counts_match(rec: dict) -> pd.DataFrame:
    """Each case's measured host syncs per step against the documented count, case and fix."""
    rows = [{"case": c["name"], "variant": v, "documented": r["expected_syncs"], "measured": r["host_syncs_per_step"],
             "matches": r["matches"]} for c in rec["cases"] for v, r in c["variants"].items()]
    return pd.DataFrame(rows, columns=["case", "variant", "documented", "measured", "matches"])


def _row_line(r: dict) -> str:
    change = "" if r["change %"] != r["change %"] else (f"{r['change %']:+.1f}% (95% CI {r['CI low %']:+.1f}% to "
                                                        f"{r['CI high %']:+.1f}%, {r['compared']}): ")
    return f"  {r['case']} ({r['from']}): {change}{r['why']} [charge against saving: {r['charge vs saving']}]"


def lines(rec: dict) -> list[str]:
    """Each group with its cases (a group empty on this recording says so; the unmeasured one is left
    out when empty), then the counter-examples with the group the measurement put each in."""
    g = groups(rec)
    out = []
    for group in GROUP_ORDER:
        rows = g[g["group"] == group]
        if group == UNMEASURED and not len(rows):
            continue
        out.append(f"{group}:" + ("" if len(rows) else " none in this recording"))
        out += [_row_line(r) for r in rows.to_dict("records")]
    counter = g[g["counter-example"]]
    out.append("counter-examples, where this recording puts them:" + ("" if len(counter) else " none recorded"))
    out += [f"  {r['case']}: {r['group']}" for r in counter.to_dict("records")]
    return out
