"""The figures of one config point (one or several runs side by side): syncs per step, the step's
breakdown, what a sync costs, step time by strategy. Each takes the point's rows or its
results.viewmodels.point_view.PointView (the panel and the report build that once and draw every figure from it)."""
from __future__ import annotations

from typing import Union

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dspark_lab.results.record import schema
from dspark_lab.results.viewmodels.point_view import PointView, point_view
from dspark_lab.results.rules.noise import MIN_QUIET_ROUNDS
from dspark_lab.results.rules.stats import median_ci
from dspark_lab.results.facts.strategy_table import strategy_order
from dspark_lab.results.analyses.sync_cost import CHARGED_COLUMN, for_points
from dspark_lab.views.figures.layout import add_note, titled
from dspark_lab.views.figures.style import PART_COLORS, PART_NAMES, READBACK_KIND, SYNC_COLORS, run_color, SYNC_KINDS

Point = Union[pd.DataFrame, PointView]  # a point's rows, or its view


def as_view(point: Point, what: str) -> PointView:
    """The PointView of `point` (built from rows, ValueError naming `what` unless one point a run)."""
    return point if isinstance(point, PointView) else point_view(point, what=what)


def categories(view: PointView, agg: pd.DataFrame):
    """Category x values: strategy names, or [run label, strategy] when several runs are shown."""
    if agg["run_id"].nunique() <= 1:
        return list(agg["strategy"])
    return [[view.labels.get(r, r) for r in agg["run_id"]], list(agg["strategy"])]


def _join(*notes: str, sep: str = "; ") -> str:
    return sep.join(n for n in notes if n)


# -- syncs per step -------------------------------------------------------------------------------

def sync_counts(point: Point) -> go.Figure:
    """Host-blocking syncs per step by strategy, stacked by kind; the by-design readback beside them."""
    view = as_view(point, "sync_counts")
    cols = [c for c, _ in SYNC_KINDS] + [READBACK_KIND[0], "syncs_per_step", "debug_syncs_per_step", "sync_count_mismatch"]
    agg = view.per_strategy(cols)  # NaN where not measured (CPU) or not recorded (older runs)
    x = categories(view, agg)
    fig = go.Figure()
    for col, name in SYNC_KINDS:
        fig.add_bar(x=x, y=agg[col].tolist(), name=name, marker_color=SYNC_COLORS[col], offsetgroup="syncs",
                    hovertemplate=f"{name}: %{{y:.2f}} per step<extra></extra>")
    fig.add_bar(x=x, y=agg[READBACK_KIND[0]].tolist(), name=READBACK_KIND[1], offsetgroup="readback",
                marker=dict(color=SYNC_COLORS[READBACK_KIND[0]], pattern_shape="/"),
                hovertemplate="readback: %{y:.2f} per step<extra></extra>")
    fig.add_scatter(x=x, y=agg["syncs_per_step"].tolist(), mode="text", name="total (syncs_per_step)",
                    text=["" if pd.isna(v) else f"{v:.2f}" for v in agg["syncs_per_step"]], textposition="top center",
                    showlegend=False, hoverinfo="skip")
    _mismatch_markers(fig, agg, x)
    fig.update_layout(barmode="relative", yaxis_title="host-blocking calls per step", legend_title="kind")
    add_note(fig, _join(_sync_note(view), view.note, sep="<br>"))
    return titled(fig, "Syncs per step by strategy", view.fingerprint, view.point)


def _mismatch_markers(fig: go.Figure, agg: pd.DataFrame, x) -> None:
    """A marker above each strategy whose trace count and sync-debug-mode count disagree (always
    added, empty when none, so the trace set stays stable)."""
    bad = (agg["sync_count_mismatch"] > 0).tolist()  # NaN (not compared) is not a disagreement
    pick = lambda seq: [v for v, b in zip(seq, bad) if b]  # noqa: E731
    xs = [pick(level) for level in x] if x and isinstance(x[0], list) else pick(x)
    top = agg[["syncs_per_step", "debug_syncs_per_step", READBACK_KIND[0]]].max(axis=1).fillna(0)
    fig.add_scatter(x=xs, y=[v * 1.1 + 0.15 for v in pick(top)], mode="markers+text", name="sync counts disagree",
                    text=["counts disagree"] * sum(bad), textposition="top center",
                    marker=dict(symbol="x", size=14, color="#8c1c13"),
                    customdata=pick(list(zip(agg["syncs_per_step"], agg["debug_syncs_per_step"]))),
                    hovertemplate="trace: %{customdata[0]:.2f} syncs per step<br>"
                                  "sync debug mode: %{customdata[1]:.2f}<extra></extra>")


def _sync_note(view: PointView) -> str:
    """Why counts are missing or flagged, from the rows' sync_note ("not measurable without CUDA",
    or the two counts where they disagree), one line per note with the strategies it applies to."""
    ok = view.ok
    if "sync_note" not in ok.columns:  # a run recorded before the column existed
        return ""
    by_note: dict[str, dict] = {}
    for strategy, note in ok[["strategy", "sync_note"]].itertuples(index=False):
        if isinstance(note, str) and note:
            by_note.setdefault(note, {})[str(strategy)] = None  # a dict keeps first-seen order
    return "<br>".join(f"syncs of {', '.join(ss)}: {note}" for note, ss in by_note.items())


# -- where the step's time went -------------------------------------------------------------------

def step_breakdown(point: Point) -> go.Figure:
    """Where each step's wall time went: host parts (left bar) and GPU parts (right bar) per strategy,
    stacked; the profiled step's wall time (which each side sums to) and the profiler-free median
    step time of the trials are marked."""
    view = as_view(point, "step_breakdown")
    cols = list(schema.HOST_PARTS) + list(schema.GPU_PARTS) + ["gpu_idle_after_sync_ms", "gpu_idle_sync_caused_ms",
                                                                 "profiled_step_ms", "step_ms"]
    agg = view.per_strategy(cols)
    caused, fallback_note = _sync_idle_column(agg)
    agg[caused] = np.minimum(agg[caused], agg["gpu_idle_ms"])
    agg["gpu_idle_other_ms"] = agg["gpu_idle_ms"] - agg[caused]
    x = categories(view, agg)
    fig = go.Figure()
    for group, parts in (("host", schema.HOST_PARTS), ("gpu", ("gpu_busy_ms", caused, "gpu_idle_other_ms"))):
        base = np.zeros(len(agg))
        for col in parts:
            vals = agg[col].to_numpy(dtype=float)
            fig.add_bar(x=x, y=vals.tolist(), base=base.tolist(), name=PART_NAMES[col], offsetgroup=group,
                        legendgroup=group,
                        marker=dict(color=PART_COLORS[col], pattern_shape="x" if col == caused else ""),
                        customdata=[group] * len(agg),
                        hovertemplate=f"{PART_NAMES[col]}: %{{y:.3f}} ms<extra>%{{customdata}}</extra>")
            base = base + vals
    fig.add_scatter(x=x, y=agg["profiled_step_ms"].tolist(), mode="markers", name="profiled step wall time",
                    marker=dict(symbol="line-ew-open", size=46, color="black", line=dict(width=3, color="black")),
                    hovertemplate="profiled step: %{y:.3f} ms<extra></extra>")
    fig.add_scatter(x=x, y=agg["step_ms"].tolist(), mode="markers", name="step time without profiler (median of trials)",
                    marker=dict(symbol="diamond", size=11, color="black"),
                    hovertemplate="median step_ms: %{y:.3f} ms<extra></extra>")
    fig.update_layout(barmode="group", yaxis_title="ms per step (left bar: host thread, right bar: GPU stream)",
                      bargap=0.25, bargroupgap=0.05)
    add_note(fig, _join(view.note, fallback_note))
    return titled(fig, "Step-time breakdown: host thread vs GPU stream", view.fingerprint, view.point)


def _sync_idle_column(agg: pd.DataFrame) -> tuple[str, str]:
    """The GPU idle drawn as the sync's: gpu_idle_sync_caused_ms where the run has it; runs recorded
    before it fall back to gpu_idle_after_sync_ms (the first gap after each sync only), with a note.
    Mixed runs: the old column fills in where the new one is missing, and the note says so."""
    new, old = "gpu_idle_sync_caused_ms", "gpu_idle_after_sync_ms"
    missing = agg[new].isna()
    if not missing.any():
        return new, ""
    note = "GPU idle after a sync: older run, only the first idle gap after each sync (not every gap it caused)"
    if missing.all():
        return old, note
    agg[new] = agg[new].where(~missing, agg[old])
    return new, note + f" for {int(missing.sum())} of {len(agg)} bars"


# -- what a sync costs ----------------------------------------------------------------------------

def sync_cost(point: Point, level: float = 0.95) -> go.Figure:
    """What each sync costs at one point: the measured step-time loss against the best sync-free
    strategy (profiler-free, paired per trial round, with its CI) beside the GPU idle the trace
    charges to the syncs and the GPU idle difference (both from the profiled steps)."""
    view = as_view(point, "sync_cost")
    t = for_points(view.ok, keys=["run_id"], level=level)
    x = list(t["strategy"])
    if t["run_id"].nunique() > 1:
        x = [[view.labels.get(r, r) for r in t["run_id"]], x]
    fig = go.Figure()
    fig.add_bar(x=x, y=t["loss_ms"].tolist(), name=f"step-time loss vs the best sync-free strategy (no profiler, {level:.0%} CI)",
                marker_color="#d62728",
                error_y=dict(type="data", symmetric=False, array=(t["loss_ci_high_ms"] - t["loss_ms"]).tolist(),
                             arrayminus=(t["loss_ms"] - t["loss_ci_low_ms"]).tolist()),
                customdata=t["baseline"].tolist(), hovertemplate="loss vs %{customdata}: %{y:.3f} ms<extra></extra>")
    old = bool(len(t)) and (t["charged_column"] != CHARGED_COLUMN).any()
    fig.add_bar(x=x, y=t["charged_idle_ms"].tolist(),
                name=PART_NAMES["gpu_idle_after_sync_ms" if old else "gpu_idle_sync_caused_ms"] + " (profiled)",
                marker=dict(color=PART_COLORS["gpu_idle_sync_caused_ms"], pattern_shape="x"),
                hovertemplate="charged GPU idle: %{y:.3f} ms<extra></extra>")
    fig.add_bar(x=x, y=t["idle_diff_ms"].tolist(), name="GPU idle minus the sync-free strategy's (profiled)",
                marker_color="#bdbdbd", customdata=t["baseline"].tolist(),
                hovertemplate="GPU idle minus %{customdata}'s: %{y:.3f} ms<extra></extra>")
    fig.update_layout(barmode="group", yaxis_title="ms per step")
    add_note(fig, _join(view.note,
                        "older run: the charged idle is only the first idle gap after each sync" if old else "",
                        "no strategy syncs at this point: nothing to cost" if t.empty else ""))
    return titled(fig, "What a sync costs: measured loss vs the GPU idle it caused", view.fingerprint, view.point)


# -- step time by strategy ------------------------------------------------------------------------

def strategy_comparison(point: Point) -> go.Figure:
    """Median step time across trials per strategy with a 95% bootstrap CI of the median
    (results.rules.stats.median_ci); several runs of the point are set side by side (e.g. two GPUs).
    Disturbed trials (results.rules.noise) are left out of the bars and drawn as black crosses beside them; a note says where a CI comes
    from fewer quiet trials than the headline needs."""
    view = as_view(point, "strategy_comparison")
    fig = go.Figure()
    n_disturbed = 0
    for i, (rid, g_all) in enumerate(view.ok.groupby("run_id", sort=False)):
        name = view.labels.get(rid, rid or "run")
        _run_bars(fig, g_all, name, i)
        bad = g_all[g_all["disturbed"]]
        if len(bad):
            n_disturbed += len(bad)
            fig.add_scatter(
                x=bad["strategy"].tolist(), y=bad["step_ms"].astype(float).tolist(), mode="markers",
                name=f"disturbed trials, left out ({name})", offsetgroup=str(i),
                # black with a white edge: seen on any run's colour (a run's bars may be red)
                marker=dict(symbol="x", size=10, color="black", line=dict(width=1, color="white")),
                customdata=[[r] for r in bad.get("disturbed_reason", pd.Series("", index=bad.index)).fillna("")],
                hovertemplate="%{x}: disturbed trial %{y:.3f} ms<br>%{customdata[0]}<extra></extra>",
            )
    fig.update_layout(barmode="group", scattermode="group", yaxis_title="step time, ms (median of quiet trials, 95% CI)",
                      showlegend=True, legend_title="run")
    # The note counts the disturbed trials left out; where they are drawn is said here.
    add_note(fig, _join(view.note, "disturbed trials drawn as black crosses beside the bars "
                                   "(rule in dspark_lab/results/rules/noise.py)" if n_disturbed else "",
                        _few_rounds_note(view.ok)))
    return titled(fig, "Step time by strategy", view.fingerprint, view.point)


def _few_rounds_note(ok: pd.DataFrame) -> str:
    """Where a bar's CI comes from fewer quiet trials than a headline's floor (noise.MIN_QUIET_ROUNDS),
    said beside it: a rough interval, not the kit's standard."""
    if ok.empty:
        return ""
    quiet = ok[~ok["disturbed"].astype(bool)].groupby(["run_id", "strategy"]).size()
    few = int(quiet.min()) if len(quiet) else 0
    if few >= MIN_QUIET_ROUNDS:
        return ""
    return (f"CIs from as few as {few} quiet trials (the headline needs {MIN_QUIET_ROUNDS}): rough")


def _run_bars(fig: go.Figure, g_all: pd.DataFrame, name: str, i: int) -> None:
    """One run's bars: median and CI per strategy over its quiet trials. A strategy whose trials
    are all disturbed keeps them (a bar of something beats none)."""
    order = strategy_order(g_all["strategy"])
    g = pd.concat([sub if sub["disturbed"].all() else sub[~sub["disturbed"]]
                   for _, sub in g_all.groupby("strategy", sort=False)])
    stats = [median_ci(g.loc[g["strategy"] == s, "step_ms"].astype(float).tolist()) for s in order]
    n = [int((g["strategy"] == s).sum()) for s in order]
    med = [m for m, _, _ in stats]
    fig.add_bar(
        x=order, y=med, name=name, marker_color=run_color(i),
        error_y=dict(type="data", symmetric=False, array=[h - m for m, _, h in stats],
                     arrayminus=[m - lo for m, lo, _ in stats], thickness=1.5, width=6),
        customdata=[[lo, h, k] for (_, lo, h), k in zip(stats, n)],
        # The value at the bar's foot: the CI whisker is at its top.
        text=[f"{m:.2f}" for m in med], textposition="inside", insidetextanchor="start",
        hovertemplate="%{x}: median %{y:.3f} ms, 95% CI %{customdata[0]:.3f}–%{customdata[1]:.3f} "
                      "(%{customdata[2]} trials)<extra>%{fullData.name}</extra>",
        offsetgroup=str(i),
    )
