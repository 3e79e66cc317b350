"""Run-ahead and GPU idle by cause as a step's record shows them (measure/run_ahead.py and
measure/idle_causes.py measure them): the text lines of `inspect`, the rows `diff` compares, and the
idle shares by cause. Records made before these columns existed show them as not measured."""
from __future__ import annotations

import math
from typing import Optional

IDLE_CAUSES = (  # (cause, the parts' key, what it means)
    ("sync", "gpu_idle_sync_caused_ms", "drained by a sync, charged to it"),
    ("host_bound", "gpu_idle_host_bound_ms", "waiting for the host to launch while it was not blocked"),
    ("other", "gpu_idle_other_cause_ms", "launch latency, gaps between queued ops, another stream"),
)
SUMMARY_ROWS = (  # for results.analyses.step_diff: (label, where, key)
    ("launch lead, median ms", "parts", "launch_lead_median_ms"),
    ("launch lead, minimum ms", "parts", "launch_lead_min_ms"),
    ("run-ahead fraction (launches that found the GPU busy)", "parts", "run_ahead_fraction"),
    ("GPU idle host-bound, ms per step", "parts", "gpu_idle_host_bound_ms"),
    ("GPU idle other, ms per step", "parts", "gpu_idle_other_cause_ms"),
)


def _num(v) -> Optional[float]:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def shares(parts: dict) -> Optional[dict]:
    """{cause: share of the measured GPU idle}, summing to 1; None where the idle is not measured
    or zero, or the record has no causes."""
    idle = _num(parts.get("gpu_idle_ms"))
    vals = {c: _num(parts.get(k)) for c, k, _ in IDLE_CAUSES}
    if not idle or any(v is None for v in vals.values()):
        return None
    return {c: v / idle for c, v in vals.items()}


def text_lines(parts: dict) -> list[str]:
    """Two lines for a step's report: how far ahead the host launches, and the GPU idle by cause."""
    lead, low, frac = (_num(parts.get(k)) for k in ("launch_lead_median_ms", "launch_lead_min_ms", "run_ahead_fraction"))
    out = []
    if lead is not None and frac is not None:
        out.append(f"run-ahead: launch lead median {lead:+.3f} ms, minimum {low:+.3f} ms; {frac:.3f} of launches "
                   "found the GPU still busy (profiled steps)")
    sh, idle = shares(parts), _num(parts.get("gpu_idle_ms"))
    if sh is not None:
        out.append(f"GPU idle {idle:.3f} ms per step by cause: " + "; ".join(
            f"{c.replace('_', '-')} {_num(parts[k]):.3f} ms ({sh[c]:.0%}, {what})" for c, k, what in IDLE_CAUSES))
    return out
