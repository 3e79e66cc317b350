"""Disturbed trials and the headline ratio, from rows alone (numpy + pandas; no torch, no plotly).

THE RULE (also the README's): a trial is disturbed when its host real-work time per step exceeds
the median of its strategy's trials at that point (same run) by more than the larger of 3 MADs
and a tenth of their median step time — or its GPU time per step does by the same bound, or its
SM clock fell more than 10% below their median, or NVML reported a hardware or thermal slowdown
during it. A run recorded without host diagnostics is judged on its step time instead of its host work.
NVML's software power cap reason alone does not count: the H200 reports it in most trials while
its SM clock stays at its usual value (seen on the device machine: all 735 trials of three runs),
and a real clock reduction is caught by the SM-clock check.

Why this rule: on a shared machine the measured disturbances were host-side (trials 2.2-2.6 ms per
step slower, i.e. about 30% of an sglang_profile step, while the SM clock and the target verify's
GPU time stayed put), so host work outside the deliberate waits is where they show, and the GPU
time and clock checks catch the other side. The bound is relative to the step because what matters
is whether a trial's step time is inflated; a tenth of a step is far above the quiet jitter of host
work and well below the disturbances seen. Three MADs keep a uniformly noisy group (nothing to
single out) from flagging half its trials. The median of all the group's trials serves as the
quiet reference: it is robust while fewer than half the trials are disturbed (8.7% were).
Groups of fewer than MIN_TRIALS trials are not judged on statistics (only on NVML reasons).

The headline of a point is the paired per-round ratio of one strategy's step time over another's
(trial t of each ran in the same interleaved round): device_direct / non_blocking where both were
measured, else the baseline over the fastest other strategy. Rounds where either trial is
disturbed are left out of it, and the count is reported beside it.

THE SECOND RULE, at the level of runs (RUN_RULE, `run_disturbance`): the trial rule cannot see a
run disturbed from its first trial to its last, since it judges each trial against its own run. So
a run's quiet median host work per step at a point is compared with the lowest among the runs of
the same machine at the same point, with the same kind of bound (3 MADs of that quietest run, or a
tenth of its median step). Runs.headline skips a run so disturbed.
A run loaded alone is judged against the machine's baseline: the quietest host work per point the
machine has recorded, kept in the calibration cache and written into each new run's header when it
starts (`host_baseline`, from `quiet_baselines` of earlier runs; run/baseline.py). The baselines in
the headers of a machine's runs at a point take part as if they were runs of it. A point with
neither another run nor a baseline "cannot be judged alone", and the headline says so.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from dspark_lab.results.facts.strategy_table import BASELINE, HEADLINE_PAIR
from dspark_lab.results.record.schema import MACHINE_KEYS
from dspark_lab.results.rules.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED

RULE = ("A trial is disturbed when its host real-work time per step exceeds the median of its strategy's "
        "trials at that point by more than max(3 MADs, 10% of their median step time), or its GPU time per "
        "step does by the same bound, or its SM clock fell more than 10% below their median, or NVML "
        "reported a hardware or thermal slowdown during it.")
# Bump when the trial rule changes (RULE, a constant below or the code judging a group): the
# columnar cache (results/loading/cache.py) keys its entries on it, so runs are judged again by the new rule.
RULE_VERSION = 1
MAD_K = 3.0
STEP_FRACTION = 0.10  # of the group's median step time
CLOCK_DROP = 0.10  # SM clock below (1 - CLOCK_DROP) x the group's median
MIN_TRIALS = 3
LEVEL = 0.95
# The fewest quiet rounds a headline CI is formed from, and the fewest an adaptive point must have
# before it may stop on its CI (measure.loop): from prefixes of three long H200 runs of the reference
# point, 10 rounds was where every prefix stayed within 1% of its full run (measure/loop.py).
MIN_QUIET_ROUNDS = 10
TOO_FEW_QUIET = "too few quiet rounds for a confidence interval"
# NVML clock-event reasons that mark a trial (software power cap is left out: see the docstring).
_SLOWDOWN_NAMES = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
# The columns the rule reads, and the frame attribute that says which rule version judged a frame.
JUDGED_COLUMNS = ("step_ms", "host_work_ms", "gpu_ms", "sm_clock_mhz", "throttle_reasons")
JUDGED_BY = "disturbed_rule_version"


def _group_keys(rows: pd.DataFrame) -> list[str]:
    """One group: the trials of one strategy at one point of one run (and one rank of one rank case)."""
    return [c for c in ("run_id", "point_id", "strategy", "rank", "rank_case", "dispatch") if c in rows.columns]


def _ok(rows: pd.DataFrame) -> pd.Series:
    return rows["status"].eq("ok") if "status" in rows.columns else pd.Series(True, index=rows.index)


def _num(rows: pd.DataFrame, col: str) -> pd.Series:
    if col not in rows.columns:
        return pd.Series(np.nan, index=rows.index, dtype=float)
    return pd.to_numeric(rows[col], errors="coerce").astype(float)


def _mad(x: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def group_positions(rows: pd.DataFrame, keys: Sequence[str], dropna: bool = False) -> list[np.ndarray]:
    """Each group's row positions (0..len-1, ascending), groups in order of first appearance: one
    grouping pass, then numpy slices (a pandas group per group costs ~1 ms; 23,000 groups at 500 runs)."""
    if not len(rows):
        return []
    if not keys:
        return [np.arange(len(rows))]
    codes = rows.groupby(list(keys), sort=False, dropna=dropna).ngroup().to_numpy()
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]  # rows of a NaN key when dropna
    return np.split(order, np.flatnonzero(np.diff(codes[order])) + 1) if len(order) else []


def _outliers(label: str, x: np.ndarray, step_med: float, reasons: list) -> None:
    """Reasons for values more than max(MAD_K MADs, STEP_FRACTION of the median step) over the median."""
    ok = np.isfinite(x)
    if ok.sum() < MIN_TRIALS:
        return
    med = float(np.median(x[ok]))
    bound = max(MAD_K * _mad(x[ok]), STEP_FRACTION * step_med)
    for i in np.flatnonzero(ok & (x - med > bound)):
        reasons[i].append(f"{label} +{x[i] - med:.2f} ms/step over its median (bound {bound:.2f})")


def _judge_group(g: dict) -> list[str]:
    """Reasons per row of one (run, point, strategy) group ("" = quiet); `g`: JUDGED_COLUMNS -> arrays."""
    step = g["step_ms"]
    reasons: list[list[str]] = [[] for _ in range(len(step))]
    if len(step) >= MIN_TRIALS and np.isfinite(step).sum() >= MIN_TRIALS:
        step_med = float(np.nanmedian(step))
        host = g["host_work_ms"]
        _outliers(*(("host work", host) if np.isfinite(host).sum() >= MIN_TRIALS else ("step time", step)),
                  step_med, reasons)
        _outliers("GPU time", g["gpu_ms"], step_med, reasons)
        sm = g["sm_clock_mhz"]
        ok = np.isfinite(sm)
        if ok.sum() >= MIN_TRIALS:
            med = float(np.median(sm[ok]))
            for i in np.flatnonzero(ok & (sm < (1 - CLOCK_DROP) * med)):
                reasons[i].append(f"SM clock {sm[i]:.0f} MHz (median {med:.0f})")
    thr = g["throttle_reasons"]
    for i in np.flatnonzero(np.isfinite(thr)):
        names = [n for bit, n in _SLOWDOWN_NAMES.items() if int(thr[i]) & bit]
        if names:
            reasons[i].append("NVML slowdown: " + ",".join(names))
    return ["; ".join(r) for r in reasons]


def mark_disturbed(rows: pd.DataFrame) -> pd.DataFrame:
    """A copy of `rows` with `disturbed` (bool) and `disturbed_reason` set together by the rule
    (RULE), replacing any recorded ones, stamped with RULE_VERSION (`judged` then reads them).
    Failed rows are never disturbed."""
    out = rows.copy()
    reasons = np.full(len(out), "", dtype=object)
    ok_at = np.flatnonzero(_ok(out).to_numpy(bool))  # positions, so a repeated index works too
    ok = out.iloc[ok_at]
    values = {c: _num(ok, c).to_numpy() for c in JUDGED_COLUMNS}
    for idx in group_positions(ok, _group_keys(ok)):
        reasons[ok_at[idx]] = _judge_group({c: v[idx] for c, v in values.items()})
    out["disturbed_reason"] = reasons.tolist()
    out["disturbed"] = [bool(r) for r in reasons]
    out.attrs[JUDGED_BY] = RULE_VERSION
    return out


def judged(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` with the current rule's verdict: as they are when it set their `disturbed` and
    `disturbed_reason` already (the loader and Runs judge each run once), else judged now. A
    recorded verdict is the rule as it stood then: derived data, never trusted."""
    if rows.attrs.get(JUDGED_BY) == RULE_VERSION and {"disturbed", "disturbed_reason"} <= set(rows.columns):
        return rows
    return mark_disturbed(rows)


def disturbed_flags(rows: pd.DataFrame) -> pd.Series:
    """The verdict of the current rule, from the rows' own diagnostics (recomputed, whatever the
    rows recorded: see `judged` for reading a verdict already set)."""
    return mark_disturbed(rows)["disturbed"]


def disturbed_counts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per run, point and strategy: trials, disturbed trials."""
    df = judged(rows)
    df = df[_ok(df)]
    keys = _group_keys(df)
    return (df.groupby(keys, sort=False)["disturbed"].agg(trials="size", disturbed="sum")
            .reset_index().astype({"disturbed": int}))


# -- the headline ------------------------------------------------------------------------------------

def paired_ratio(a_ms: Sequence[float], b_ms: Sequence[float], level: float = LEVEL) -> dict:
    """Median of per-round ratios a/b with a percentile-bootstrap CI; half-width in % of the ratio."""
    a, b = np.asarray(a_ms, float), np.asarray(b_ms, float)
    if a.size != b.size:
        raise ValueError(f"paired_ratio needs one sample per round on both sides; got {a.size} and {b.size}")
    if a.size == 0:
        raise ValueError("paired_ratio needs at least one round")
    r = a / b
    med = float(np.median(r))
    if r.size == 1:
        lo = hi = med
    else:
        rng = np.random.default_rng(BOOTSTRAP_SEED)
        boots = np.median(rng.choice(r, size=(BOOTSTRAP_RESAMPLES, r.size)), axis=1)
        lo, hi = (float(v) for v in np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2]))
    hw = (hi - lo) / 2 / med * 100 if r.size > 1 else None
    return {"ratio": med, "ci_low": lo, "ci_high": hi, "half_width_pct": hw, "rounds": int(r.size)}


def headline_pair(strategies: Iterable[str], step_ms: Optional[dict] = None) -> tuple[str, str]:
    """The table's headline pair (the baseline vs the sync-free reference) when both exist, else the baseline vs the fastest other
    (`step_ms`: strategy -> median step time) — the point's baseline vs its best fix."""
    present = list(dict.fromkeys(strategies))
    if all(s in present for s in HEADLINE_PAIR):
        return HEADLINE_PAIR
    others = [s for s in present if s != BASELINE]
    if BASELINE not in present or not others:
        raise ValueError(f"a headline needs {BASELINE} and another strategy; got {present}")
    best = min(others, key=lambda s: (step_ms or {}).get(s, np.inf)) if step_ms else others[0]
    return BASELINE, best


def headline(rows: pd.DataFrame, pair: Optional[tuple[str, str]] = None, level: float = LEVEL) -> dict:
    """The headline of ONE point of ONE run: the paired per-round step-time ratio a/b over rounds
    where neither trial is disturbed, with its CI, and the disturbed-trial counts beside it."""
    ok = judged(rows)
    ok = ok[_ok(ok)]
    if ok.empty:
        raise ValueError("headline needs rows with status ok")
    ok = ok[[c for c in ("run_id", "point_id", "strategy", "trial", "step_ms", "disturbed") if c in ok.columns]]
    for col in ("run_id", "point_id"):
        if col in ok.columns and ok[col].nunique() > 1:
            raise ValueError(f"headline takes one point of one run; got {ok[col].nunique()} values of {col}")
    quiet_med = ok[~ok["disturbed"]].groupby("strategy")["step_ms"].median().to_dict()
    a, b = pair or headline_pair(ok["strategy"].unique(), quiet_med)
    side = {s: ok[ok["strategy"] == s].set_index("trial") for s in (a, b)}
    rounds = sorted(set(side[a].index) & set(side[b].index))
    quiet = [t for t in rounds if not side[a].at[t, "disturbed"] and not side[b].at[t, "disturbed"]]
    counts = {s: int(g["disturbed"].sum()) for s, g in ok.groupby("strategy", sort=False)}
    out = {"a": a, "b": b, "rounds": len(rounds), "quiet_rounds": len(quiet),
           "excluded_rounds": len(rounds) - len(quiet), "disturbed": counts,
           "disturbed_total": int(sum(counts.values())), "trials_total": int(len(ok))}
    if quiet:
        out.update(paired_ratio(side[a].loc[quiet, "step_ms"].astype(float), side[b].loc[quiet, "step_ms"].astype(float), level))
        out["rounds"] = len(rounds)
        if len(quiet) < MIN_QUIET_ROUNDS:  # the median stands; an interval from so few rounds does not
            out.update(ci_low=None, ci_high=None, half_width_pct=None)
    else:
        out.update(ratio=None, ci_low=None, ci_high=None, half_width_pct=None)
    out["text"] = describe(out, level)
    return out


def describe(h: dict, level: float = LEVEL) -> str:
    """The headline ratio in words with what was left out: `ratio_words`, then `left_out_words`."""
    if h.get("ratio") is None:
        return f"{ratio_words(h, level)} ({left_out_words(h)})"
    return f"{ratio_words(h, level)}; {left_out_words(h)}"


def ratio_words(h: dict, level: float = LEVEL) -> str:
    """The ratio, its CI (or why there is none) and its quiet rounds: the headline's first line."""
    if h.get("ratio") is None:
        return f"{h['a']} / {h['b']}: no quiet round to compare"
    if h.get("ci_low") is None:
        return (f"{h['a']} / {h['b']} step time = {h['ratio']:.3f} over {h['quiet_rounds']} quiet rounds, "
                f"{TOO_FEW_QUIET} (needs {MIN_QUIET_ROUNDS})")
    hw = f", ±{h['half_width_pct']:.1f}%" if h.get("half_width_pct") is not None else ""
    return (f"{h['a']} / {h['b']} step time = {h['ratio']:.3f} ({level:.0%} CI {h['ci_low']:.3f}–{h['ci_high']:.3f}"
            f"{hw}) over {h['quiet_rounds']} quiet rounds")


def left_out_words(h: dict) -> str:
    return f"{h['disturbed_total']} of {h['trials_total']} trials disturbed, {h['excluded_rounds']} round(s) left out"


def profiler_inflation(rows: pd.DataFrame) -> pd.DataFrame:
    """Per run, point and strategy: the profiled step (one profiler pass) against the
    profiler-free median step of the quiet trials, and the inflation in %."""
    ok = judged(rows)
    ok = ok[_ok(ok)]
    keys = _group_keys(ok)
    quiet = ok[~ok["disturbed"]]
    agg = quiet.groupby(keys, sort=False).agg(step_ms=("step_ms", "median"), profiled_step_ms=("profiled_step_ms", "first"))
    agg["inflation_pct"] = (pd.to_numeric(agg["profiled_step_ms"], errors="coerce") / agg["step_ms"] - 1) * 100
    return agg.reset_index()


# -- run-long disturbance ----------------------------------------------------------------------------
# The trial rule above compares a trial with its own run, so a run disturbed from its first trial to
# its last (seen on the H200: a run started seconds after the machine booted did 4x the host work per
# step in every trial) looks quiet to it. The second rule compares runs of the same machine and point.

RUN_RULE = ("A run is disturbed at a point when its quiet trials' median host real-work time per step exceeds "
            "the lowest such median among the runs of the same machine (GPU, driver, CUDA, torch) at the same "
            "point, and the machine's baselines written into their headers, by more than max(3 MADs of that "
            "lowest run's quiet trials, 10% of its median step time); a point with neither another run of its "
            "machine nor a baseline cannot be judged alone.")
CANNOT_JUDGE_ALONE = "cannot be judged alone: no other run of this machine at this point and no baseline in its header"
BASELINE_HEADER = "host_baseline"  # the run header's field: point key -> the machine's quietest host work there
# What makes two runs' points the same point (point_id is per run); those absent from the rows are skipped.
POINT_KEYS = ("workload", "model", "ep_size", "batch_size", "gamma", "graph", "ep_mode", "dispatch", "rank")


RUN_COLUMNS = ["run_id", "point_id", "host_work_ms", "step_ms", "quiet_trials", "reference_run_id",
               "excess_ms", "bound_ms", "run_disturbed", "run_disturbed_reason"]


def _per_run_point(ok: pd.DataFrame, cfg: list) -> pd.DataFrame:
    """Per (run, point): its machine and point keys, and the median and MAD of host work per step
    over its quiet trials with host work, their count and the quiet trials' median step time."""
    quiet = ~ok["disturbed"].to_numpy(bool)
    host, step = _num(ok, "host_work_ms").to_numpy(), _num(ok, "step_ms").to_numpy()
    groups = group_positions(ok, ["run_id", "point_id"], dropna=True)
    first = [int(idx[0]) for idx in groups]
    per = ok.iloc[first][["run_id", "point_id", *cfg]].reset_index(drop=True)
    med, mad, step_med = (np.full(len(groups), np.nan) for _ in range(3))
    n = np.zeros(len(groups), dtype=np.int64)
    for k, idx in enumerate(groups):
        q = idx[quiet[idx]]
        h = host[q][~np.isnan(host[q])]
        sq = step[q][~np.isnan(step[q])]
        n[k] = h.size
        if h.size:
            med[k], mad[k] = float(np.median(h)), _mad(h)
        if sq.size:
            step_med[k] = float(np.median(sq))
    return per.assign(host_work_ms=med, host_mad_ms=mad, step_ms=step_med, quiet_trials=n)


def _norm(v) -> str:
    """A point key's value as text that survives a round trip through JSON and pandas (8 == 8.0;
    None, NaN and "" are one value)."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return ""
    text = str(v)
    if text in ("nan", "None", "<NA>", "NaN"):
        return ""
    if isinstance(v, bool) or text in ("True", "False"):
        return text
    try:
        f = float(text)
    except ValueError:
        return text
    return str(int(f)) if f.is_integer() else repr(f)


def point_key(values) -> str:
    """What makes two runs' points the same point (POINT_KEYS), as one string: the key of a baseline."""
    return "|".join(f"{k}={_norm(values.get(k))}" for k in POINT_KEYS)


def quiet_baselines(rows: pd.DataFrame) -> dict:
    """Per point of one run's rows (judged by the trial rule): the median and MAD of host work per
    step over its quiet trials, their median step time and count, and the run id; only points with
    at least MIN_TRIALS quiet trials with host work. The calibration cache keeps the lowest per point."""
    ok = judged(rows)
    ok = ok[_ok(ok)]
    if ok.empty or "point_id" not in ok.columns:
        return {}
    if "run_id" not in ok.columns:
        ok = ok.assign(run_id="")
    cfg = [c for c in POINT_KEYS if c in ok.columns]
    per = _per_run_point(ok, cfg)
    out = {}
    for r in per.itertuples():
        if r.quiet_trials >= MIN_TRIALS and np.isfinite(r.host_work_ms):
            out[point_key(r._asdict())] = {"host_work_ms": float(r.host_work_ms), "host_mad_ms": float(r.host_mad_ms),
                                           "step_ms": float(r.step_ms), "quiet_trials": int(r.quiet_trials),
                                           "run_id": str(r.run_id)}
    return out


def _baseline_entry(e) -> Optional[tuple]:
    """(host, mad, step, run_id) of a header baseline entry, or None when it is malformed."""
    if not isinstance(e, dict):
        return None
    try:
        host, mad, step = (float(e[k]) for k in ("host_work_ms", "host_mad_ms", "step_ms"))
    except (KeyError, TypeError, ValueError):
        return None
    return (host, mad, step, str(e.get("run_id", "baseline"))) if np.isfinite(host) and np.isfinite(step) else None


def _header_baselines(per: pd.DataFrame, idx: np.ndarray, baselines: Optional[dict]) -> list:
    """The baselines the headers of this group's runs carry for its point."""
    if not baselines:
        return []
    key = point_key(per.iloc[int(idx[0])])
    out = []
    for rid in dict.fromkeys(per["run_id"].to_numpy(object)[idx]):
        header = baselines.get(str(rid))
        entry = _baseline_entry(header.get(key)) if isinstance(header, dict) else None
        if entry is not None:
            out.append(entry)
    return out


def _judge_runs(per: pd.DataFrame, cfg: list, baselines: Optional[dict] = None) -> pd.DataFrame:
    """RUN_RULE over the runs of each machine at each point: reference run, excess, bound, verdict."""
    host, mad, step = (per[c].to_numpy(float) for c in ("host_work_ms", "host_mad_ms", "step_ms"))
    quiet_n, run_ids = per["quiet_trials"].to_numpy(), per["run_id"].to_numpy(object)
    ref = np.full(len(per), None, dtype=object)
    excess, bounds = np.full(len(per), np.nan), np.full(len(per), np.nan)
    bad, why = np.zeros(len(per), bool), np.full(len(per), "", dtype=object)
    for idx in group_positions(per, cfg) if cfg else [np.arange(len(per))]:
        judged = idx[quiet_n[idx] >= MIN_TRIALS]
        why[idx[quiet_n[idx] < MIN_TRIALS]] = f"not judged: fewer than {MIN_TRIALS} quiet trials with host work"
        # candidates: (host, mad, step, run id, from a header baseline?)
        cands = [(host[i], mad[i], step[i], run_ids[i], False) for i in judged]
        cands += [(*b, True) for b in _header_baselines(per, idx, baselines)] if len(judged) else []
        if len(judged) == 0 or len(cands) < 2:
            why[judged] = CANNOT_JUDGE_ALONE
            continue
        low = min(cands, key=lambda c: c[0])
        bound = max(MAD_K * float(low[1]), STEP_FRACTION * float(low[2]))
        against = "the machine's baseline in the run header" if low[4] else "the quietest run of this machine at this point"
        for i in judged:
            ref[i], excess[i], bounds[i] = low[3], float(host[i] - low[0]), bound
            if excess[i] > bound:
                bad[i] = True
                why[i] = f"host work {host[i]:.2f} ms/step, +{excess[i]:.2f} over {against} (bound {bound:.2f})"
    return per.assign(reference_run_id=pd.Series(ref, index=per.index, dtype=object), excess_ms=excess, bound_ms=bounds, run_disturbed=bad,
                      run_disturbed_reason=why)


def run_disturbance(rows: pd.DataFrame, baselines: Optional[dict] = None) -> pd.DataFrame:
    """One row per (run, point): the median host work per step of its quiet trials, the lowest such
    median among the same machine's runs at the same point and the baselines their headers carry
    (`baselines`: run_id -> the header's BASELINE_HEADER; `reference_run_id`), the excess over it,
    the bound, and `run_disturbed` / `run_disturbed_reason` by RUN_RULE. Rows without host diagnostics
    are not judged (run_disturbed False, reason says why). Trials are quiet by the rows' verdict
    (`judged`: read where the loader or Runs set it)."""
    ok = judged(rows)
    ok = ok[_ok(ok)]
    if ok.empty or "point_id" not in ok.columns:
        return pd.DataFrame(columns=RUN_COLUMNS)
    if "run_id" not in ok.columns:
        ok = ok.assign(run_id="")
    cfg = [c for c in (*MACHINE_KEYS, *POINT_KEYS) if c in ok.columns]
    ok = ok.assign(**{c: ok[c].astype(str) for c in cfg})  # NaN and mixed types compare as text
    return _judge_runs(_per_run_point(ok, cfg), cfg, baselines)[RUN_COLUMNS].reset_index(drop=True)
