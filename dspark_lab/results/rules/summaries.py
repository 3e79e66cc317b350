"""Per-run and pooled summaries of step times, and paired comparisons within and across runs.

Functions of rows alone (the trials marked disturbed left out by the rows' verdict), so a view can
ask them of any selection; `Runs` offers them as methods.
"""
from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from dspark_lab.results.rules.noise import MIN_QUIET_ROUNDS, TOO_FEW_QUIET
from dspark_lab.results.rules.selection import ok_rows, undisturbed
from dspark_lab.results.rules.stats import compare as compare_samples, median_ci
from dspark_lab.results.facts.strategy_table import BASELINE, strategy_order

SUMMARY_COLUMNS = ["median_ms", "ci_low_ms", "ci_high_ms", "trials", "disturbed_left_out"]


def summary(rows: pd.DataFrame, pooled: bool = False) -> pd.DataFrame:
    """Per (run, strategy) — or per strategy over all runs when `pooled` — the median step time
    with its 95% CI, the trials used and the disturbed trials left out."""
    keys = ["strategy"] if pooled else ["run_id", "strategy"]
    ok = ok_rows(rows)
    ok = ok[[c for c in (*keys, "step_ms", "disturbed") if c in ok.columns]]  # a narrow copy per group
    out = []
    for key, g in ok.groupby(keys, sort=False):
        use, left_out = undisturbed(g)
        vals = pd.to_numeric(use["step_ms"], errors="coerce").dropna().tolist()
        med, lo, hi = median_ci(vals) if vals else (math.nan,) * 3
        key = key if isinstance(key, tuple) else (key,)
        out.append({**dict(zip(keys, key)), "median_ms": med, "ci_low_ms": lo, "ci_high_ms": hi,
                    "trials": len(vals), "disturbed_left_out": left_out})
    df = pd.DataFrame(out, columns=keys + SUMMARY_COLUMNS)
    order = {s: i for i, s in enumerate(strategy_order(df["strategy"]))}
    return df.sort_values(by=keys[:-1] + ["strategy"], key=lambda c: c.map(order) if c.name == "strategy" else c,
                          kind="stable").reset_index(drop=True)


def paired_times(rows: pd.DataFrame, strategy: str) -> list[float]:
    """One run's step times of a strategy, by trial round, disturbed trials left out."""
    g, _ = undisturbed(ok_rows(rows))
    g = g[g["strategy"] == strategy].sort_values("trial")
    return pd.to_numeric(g["step_ms"], errors="coerce").dropna().tolist()


def compare(rows: pd.DataFrame, a: str, b: str, min_quiet_rounds: Optional[int] = None) -> dict:
    """A against B within ONE run's rows of one point, paired by trial round (stats.compare),
    on the trials both kept (a round with a disturbed trial on either side is left out).
    `min_quiet_rounds`: below this many such rounds the comparison gives its median difference and
    the count, no CI (`ci_low`/`ci_high` None, `measurable` None); the headline passes
    noise.MIN_QUIET_ROUNDS. `quiet_rounds` is always set."""
    runs = rows["run_id"].nunique() if "run_id" in rows.columns else 1
    if runs > 1:
        raise ValueError("compare takes one run's rows; use cross_run for several runs")
    g, _ = undisturbed(ok_rows(rows))
    ta = g[g["strategy"] == a].set_index("trial")["step_ms"]
    tb = g[g["strategy"] == b].set_index("trial")["step_ms"]
    both = sorted(set(ta.index) & set(tb.index))
    xa = [float(ta[t]) for t in both] if both else paired_times(rows, a)
    xb = [float(tb[t]) for t in both] if both else paired_times(rows, b)
    out = {**compare_samples(xa, xb, a, b), "quiet_rounds": len(both)}
    if min_quiet_rounds is not None and len(both) < min_quiet_rounds:
        diff = f"{out['pct']:+.1f}% over {len(both)} quiet rounds, {TOO_FEW_QUIET} (needs {min_quiet_rounds})"
        out.update(ci_low=None, ci_high=None, measurable=None, difference=diff, verdict=f"{a} against {b}: {diff}")
    return out


def best_fix(rows: pd.DataFrame, baseline: str = BASELINE) -> Optional[str]:
    """The strategy other than the baseline with the lowest median step time in these rows."""
    return best_in_summary(summary(rows), baseline)


def best_in_summary(s: pd.DataFrame, baseline: str = BASELINE) -> Optional[str]:
    """best_fix from a summary already formed (`summary(rows)`)."""
    s = s[(s["strategy"] != baseline) & (s["trials"] > 0)]
    return None if s.empty else str(s.sort_values("median_ms", kind="stable").iloc[0]["strategy"])


def cross_run(rows: pd.DataFrame, labels: dict, baseline: str = BASELINE) -> list[dict]:
    """Per run holding these rows' point: the baseline against that run's best fix."""
    out = []
    for rid, g in rows.groupby("run_id", sort=False):
        best = best_fix(g, baseline)
        if best is None or baseline not in set(g["strategy"]):
            continue
        c = compare(g, best, baseline)
        out.append({"run_id": rid, "label": labels.get(str(rid), rid), "best": best, **c})
    return out
