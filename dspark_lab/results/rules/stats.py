"""Statistics of recorded step times: medians with bootstrap CIs and paired comparisons.

numpy only (no torch), so every view (report, CLI, panel, notebooks) and the measurement itself
use the same numbers. A fixed seed: the same samples always give the same interval.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

# One seed and one resample count for every bootstrap and resampling in results (stats, noise,
# ep_predict): the same samples always give the same interval.
BOOTSTRAP_SEED = 20261130
BOOTSTRAP_RESAMPLES = 4000
MINUS = "\u2212"  # a real minus sign in user-facing text
EN_DASH = "\u2013"


def _bootstrap_ci(samples: Sequence[float], stat, level: float) -> tuple[float, float, float]:
    x = np.asarray(samples, dtype=float)
    if x.size == 0:
        raise ValueError(f"a confidence interval of the {stat.__name__} needs at least one sample")
    value = float(stat(x))
    if x.size == 1:
        return value, value, value
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    boots = stat(rng.choice(x, size=(BOOTSTRAP_RESAMPLES, x.size), replace=True), axis=1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return value, float(lo), float(hi)


def median_ci(samples: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Median and a percentile-bootstrap confidence interval of the median."""
    return _bootstrap_ci(samples, np.median, level)


def mean_ci(samples: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a percentile-bootstrap confidence interval of the mean (the same seed and resamples)."""
    return _bootstrap_ci(samples, np.mean, level)


def _signed(v: float) -> str:
    return f"{v:+.1f}%".replace("-", MINUS)


def difference_text(pct: float, lo: float, hi: float, level: float = 0.95) -> str:
    """'29.8% faster (95% CI 25.4%–32.3%)', '12.0% slower (95% CI 8.1%–15.0%)', or
    'no measurable difference (+1.2%, 95% CI −1.1% to +3.5%)' when the interval holds 0.
    A faster/slower interval is given as magnitudes in the same direction as the word."""
    if lo <= 0 <= hi:
        return f"no measurable difference ({_signed(pct)}, {level:.0%} CI {_signed(lo)} to {_signed(hi)})"
    word = "slower" if pct > 0 else "faster"
    a, b = sorted((abs(lo), abs(hi)))
    return f"{abs(pct):.1f}% {word} ({level:.0%} CI {a:.1f}%{EN_DASH}{b:.1f}%)"


def compare(a: Sequence[float], b: Sequence[float], a_name: str = "A", b_name: str = "B", level: float = 0.95,
            paired: Optional[bool] = None) -> dict:
    """How much slower A is than B, in percent of B's median, with a bootstrap CI.

    With paired samples (same length: trial t of A and B ran in the same round) the ratio is taken
    per round, which cancels drift between rounds; otherwise the two are resampled independently.
    `paired=False` resamples independently even at equal lengths (trials not run in shared rounds).
    If the interval contains 0 the verdict is "no measurable difference".
    Returns pct, ci_low, ci_high (signed: > 0 means A is slower), measurable, paired, n_a, n_b,
    `difference` (the wording without names) and `verdict` (with names).
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size == 0 or b.size == 0:
        raise ValueError("compare needs samples on both sides")
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    paired = a.size == b.size and a.size > 1 and paired is not False
    if paired:
        ratios = a / b
        pct = (float(np.median(ratios)) - 1) * 100
        boots = np.median(rng.choice(ratios, size=(BOOTSTRAP_RESAMPLES, ratios.size)), axis=1)
    else:
        pct = (np.median(a) / np.median(b) - 1) * 100
        ba = np.median(rng.choice(a, size=(BOOTSTRAP_RESAMPLES, a.size)), axis=1)
        bb = np.median(rng.choice(b, size=(BOOTSTRAP_RESAMPLES, b.size)), axis=1)
        boots = ba / bb
    lo, hi = ((np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2]) - 1) * 100).tolist()
    diff = difference_text(float(pct), lo, hi, level)
    if lo <= 0 <= hi:
        verdict = diff.replace("no measurable difference", f"no measurable difference between {a_name} and {b_name}", 1)
    else:
        number, rest = diff.split(" (", 1)
        verdict = f"{a_name} is {number} than {b_name} ({rest}"
    return {"pct": float(pct), "ci_low": float(lo), "ci_high": float(hi), "measurable": not (lo <= 0 <= hi),
            "paired": paired, "n_a": int(a.size), "n_b": int(b.size), "difference": diff, "verdict": verdict}


# Student's t, two-sided 95%, by degrees of freedom (a few samples: a bootstrap of 3 covers less than 95%).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t_975(df: float) -> float:
    """The two-sided 95% t quantile for `df` degrees of freedom, taken at the tabled df at or below it
    (never narrower than it should be, within the table); 1.96 past it, a little narrow (t is 2.04 at
    df 31)."""
    if df < 1:
        raise ValueError(f"df must be at least 1; got {df!r}")
    if df > max(T_975):
        return 1.96
    return T_975[max(k for k in T_975 if k <= df)]


def welch_difference_ci(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """mean(a) − mean(b) and its 95% CI by Welch's t (unequal variances, Welch–Satterthwaite degrees of
    freedom): two ways of measuring one quantity, each a few captures, equal within the measurement when
    the interval holds 0. Needs two samples a side."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    if x.size < 2 or y.size < 2:
        raise ValueError(f"a difference of means with its CI needs at least two samples a side; got {x.size} and {y.size}")
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    d = float(x.mean() - y.mean())
    if va + vb == 0:
        return d, d, d
    df = (va + vb) ** 2 / (va ** 2 / (x.size - 1) + vb ** 2 / (y.size - 1))
    half = t_975(df) * float(np.sqrt(va + vb))
    return d, d - half, d + half
