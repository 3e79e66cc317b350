"""A small model of the draft step's timeline: what sets device_direct's penalty (a model, not a
measurement; `check` sets it beside the recorded runs).

One decode step of the kit's step (model/workload.py), host side in order: batch prep before the
target verify (P1), the target verify's launch (GPU work V), draft prep (D), the scalar, prep after
it (P2), the draft graph's launch (GPU work g); L is the launches and bookkeeping.
  - Sync-free, the host runs ahead of the GPU, so a step costs the busier side: max(P1+D+P2+L, V+g).
  - With device_direct the host waits in the scalar's sync until V is done, and the GPU waits for
    the host through P2, L and the next step's P1: P1 + max(V, D) + P2 + L.
The penalty is their difference: it follows the host work exposed around the sync (P1 + P2 + L),
and vanishes where the host is the bottleneck (the GPU was idle anyway) and, relatively, where the
GPU is (V dwarfs the exposed host work).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from dspark_lab.results.facts.strategy_table import BASELINE, SYNC_FREE


@dataclass(frozen=True)
class StepModel:
    prep_before_ms: float  # P1
    draft_prep_ms: float  # D
    post_scalar_ms: float  # P2
    launch_ms: float  # L
    verify_ms: float  # V
    draft_gpu_ms: float  # g

    @classmethod
    def from_costs(cls, prep_before_target_us: float, draft_prep_us: float, post_scalar_us: float,
                   target_verify_ms: float, launch_ms: float, draft_gpu_ms: float) -> "StepModel":
        """From a workload preset's constants (config.WorkloadCosts) and the measured launch and
        draft-GPU times."""
        return cls(prep_before_target_us / 1e3, draft_prep_us / 1e3, post_scalar_us / 1e3, launch_ms,
                   target_verify_ms, draft_gpu_ms)

    @property
    def host_ms(self) -> float:
        return self.prep_before_ms + self.draft_prep_ms + self.post_scalar_ms + self.launch_ms

    @property
    def gpu_ms(self) -> float:
        return self.verify_ms + self.draft_gpu_ms

    def sync_free_ms(self) -> float:
        return max(self.host_ms, self.gpu_ms)

    def device_direct_ms(self) -> float:
        return self.prep_before_ms + max(self.verify_ms, self.draft_prep_ms) + self.post_scalar_ms + self.launch_ms

    def penalty_ms(self) -> float:
        return self.device_direct_ms() - self.sync_free_ms()

    def scaled(self, host_prep_scale: float = 1.0, verify_ms: float | None = None) -> "StepModel":
        """The same step with its host prep scaled (LabConfig.host_prep_scale) and another target verify."""
        return replace(self, prep_before_ms=self.prep_before_ms * host_prep_scale,
                       draft_prep_ms=self.draft_prep_ms * host_prep_scale,
                       post_scalar_ms=self.post_scalar_ms * host_prep_scale,
                       verify_ms=self.verify_ms if verify_ms is None else verify_ms)


def measured_inputs(rows: pd.DataFrame) -> dict:
    """The two inputs the presets do not fix, from a point's recorded non_blocking rows (profiled
    pass): launches and bookkeeping (host launch + copy + other Python) and the draft graph's GPU time
    (GPU busy less the target verify)."""
    nb = rows[(rows["strategy"] == SYNC_FREE) & (rows["status"] == "ok")]
    if nb.empty:
        raise ValueError(f"the point has no successful {SYNC_FREE} rows to take the launch and draft times from")
    launch = float(nb[["host_launch_ms", "host_copy_ms", "host_other_ms"]].sum(axis=1).median())
    draft = float((nb["gpu_busy_ms"] - nb["target_verify_ms"]).median())
    return {"launch_ms": launch, "draft_gpu_ms": max(draft, 0.0), "target_verify_ms": float(nb["target_verify_ms"].median())}


def check(points: pd.DataFrame, costs: dict) -> pd.DataFrame:
    """The model beside the recorded step times, per recorded point (one run, one point per group of
    `points`): predicted and measured device_direct and sync-free (non_blocking) medians and the
    penalty. `costs`: workload -> {prep_before_target_us, draft_prep_us, post_scalar_us} (the presets)."""
    out = []
    for (rid, pid), g in points.groupby(["run_id", "point_id"], sort=False):
        wl = g["workload"].iloc[0]
        if wl not in costs or not {BASELINE, SYNC_FREE} <= set(g["strategy"]):
            continue
        c = costs[wl]
        m = StepModel.from_costs(c["prep_before_target_us"], c["draft_prep_us"], c["post_scalar_us"],
                                 **measured_inputs(g))
        med = g[g["status"] == "ok"].groupby("strategy")["step_ms"].median()
        out.append({"run_id": rid, "workload": wl, "ep_size": int(g["ep_size"].iloc[0]),
                    "batch_size": int(g["batch_size"].iloc[0]), "gamma": int(g["gamma"].iloc[0]),
                    f"model {BASELINE} ms": m.device_direct_ms(), f"measured {BASELINE} ms": med[BASELINE],
                    "model sync-free ms": m.sync_free_ms(), f"measured {SYNC_FREE} ms": med[SYNC_FREE],
                    "model penalty ms": m.penalty_ms(),
                    "measured penalty ms": med[BASELINE] - med[SYNC_FREE]})
    return pd.DataFrame(out).round(2)
