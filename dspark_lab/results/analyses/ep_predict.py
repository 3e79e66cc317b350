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

from dspark_lab.results.record.row_record import RowRecord
from dspark_lab.results.rules.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED


@dataclass(frozen=True)
class OneRank:
    """One rank's measured timings for one strategy."""

    per_step_ms: tuple  # host-clock step times (all trials)
    slack_ms: float = 0.0  # host readback wait per step (schema column host_readback_ms)
    level_ms: Optional[float] = None  # the step level to use instead of the mean (e.g. the median trial)
    slack_by_rank: tuple = ()  # per-rank slack where measured per rank (rank r beyond it: slack_ms)

    @property
    def mean_ms(self) -> float:
        return float(np.mean(self.per_step_ms)) if self.level_ms is None else float(self.level_ms)

    def slack_for(self, rank: int) -> float:
        return float(self.slack_by_rank[rank]) if rank < len(self.slack_by_rank) else float(self.slack_ms)


def predict_step_ms(per_rank: Sequence[OneRank], host_delay_ms: Sequence[float] = (),
                    host_jitter_ms: Sequence[float] = (), collective_ms: float = 0.0,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED, noise: bool = True) -> float:
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
        late = np.maximum(0.0, delays[r] + rng.uniform(0.0, 1.0, resamples) * jitters[r] - one.slack_for(r))
        per_step[:, r] = one.mean_ms + dev + late
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


def predicted_point_id(world_size: int, dispatch) -> str:
    """The point id of the predicted rows at one world size and dispatch (no config hash: nothing
    was run there)."""
    return f"predicted-ep{world_size}-{dispatch}"


def predicted_rows(one: Mapping[str, OneRank], cases, base_row: Optional[dict] = None,
                   collective_ms: float = 0.0) -> list[RowRecord]:
    """One record per case, ep_mode "predicted" (cases: objects with strategies/host_delay_ms/
    host_jitter_ms/name), each whole when made: its point id (predicted_point_id of the case's world
    size and `base_row`'s dispatch) and every column given here, checked by RowRecord."""
    base = dict(base_row or {})
    rows = []
    for c in cases:
        p = predict_case(one, c.strategies, c.host_delay_ms, c.host_jitter_ms, collective_ms)
        n = len(c.strategies)
        columns = {**base, "ep_mode": "predicted", "world_size": n, "ep_size": n, "rank": None, "rank_case": c.name,
                   "rank_strategies": ",".join(c.strategies), "step_ms": p, "step_ms_max_rank": p, "trial": None}
        rows.append(RowRecord(predicted_point_id(n, base.get("dispatch")), c.strategies[0], "ok", "", columns))
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


# -- The EP model from the same dispatch's uniform cases (held-out validation) -----------------------
#
# Why the one-process model above misses (h200x2 EP 2 runs of 2026-11-30): its one rank has no peer and
# no collective, and it runs with CUDA graphs, so it cannot know (a) the dispatch's own per-step cost
# (allreduce +0.3 ms, a2a_fixed +0.1..2.5 ms depending on the trial, a2a_dynamic +6.8 ms: that mode is
# eager and reads split sizes on the host in every layer), nor (b) the readback slack of an eager run.
# This model takes each strategy's step from a run of the SAME dispatch in which every rank runs that
# strategy (a uniform case: the collective cost and graph/eager mode are then measured, not assumed),
# and predicts the cases that mix strategies or add host delays, and larger N, from them.

MODEL = ("EP-N step = mean over steps of the max over ranks of (rank r's strategy's per-step time measured "
         "with every rank running that strategy under the same dispatch, plus the part of rank r's host "
         "delay/jitter its readback slack does not absorb)")


def uniform_cases(real_rows) -> set:
    """Names of the cases in which every rank runs the same strategy and no rank has a host delay or
    jitter (judged over all of a case's rows: a delay on rank 0 makes the whole case non-uniform)."""
    by_case: dict = {}
    for r in real_rows:
        by_case.setdefault(r["rank_case"], []).append(r)
    return {c for c, rs in by_case.items()
            if len(set(str(rs[0]["rank_strategies"]).split(","))) == 1
            and not any((r.get("host_delay_ms") or 0.0) or (r.get("host_jitter_ms") or 0.0) for r in rs)}


def one_rank_from_uniform(real_rows, samples: Optional[Mapping] = None) -> dict:
    """strategy -> OneRank from the uniform cases of one real EP run (one dispatch mode).

    level_ms: the median over trials of the max-rank step (what validate() measures). per_step_ms:
    rank 0's per-step times (`samples[case][0]`, PointResult.samples) where given, for the per-step
    noise; else just the level. slack_by_rank: each rank's median host_readback_ms in that case (a
    host delay on rank r is absorbed by rank r's own readback wait first); slack_ms, used for ranks
    beyond those measured (EP 4, 8), the smallest of them."""
    uniform = uniform_cases(real_rows)
    by_case: dict = {}
    for r in real_rows:
        if r.get("status", "ok") == "ok" and r["rank_case"] in uniform:
            by_case.setdefault(r["rank_case"], []).append(r)
    out = {}
    for case, rs in by_case.items():
        strategy = rs[0]["rank_strategies"].split(",")[0]
        # The level: the median trial of the max-rank step, the statistic validate() measures.
        level = float(np.median([float(r["step_ms_max_rank"]) for r in rs if r["rank"] == 0]))
        by_rank = (samples or {}).get(case)
        # Per-step deviations need per-step samples; recorded rows hold trial means only (no noise term).
        steps = tuple(by_rank[0] if 0 in by_rank else by_rank["0"]) if by_rank else (level,)
        slack_by_rank = {}
        for r in rs:
            if r.get("host_readback_ms") is not None and np.isfinite(r["host_readback_ms"]):
                slack_by_rank.setdefault(int(r["rank"]), []).append(float(r["host_readback_ms"]))
        med = {k: float(np.median(v)) for k, v in slack_by_rank.items()}
        per_rank = tuple(med.get(k, min(med.values())) for k in range(max(med) + 1)) if med else ()
        out[strategy] = OneRank(steps, min(med.values()) if med else 0.0, level, per_rank)
    if not out:
        raise ValueError("real_rows hold no uniform case (every rank the same strategy, no host delay/jitter)")
    return out


def validate_held_out(real_rows, samples: Optional[Mapping] = None) -> list:
    """Predicted vs measured for the cases of one real EP run that are NOT uniform (mixed strategies,
    host delays), with inputs from its uniform cases only (one_rank_from_uniform): validate()'s dicts
    plus `inputs` (the strategies whose uniform cases were used)."""
    one = one_rank_from_uniform(real_rows, samples)
    uniform = uniform_cases(real_rows)
    held = [r for r in real_rows if r.get("status", "ok") == "ok" and r["rank_case"] not in uniform]
    inputs = ", ".join(sorted(one))
    out = validate(one, held)
    for v in out:
        v["inputs"] = f"uniform cases of the same run: {inputs}"
    return out
