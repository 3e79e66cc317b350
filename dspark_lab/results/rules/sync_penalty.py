"""What device_direct's penalty is made of, from a point's measured parts: the sync-free step's GPU
work and the host time after the sync (the GPU idle the sync caused, read in the profiled pass).

A step with a host sync on its hot path costs about the GPU's own work plus the host time the GPU
then waits through (the host work after the sync, and the next step's before its first launch):
    predicted device_direct step = GPU busy of the sync-free step + GPU idle the sync caused.
The GPU's work is the same on two machines with one GPU; the host time after the sync is the host's
speed (its Python, its launches), so the headline ratio moves with the host. The prediction is a
model's number beside the measured ratio, not a measurement; where it misses, the profiled pass's
host time differed from the timed trials' (a disturbed host, or a profile taken at a different moment).
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from dspark_lab.results.facts.strategy_table import HEADLINE_PAIR

WITH_SYNC, SYNC_FREE = HEADLINE_PAIR  # the baseline (its copy syncs) and the sync-free reference


def penalty_parts(rows: pd.DataFrame) -> Optional[dict]:
    """{host_after_sync_ms, sync_free_gpu_ms, sync_free_step_ms, device_direct_step_ms, predicted_ratio,
    measured_ratio} of one point's rows (medians of its successful trials), or None when the rows lack
    either strategy or the profiled columns."""
    need = {"gpu_busy_ms", "gpu_idle_sync_caused_ms", "step_ms", "strategy"}
    if not need <= set(rows.columns):
        return None
    ok = rows[rows["status"] == "ok"] if "status" in rows else rows
    med = ok.groupby("strategy")[["step_ms", "gpu_busy_ms", "gpu_idle_sync_caused_ms"]].median()
    if not {SYNC_FREE, WITH_SYNC} <= set(med.index) or med.loc[[SYNC_FREE, WITH_SYNC]].isna().any().any():
        return None
    free, dd = med.loc[SYNC_FREE], med.loc[WITH_SYNC]
    predicted = (free["gpu_busy_ms"] + dd["gpu_idle_sync_caused_ms"]) / free["step_ms"]
    return {"host_after_sync_ms": float(dd["gpu_idle_sync_caused_ms"]), "sync_free_gpu_ms": float(free["gpu_busy_ms"]),
            "sync_free_step_ms": float(free["step_ms"]), "device_direct_step_ms": float(dd["step_ms"]),
            "predicted_ratio": float(predicted), "measured_ratio": float(dd["step_ms"] / free["step_ms"])}


def in_words(parts: Optional[dict]) -> str:
    if not parts:
        return ""
    return (f"host time after the sync {parts['host_after_sync_ms']:.2f} ms (the GPU idle it caused); predicted "
            f"ratio {parts['predicted_ratio']:.3f} from the measured parts (sync-free GPU work "
            f"{parts['sync_free_gpu_ms']:.2f} ms + that idle, over the sync-free step), a model's number")
