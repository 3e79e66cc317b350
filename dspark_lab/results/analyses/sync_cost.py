"""What a sync costs at one config point, measured two ways and shown side by side (torch-free).

- The step-time loss: each strategy with syncs against the best sync-free strategy at the same
  point, from the profiler-free trials. Trial t of every strategy ran in the same round
  (measure/loop.run_rounds), so the loss is taken per round (which cancels drift between
  rounds): the median of the per-round differences in ms and of the per-round ratios, each with a
  percentile-bootstrap confidence interval.
- From the profiled steps: the GPU idle the trace charges to the strategy's syncs
  (`gpu_idle_sync_caused_ms`, measure.breakdown.SYNC_COST_RULE) and the GPU idle difference
  (the strategy's GPU idle minus the sync-free baseline's).
If the rule is right, the charged idle, the idle difference and the loss agree.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from dspark_lab.results.rules.stats import median_ci

CHARGED_COLUMN = "gpu_idle_sync_caused_ms"
# Runs recorded before CHARGED_COLUMN existed only have the first gap after each sync.
OLD_CHARGED_COLUMN = "gpu_idle_after_sync_ms"

COLUMNS = (
    "strategy", "baseline", "rounds",
    "loss_ms", "loss_ci_low_ms", "loss_ci_high_ms", "ratio", "ratio_ci_low", "ratio_ci_high", "measurable",
    "charged_idle_ms", "idle_diff_ms", "host_blocked_ms", "charged_column",
)


def _one_point(rows: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(rows, pd.DataFrame):
        raise TypeError(f"rows must be a pandas DataFrame of one point's rows; "
                        f"got {type(rows).__name__}")
    df = rows
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    for col in ("strategy", "trial", "step_ms", "syncs_per_step", "gpu_idle_ms"):
        if col not in df.columns:
            raise ValueError(f"rows lack the column {col!r} (need strategy, trial, step_ms, syncs_per_step, gpu_idle_ms)")
    for key in ("point_id", "run_id"):
        if key in df.columns and df[key].nunique() > 1:
            raise ValueError(f"rows hold {df[key].nunique()} values of {key!r}; pass the rows of one point of one run")
    if df.empty:
        raise ValueError("no rows with status 'ok'")
    return df


def _median(df: pd.DataFrame, col: str) -> float:
    if col not in df.columns:
        return float("nan")
    v = pd.to_numeric(df[col], errors="coerce").dropna()
    return float(v.median()) if len(v) else float("nan")


def sync_cost(rows: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """One row per strategy with syncs at this point (columns COLUMNS): the paired step-time loss
    against the best sync-free strategy (lowest median step_ms among those with no syncs) with
    its CI, beside the charged idle and the idle difference. Empty if no strategy syncs; a
    ValueError if none is sync-free (nothing to compare against)."""
    df = _one_point(rows)
    syncs = df.groupby("strategy", sort=False)["syncs_per_step"].median()
    free, with_syncs = list(syncs[syncs == 0].index), list(syncs[syncs > 0].index)
    if not with_syncs:
        return pd.DataFrame(columns=list(COLUMNS))
    if not free:
        raise ValueError(f"no sync-free strategy at this point (strategies: {sorted(syncs.index)})")
    step_med = df[df.strategy.isin(free)].groupby("strategy")["step_ms"].median()
    base = str(step_med.idxmin())
    b = df[df.strategy == base]
    b_trials = b.groupby("trial")["step_ms"].median()
    b_idle = _median(b, "gpu_idle_ms")
    out = []
    for s in with_syncs:
        d = df[df.strategy == s]
        paired = pd.concat([d.groupby("trial")["step_ms"].median().rename("s"), b_trials.rename("b")], axis=1).dropna()
        if paired.empty:
            raise ValueError(f"{s} and {base} have no trial round in common (column 'trial')")
        loss, lo, hi = median_ci(paired.s - paired.b, level)
        ratio, rlo, rhi = median_ci(paired.s / paired.b, level)
        charged_col = CHARGED_COLUMN if not np.isnan(_median(d, CHARGED_COLUMN)) else OLD_CHARGED_COLUMN
        out.append(dict(
            strategy=s, baseline=base, rounds=len(paired),
            loss_ms=loss, loss_ci_low_ms=lo, loss_ci_high_ms=hi, ratio=ratio, ratio_ci_low=rlo, ratio_ci_high=rhi,
            measurable=not (lo <= 0 <= hi),
            charged_idle_ms=_median(d, charged_col), idle_diff_ms=_median(d, "gpu_idle_ms") - b_idle,
            host_blocked_ms=_median(d, "host_blocked_ms"), charged_column=charged_col,
        ))
    return pd.DataFrame(out, columns=list(COLUMNS))


def describe(table: pd.DataFrame, level: float = 0.95) -> list[str]:
    """One sentence per strategy: the loss with its CI beside the charged idle and the idle difference."""
    lines = []
    for r in table.itertuples():
        old = " (older run: first gap after each sync only)" if r.charged_column != CHARGED_COLUMN else ""
        lines.append(
            f"{r.strategy}: {r.loss_ms:+.2f} ms per step against {r.baseline} ({level:.0%} CI {r.loss_ci_low_ms:+.2f} to "
            f"{r.loss_ci_high_ms:+.2f}, x{r.ratio:.2f}, {r.rounds} paired rounds); the trace charges its syncs "
            f"{r.charged_idle_ms:.2f} ms of GPU idle{old}; its GPU idle exceeds {r.baseline}'s by {r.idle_diff_ms:.2f} ms")
    return lines


def for_points(rows: pd.DataFrame, keys: Optional[list] = None, level: float = 0.95) -> pd.DataFrame:
    """sync_cost for each point (and run) in `rows`, with the key columns in front."""
    keys = keys or [k for k in ("run_id", "point_id", "workload", "ep_size", "batch_size", "gamma") if k in rows.columns]
    parts = []
    for key, g in rows.groupby([k for k in keys if k in ("run_id", "point_id")] or keys, sort=False, dropna=False):
        t = sync_cost(g, level)
        first = g.iloc[0]
        for k in reversed(keys):
            t.insert(0, k, first[k])
        parts.append(t)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=keys + list(COLUMNS))
