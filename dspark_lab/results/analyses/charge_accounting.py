"""Does each gallery case's charge account for what its fix saves? Torch-free: it reads a recorded
gallery (gallery/report.py's format) as a dict.

The charge is the GPU idle a variant's waits caused in its profiled steps; the saving is the paired
step-time change of the fix against the case, from the rounds that also gave both step times
(gallery/step_change.py). RULE says how the two are compared; every verdict comes with its reason.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from dspark_lab.results.rules.profiler_stretch import less_stretch, stretch_ms

ACCOUNTED, NOT_ACCOUNTED, CANNOT_TELL = "accounted", "not accounted", "cannot tell"
VERDICTS = (ACCOUNTED, NOT_ACCOUNTED, CANNOT_TELL)
GPU_BOUND_SHARE = 0.05  # a step whose time outside its launched work and charged idle is under 5% of it is GPU-bound
RULE = ("a step's charge = the GPU idle its waits caused plus the idle its by-design readback caused, by the same "
        "rule (a fix that moves its wait into the readback still pays it there). net charge = the case's charge "
        "less its profiler stretch - the fix's charge less its stretch (results/rules/profiler_stretch.py; ms per "
        "step). saving = -(the paired change, fix - case, ms per step) with its 95% CI; the net charge's own 95% "
        "CI is taken as the two charges' half-widths over their profiled steps added (wider than a 95% CI of "
        "charges measured apart: a conservative bound). A step is GPU-bound where its profiler-free time less the "
        "GPU work it launches less its charge (less stretch) is under 5% of the step. Where both steps are "
        "GPU-bound, the work the fix removed (the case's launched GPU work less the fix's; negative: work it "
        "added) is taken to show in the step time one for one (a model) and is taken off the saving and its CI. "
        "Where a step is not GPU-bound the work change is not taken off, and if it is larger than the saving's CI "
        "half-width the verdict is cannot tell. accounted: the net charge lies in the saving's CI widened by the "
        "net charge's own half-width (by the saving's CI alone in a gallery recorded without the charges' CIs); "
        "not accounted: outside it, by its distance to the nearer end; cannot tell: recorded without CUDA, a "
        "variant failed, a field missing (a gallery recorded before the fields existed), the work change above, "
        "or a CI that holds both 0 and a net charge other than 0")


def _charge(r: dict) -> float:
    """The step's charge: its waits' and its readback's (RULE)."""
    return r["gpu_idle_sync_caused_ms"] + r["gpu_idle_readback_caused_ms"]


def _charge_less_stretch(r: dict) -> Optional[float]:
    charge = _charge(r)
    return less_stretch(charge, charge, stretch_ms(r.get("profiled_step_ms"), r.get("step_ms")))


def _rest(r: dict, net: float) -> float:
    """The profiler-free step's time that is neither the work it launches nor its charged idle."""
    return r["step_ms"] - r["launched_gpu_ms"] - net


def _missing(rec: dict, c: dict) -> str:
    """Why this case cannot be accounted from its record ('' when it can)."""
    a, b = c["variants"]["case"], c["variants"]["fix"]
    ch = c.get("change") or {}
    if rec.get("device") != "cuda":
        return "recorded without CUDA: nothing can sync, so no charge or saving is measured"
    if a.get("status") != "ok" or b.get("status") != "ok":
        return f"a variant failed: {a.get('error') or b.get('error')}"
    if not ch.get("same_rounds") or ch.get("ms") is None:
        return ("recorded before the step times and the change were one measurement (its change has no ms from "
                "the variants' own paired rounds)")
    keys = ("launched_gpu_ms", "gpu_idle_sync_caused_ms", "gpu_idle_readback_caused_ms", "profiled_step_ms", "step_ms")
    gone = [f"{v}.{k}" for v, r in (("case", a), ("fix", b)) for k in keys if r.get(k) is None]
    return f"recorded before {', '.join(gone)} existed" if gone else ""


def _saving(c: dict, net_a: float, net_b: float) -> dict:
    """The saving with its CI, the work change and whether it was taken off (RULE)."""
    a, b, ch = c["variants"]["case"], c["variants"]["fix"], c["change"]
    saving, lo, hi = -ch["ms"], -ch["ms_high"], -ch["ms_low"]
    removed = a["launched_gpu_ms"] - b["launched_gpu_ms"]
    rest_a, rest_b = _rest(a, net_a), _rest(b, net_b)
    bound = rest_a < GPU_BOUND_SHARE * a["step_ms"] and rest_b < GPU_BOUND_SHARE * b["step_ms"]
    off = removed if bound else 0.0
    return {"saving ms": saving, "saving CI low ms": lo, "saving CI high ms": hi, "work removed ms": removed,
            "GPU-bound": bound, "rest ms case": rest_a, "rest ms fix": rest_b, "work taken off": bound,
            "wait saving ms": saving - off, "wait saving CI low ms": lo - off, "wait saving CI high ms": hi - off}


def _verdict(row: dict) -> tuple[str, str, Optional[float]]:
    """(verdict, reason, off by ms) of one case's numbers (RULE)."""
    net, lo, hi = row["net charge ms"], row["wait saving CI low ms"], row["wait saving CI high ms"]
    span = (f"the saving {row['wait saving ms']:.3f} ms (95% CI {lo:.3f} to {hi:.3f}"
            + (f", after {row['work removed ms']:+.3f} ms of launched work the fix removed"
               if row["work taken off"] and row["work removed ms"] else "") + ")")
    if not row["GPU-bound"] and abs(row["work removed ms"]) > (hi - lo) / 2:
        return CANNOT_TELL, (f"the fix changes the GPU work it launches by {-row['work removed ms']:+.3f} ms per step "
                             f"and a step is not GPU-bound (the rest of the step, neither launched work nor charged "
                             f"idle: {row['rest ms case']:.3f} ms case, {row['rest ms fix']:.3f} ms fix), so how much "
                             f"of that change shows in the step time is not known"), None
    half = row["net charge CI half ms"]
    own = (f", widened by the charges' own 95% CIs over the profiled steps (±{half:.3f} ms)" if half is not None
           else " (the charges' own CIs were not recorded: judged by the saving's CI alone)")
    half = half or 0.0
    if lo - half <= net <= hi + half:
        if lo <= 0 <= hi and net != 0:
            return CANNOT_TELL, f"{span} holds both 0 and the net charge {net:.3f} ms", None
        return ACCOUNTED, f"the net charge {net:.3f} ms lies in {span}{own}", 0.0
    off = net - hi - half if net > hi + half else net - lo + half
    return NOT_ACCOUNTED, (f"the net charge {net:.3f} ms is {abs(off):.3f} ms {'above' if off > 0 else 'below'} "
                           f"{span}{own}; the rest of the step (neither launched work nor charged idle) is "
                           f"{row['rest ms case']:.3f} ms in the case and {row['rest ms fix']:.3f} ms in the fix"), off


def _charges_half(a: dict, b: dict) -> Optional[float]:
    """Half the 95% CI of the net charge: the two charges' own half-widths added (None where not recorded)."""
    ha, hb = a.get("charge_ci_half_width_ms"), b.get("charge_ci_half_width_ms")
    return None if ha is None or hb is None else ha + hb


def account(rec: dict, c: dict) -> dict:
    """One case's row: the net charge, the saving, the work change, the verdict and its reason."""
    row = {"case": c["name"]}
    why = _missing(rec, c)
    if why:
        return {**row, "verdict": CANNOT_TELL, "reason": why}
    net_a, net_b = _charge_less_stretch(c["variants"]["case"]), _charge_less_stretch(c["variants"]["fix"])
    row.update({"case readback charge ms": c["variants"]["case"]["gpu_idle_readback_caused_ms"],
                "fix readback charge ms": c["variants"]["fix"]["gpu_idle_readback_caused_ms"],
                "case charge less stretch ms": net_a, "fix charge less stretch ms": net_b,
                "net charge ms": net_a - net_b,
                "net charge CI half ms": _charges_half(c["variants"]["case"], c["variants"]["fix"]),
                **_saving(c, net_a, net_b)})
    verdict, reason, off = _verdict(row)
    return {**row, "verdict": verdict, "reason": reason, "off by ms": off}


COLUMNS = ["case", "verdict", "net charge ms", "net charge CI half ms", "case readback charge ms", "fix readback charge ms",
           "case charge less stretch ms", "fix charge less stretch ms",
           "saving ms", "saving CI low ms", "saving CI high ms", "work removed ms", "work taken off", "GPU-bound",
           "rest ms case", "rest ms fix", "wait saving ms", "wait saving CI low ms", "wait saving CI high ms",
           "off by ms", "reason"]


def table(rec: dict) -> pd.DataFrame:
    """One row per case of the recorded gallery `rec` (COLUMNS; the numbers None where it cannot tell
    for want of a field)."""
    return pd.DataFrame([account(rec, c) for c in rec["cases"]], columns=COLUMNS)


def summary(rec: dict) -> str:
    """'20 of 24 accounted, 2 not accounted, 2 cannot tell' for the recorded gallery `rec`."""
    t = table(rec)
    counts = t["verdict"].value_counts()
    parts = [f"{int(counts.get(v, 0))} {v}" for v in VERDICTS if counts.get(v, 0)]
    return f"charges against savings, of {len(t)} cases: " + ", ".join(parts)


def lines(rec: dict) -> list[str]:
    """The rule, each case's verdict with its reason, and the summary."""
    return [f"rule: {RULE}"] + [f"  {r['case']}: {r['verdict']}: {r['reason']}" for r in table(rec).to_dict("records")] + [
        summary(rec)]
