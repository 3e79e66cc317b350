"""EP N step time from one rank's measured timings and the per-rank host jitter (torch-free).

Model. In every layer the MoE's collectives wait for the last rank to arrive, so a step of N
ranks lasts as long as its slowest rank's. Rank r's step, from one rank measured alone at the
same settings (ep_mode "predicate_only": one process, same work, no peers), is

    mean_r + noise_r + max(0, delay_r + jitter_r - slack_r)

  mean_r, noise_r  the mean and a resampled deviation of that one rank's per-step host-clock times
                   for rank r's strategy (measured steps, so syncs and pipelining are included);
  delay_r, jitter_r  the added host delay and a uniform 0..J_r draw, per step and rank;
  slack_r          how much late host work the GPU absorbs: the host's by-design readback wait
                   (it waits on the previous step's result, so a late host eats into it first).
                   A sync on the step's own work (device_direct) is no slack: it ends later too.

The prediction is the mean over resampled steps of the maximum over ranks, plus an optional
per-step collective cost (a collective time measured on real ranks, 0 by default).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

RESAMPLES = 4000
_SEED = 20261130


@dataclass(frozen=True)
class OneRank:
    """One rank's measured timings for one strategy."""

    per_step_ms: tuple  # host-clock step times (all trials)
    slack_ms: float = 0.0  # host readback wait per step (schema column host_readback_ms)

    @property
    def mean_ms(self) -> float:
        return float(np.mean(self.per_step_ms))


def predict_step_ms(per_rank: Sequence[OneRank], host_delay_ms: Sequence[float] = (),
                    host_jitter_ms: Sequence[float] = (), collective_ms: float = 0.0,
                    resamples: int = RESAMPLES, seed: int = _SEED, noise: bool = True) -> float:
    """Expected step time of len(per_rank) ranks, rank r running like per_rank[r]. `noise=False`
    leaves out the resampled per-step deviations (they overstate the maximum when they are common
    to all ranks, e.g. a pipelining pattern the collectives keep in lockstep)."""
    n = len(per_rank)
    if n < 1:
        raise ValueError("per_rank must hold one OneRank per rank")
    delays = np.asarray(host_delay_ms or (0.0,) * n, float)
    jitters = np.asarray(host_jitter_ms or (0.0,) * n, float)
    if delays.shape != (n,) or jitters.shape != (n,):
        raise ValueError(f"host_delay_ms and host_jitter_ms must give one value per rank ({n})")
    if (delays < 0).any() or (jitters < 0).any():
        raise ValueError("host_delay_ms and host_jitter_ms must be >= 0")
    rng = np.random.default_rng(seed)
    per_step = np.empty((resamples, n))
    for r, one in enumerate(per_rank):
        x = np.asarray(one.per_step_ms, float)
        if x.size == 0:
            raise ValueError(f"rank {r}: per_step_ms is empty")
        dev = rng.choice(x - x.mean(), size=resamples)
        dev = dev if noise else np.zeros(resamples)
        late = np.maximum(0.0, delays[r] + rng.uniform(0.0, 1.0, resamples) * jitters[r] - one.slack_ms)
        per_step[:, r] = x.mean() + dev + late
    return float(per_step.max(axis=1).mean() + collective_ms)


def one_rank_from(rows, samples: Mapping[str, Mapping[int, Sequence[float]]]) -> dict:
    """strategy -> OneRank from a one-process measurement (parallel.measure.measure_single's result)."""
    out = {}
    for case, by_rank in samples.items():
        strategy = case.split(" ")[0]
        slack = [r["host_readback_ms"] for r in rows if r["rank_case"] == case and r.get("host_readback_ms") is not None]
        out[strategy] = OneRank(tuple(by_rank[0]), float(np.median(slack)) if slack else 0.0)
    return out


def predict_case(one: Mapping[str, OneRank], strategies: Sequence[str], host_delay_ms: Sequence[float] = (),
                 host_jitter_ms: Sequence[float] = (), collective_ms: float = 0.0, noise: bool = True) -> float:
    missing = [s for s in strategies if s not in one]
    if missing:
        raise ValueError(f"no one-rank timings for strategy {missing[0]!r}; measured: {', '.join(one)}")
    return predict_step_ms([one[s] for s in strategies], host_delay_ms, host_jitter_ms, collective_ms, noise=noise)


def predicted_rows(one: Mapping[str, OneRank], cases, base_row: Optional[dict] = None,
                   collective_ms: float = 0.0) -> list:
    """One row per case, ep_mode "predicted" (cases: objects with strategies/host_delay_ms/host_jitter_ms/name)."""
    rows = []
    for c in cases:
        p = predict_case(one, c.strategies, c.host_delay_ms, c.host_jitter_ms, collective_ms)
        r = dict(base_row or {})
        r.update(ep_mode="predicted", world_size=len(c.strategies), ep_size=len(c.strategies), rank=None,
                 rank_case=c.name, rank_strategies=",".join(c.strategies), strategy=c.strategies[0],
                 step_ms=p, step_ms_max_rank=p, status="ok", error="", trial=None)
        rows.append(r)
    return rows


def validate(one: Mapping[str, OneRank], real_rows, collective_ms: float = 0.0) -> list:
    """Predicted vs measured per case of a real run: dicts with case, predicted_ms, measured_ms
    (median over trials of the max-rank step) and error_pct; the same without per-step noise as
    predicted_no_noise_ms / error_no_noise_pct."""
    by_case: dict = {}
    for r in real_rows:
        by_case.setdefault(r["rank_case"], []).append(r)
    out = []
    for name, rs in by_case.items():
        first = rs[0]
        n = first["world_size"]
        strategies = first["rank_strategies"].split(",")
        delays = [0.0] * n
        jitters = [0.0] * n
        for r in rs:
            delays[r["rank"]], jitters[r["rank"]] = r["host_delay_ms"], r["host_jitter_ms"]
        pred = predict_case(one, strategies, delays, jitters, collective_ms)
        flat = predict_case(one, strategies, delays, jitters, collective_ms, noise=False)
        measured = float(np.median([r["step_ms_max_rank"] for r in rs if r["rank"] == 0]))
        out.append({"case": name, "world_size": n, "dispatch": first.get("dispatch"), "predicted_ms": pred,
                    "measured_ms": measured, "error_pct": (pred / measured - 1) * 100,
                    "predicted_no_noise_ms": flat, "error_no_noise_pct": (flat / measured - 1) * 100})
    return out
