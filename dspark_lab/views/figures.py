"""Tidy rows -> plotly figures. Pure functions: a DataFrame in, a `go.Figure` out, nothing typed in.

Every number drawn comes from the DataFrame (`schema.ROW_COLUMNS`), and every figure names, in its
subtitle, the GPU, driver, torch and date of the rows it shows (`schema.FINGERPRINT_COLUMNS`).

The per-point figures (`sync_counts`, `step_breakdown`, `timeline`, `strategy_comparison`) show ONE
config point per recorded run (several runs of the same point are set side by side, e.g. two GPUs);
pick a point with `results.Runs` (nearest / reference); runs are named by the rows' `run_label`
column, which `Runs` sets. `sweep` shows many points. Trace sets are stable (one trace per
part or kind, present even when empty) so a widget can update data in place.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dspark_lab.results import schema
from dspark_lab.results.frames import fingerprint_label, fingerprints, flatten_timelines, run_key, run_names
from dspark_lab.results.runs import failed_rows, gpu_name, ok_rows, point_label, undisturbed
from dspark_lab.results import noise
from dspark_lab.results.stats import median_ci
from dspark_lab.results.sync_cost import CHARGED_COLUMN, for_points
from dspark_lab.results.strategy_info import strategy_order

# -- names and colours ---------------------------------------------------------------------------

SYNC_KINDS = (  # (column, legend name); the first four add up to syncs_per_step
    ("stream_syncs_per_step", "stream sync"),
    ("device_syncs_per_step", "device sync"),
    ("event_syncs_per_step", "event sync"),
    ("sync_memcpy_per_step", "synchronous memcpy"),
)
READBACK_KIND = ("readback_syncs_per_step", "by-design result readback (not counted)")
SYNC_COLORS = {"stream_syncs_per_step": "#d62728", "device_syncs_per_step": "#8c1c13",
               "event_syncs_per_step": "#ff9896", "sync_memcpy_per_step": "#e377c2",
               "readback_syncs_per_step": "#c7c7c7"}

PART_NAMES = {
    "host_prep_ms": "host: batch prep", "host_blocked_ms": "host: blocked in a sync",
    "host_readback_ms": "host: result readback", "host_copy_ms": "host: async copy call",
    "host_launch_ms": "host: launch / CUDA API", "host_other_ms": "host: other Python",
    "gpu_busy_ms": "GPU: busy", "gpu_idle_after_sync_ms": "GPU: idle after a sync (starved)",
    "gpu_idle_other_ms": "GPU: idle, other",
    "gpu_idle_sync_caused_ms": "GPU: idle a sync caused (waiting for the host from the sync until the host "
                               "is ahead again, at most the time blocked)",
}
PART_COLORS = {
    "host_prep_ms": "#9ecae1", "host_blocked_ms": "#d62728", "host_readback_ms": "#bdbdbd",
    "host_copy_ms": "#ff7f0e", "host_launch_ms": "#2ca02c", "host_other_ms": "#dadaeb",
    "gpu_busy_ms": "#3f3f8f", "gpu_idle_after_sync_ms": "#f4a582", "gpu_idle_other_ms": "#eeeeee",
    "gpu_idle_sync_caused_ms": "#f4a582",
}
# The GPU side as drawn: gpu_idle_ms split into its after-sync part and the rest (they sum to it).
GPU_DRAWN_PARTS = ("gpu_busy_ms", "gpu_idle_after_sync_ms", "gpu_idle_other_ms")

STRATEGY_COLORS = {"device_direct": "#d62728", "non_blocking": "#ff7f0e", "on_demand": "#2ca02c",
                   "on_demand_pinned": "#17becf", "persistent_fill": "#1f77b4"}
RUN_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")

# Timeline parts (measure.breakdown.timeline): host parts by precedence, sync calls, GPU work.
TIMELINE_HOST_PARTS = ("prep", "blocked", "readback", "copy", "launch", "other")
TIMELINE_SYNC_PARTS = ("sync", "readback_sync")
TIMELINE_GPU_PARTS = ("kernel", "h2d_copy", "memcpy")
TIMELINE_COLORS = {
    "prep": PART_COLORS["host_prep_ms"], "blocked": PART_COLORS["host_blocked_ms"],
    "readback": PART_COLORS["host_readback_ms"], "copy": PART_COLORS["host_copy_ms"],
    "launch": PART_COLORS["host_launch_ms"], "other": PART_COLORS["host_other_ms"],
    "sync": "#8c1c13", "readback_sync": "#969696",
    "kernel": PART_COLORS["gpu_busy_ms"], "h2d_copy": "#ff7f0e", "memcpy": "#e377c2",
    "idle_sync_caused": PART_COLORS["gpu_idle_sync_caused_ms"],
}
TIMELINE_NAMES = {
    "prep": "host: batch prep", "blocked": "host: blocked in a sync", "readback": "host: result readback",
    "copy": "host: async copy call", "launch": "host: launch / CUDA API", "other": "host: other Python",
    "sync": "sync call (blocking)", "readback_sync": "readback sync (by design)",
    "kernel": "GPU: busy (kernels)", "h2d_copy": "GPU: host-to-device copy", "memcpy": "GPU: other copy",
    "idle_sync_caused": "GPU: idle a sync caused",
}
_MERGE_GAP_MS = 0.002  # GPU kernels closer than this are drawn as one span (labels kept in hover)


# -- fingerprints and labels ---------------------------------------------------------------------

def _title(fig: go.Figure, text: str, rows: pd.DataFrame, extra: str = "") -> go.Figure:
    sub = fingerprint_label(rows) + (f" — {extra}" if extra else "")
    fig.update_layout(title=dict(text=text, subtitle=dict(text=_wrap(sub))))
    return fit_layout(fig)


# -- layout: title block, legend below the plot, sizes (the same on a first render and after) ------

TITLE_FONT_PX, SUBTITLE_FONT_PX, LEGEND_ROW_PX = 17, 12, 22
DEFAULT_WIDTH_PX = 1000  # the panel's width; a figure without a width is laid out for this one
SLIDE_SIZES = {"slide": (1600, 900), "slide-4x3": (1400, 1050), "half-slide": (800, 900)}
_WRAP_CHARS = 120  # a subtitle line longer than this is broken at its "; " / " — " separators


def _wrap(text: str, width: int = _WRAP_CHARS) -> str:
    """Break a long subtitle into lines (at "; " and " — ") so it is never cut at the figure's edge."""
    if len(text) <= width:
        return text
    pieces = re.split(r"(?<=; )|(?= — )", text)
    lines, cur = [], ""
    for piece in pieces:
        if cur and len(cur) + len(piece) > width:
            lines.append(cur.rstrip())
            cur = piece.lstrip()
        else:
            cur += piece
    lines.append(cur.rstrip())
    return "<br>".join(lines)


def _n_lines(text) -> int:
    return (str(text).count("<br>") + 1) if text else 0


def legend_entries(fig: go.Figure) -> list[str]:
    """The names the legend shows, in order: one entry per trace with a name, unless hidden with
    showlegend=False (a legend group only toggles its traces together; each still has its entry)."""
    return [str(tr.name) for tr in fig.data if tr.showlegend is not False and tr.name]


def legend_rows(names: Sequence[str], width_px: float) -> int:
    """Rows a horizontal legend of `names` takes at `width_px` (entry ≈ 7 px a character + the swatch).
    When the entries do not fit on one row, plotly sets them in columns as wide as the widest entry."""
    if not names:
        return 0
    widths = [7.0 * len(n) + 50 for n in names]
    if sum(widths) <= width_px:
        return 1
    per_row = max(1, int(width_px // max(widths)))
    return -(-len(names) // per_row)


def fit_layout(fig: go.Figure, width: Optional[int] = None, height: Optional[int] = None) -> go.Figure:
    """Title, subtitle and legend placed explicitly, in pixels from the figure's top and bottom edges.

    The title block's top margin is computed from its lines, and the legend sits horizontally below the
    plot with the bottom margin and height grown by its rows, so nothing is clipped or scrolls off.
    Nothing here depends on text measured in the browser, so the first render (a FigureWidget drawn
    before it is on screen) is laid out the same as a redraw. Idempotent: call again after a change
    of size (`export` does)."""
    lay = fig.layout
    width = int(width or lay.width or DEFAULT_WIDTH_PX)
    title_lines = _n_lines(lay.title.text)
    sub_lines = _n_lines(lay.title.subtitle.text) if lay.title.text else 0
    top = 14 + title_lines * (TITLE_FONT_PX + 8) + sub_lines * (SUBTITLE_FONT_PX + 5) + 26
    names = legend_entries(fig)
    if not lay.showlegend and lay.showlegend is not None:
        names = []
    rows = legend_rows(names, width - 80)
    meta = dict(lay.meta) if isinstance(lay.meta, dict) else {}
    plot_h = meta.get("dspark_plot_px")
    if plot_h is None:  # the plot area this figure asked for, kept across calls
        base_h = int(height or lay.height or 450)
        plot_h = max(200, base_h - 120)
    bottom = 70 + (LEGEND_ROW_PX * rows + 12 if rows else 0)
    note = [a for a in lay.annotations if getattr(a, "name", None) == "dspark-note"]
    bottom += 22 * len(note)
    total = int(height) if height else int(plot_h + top + bottom)
    fig.update_layout(
        height=total,
        margin=dict(t=top, b=bottom, l=lay.margin.l if lay.margin.l is not None else 80,
                    r=lay.margin.r if lay.margin.r is not None else 40),
        title=dict(x=0, xref="container", xanchor="left", y=1, yref="container", yanchor="top",
                   pad=dict(t=14, l=16), font=dict(size=TITLE_FONT_PX),
                   subtitle=dict(font=dict(size=SUBTITLE_FONT_PX, color="#555"))),
        meta={**meta, "dspark_plot_px": plot_h},
    )
    if rows:
        fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", xref="container",
                                      y=0, yref="container", yanchor="bottom", entrywidthmode="pixels",
                                      traceorder="normal"))  # entries flow in rows; "grouped" would stack them
    for a in note:  # a failure note sits between the x axis and the legend (annotations take paper units)
        above_px = (LEGEND_ROW_PX * rows + 16 if rows else 8) - bottom
        a.update(yref="paper", y=above_px / max(1, total - top - bottom), yanchor="bottom")
    return fig


# -- selecting data ------------------------------------------------------------------------------

def _check_one_point(rows: pd.DataFrame, what: str) -> None:
    if rows.empty:
        return
    per_run = rows.groupby(run_key(rows))["point_id"].nunique()
    if (per_run > 1).any():
        raise ValueError(
            f"{what} shows one config point per run, but the rows hold {int(per_run.max())} points of one run; "
            "pick one with results.Runs(...).nearest(ep_size=..., batch_size=..., gamma=..., workload=...)"
        )


# -- aggregation (medians of recorded values; trace columns repeat on each trial row) -------------

def per_strategy(rows: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """One row per (run, strategy) with the median over trials of `columns`, in strategy order."""
    df = _kept(rows)
    if df.empty:
        return pd.DataFrame(columns=["run_id", "strategy", *columns])
    # Missing or null values (a column an older run lacks) become NaN, never a crash.
    df = df.assign(run_id=run_key(df), **{c: pd.to_numeric(df[c], errors="coerce") if c in df.columns
                                           else np.nan for c in columns})
    agg = df.groupby(["run_id", "strategy"], sort=False)[list(columns)].median().reset_index()
    order = {s: i for i, s in enumerate(strategy_order(agg["strategy"]))}
    runs = {r: i for i, r in enumerate(dict.fromkeys(df["run_id"]))}
    agg["_o"] = agg["strategy"].map(order) + 1000 * agg["run_id"].map(runs)
    return agg.sort_values("_o").drop(columns="_o").reset_index(drop=True)


def _x(agg: pd.DataFrame, rows: pd.DataFrame):
    """Category x values: strategy names, or [run label, strategy] when several runs are shown."""
    if agg["run_id"].nunique() <= 1:
        return list(agg["strategy"])
    labels = run_names(rows)
    return [[labels.get(r, r) for r in agg["run_id"]], list(agg["strategy"])]


def _kept(rows: pd.DataFrame) -> pd.DataFrame:
    """The successful trials not marked disturbed: what every figure draws (as results.Runs counts)."""
    return undisturbed(ok_rows(rows))[0]


def _failed_note(rows: pd.DataFrame) -> str:
    bad = failed_rows(rows)
    _, left_out = undisturbed(ok_rows(rows))
    notes = [f"{left_out} disturbed trials left out"] if left_out else []
    if not bad.empty:
        first = bad.drop_duplicates("strategy")
        notes.append("failed: " + "; ".join(f"{r.strategy}: {str(r.error)[:120]}" for r in first.itertuples()))
    return "; ".join(notes)


def _note(fig: go.Figure, text: str) -> None:
    if text:
        fig.add_annotation(text=text, xref="paper", yref="paper", x=0, y=-0.22, showarrow=False,
                           xanchor="left", font=dict(size=11, color="#8c1c13"), name="dspark-note")


# -- figures -------------------------------------------------------------------------------------

def sync_counts(rows: pd.DataFrame) -> go.Figure:
    """Host-blocking syncs per step by strategy, stacked by kind; the by-design readback beside them."""
    _check_one_point(ok_rows(rows), "sync_counts")
    cols = [c for c, _ in SYNC_KINDS] + [READBACK_KIND[0], "syncs_per_step", "debug_syncs_per_step", "sync_count_mismatch"]
    agg = per_strategy(rows, cols)  # NaN where not measured (CPU) or not recorded (older runs)
    x = _x(agg, rows)
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
    pt = point_label(ok_rows(rows).iloc[0]) if not ok_rows(rows).empty else ""
    _note(fig, "<br>".join(t for t in (_sync_note(rows), _failed_note(rows)) if t))
    return _title(fig, "Syncs per step by strategy", rows, pt)


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


def _sync_note(rows: pd.DataFrame) -> str:
    """Why counts are missing or flagged, from the rows' sync_note ("not measurable without CUDA",
    or the two counts where they disagree), one line per note with the strategies it applies to."""
    ok = ok_rows(rows)
    if "sync_note" not in ok.columns:  # a run recorded before the column existed
        return ""
    by_note: dict[str, dict] = {}
    for strategy, note in ok[["strategy", "sync_note"]].itertuples(index=False):
        if isinstance(note, str) and note:
            by_note.setdefault(note, {})[str(strategy)] = None  # a dict keeps first-seen order
    return "<br>".join(f"syncs of {', '.join(ss)}: {note}" for note, ss in by_note.items())


def step_breakdown(rows: pd.DataFrame) -> go.Figure:
    """Where each step's wall time went: host parts (left bar) and GPU parts (right bar) per strategy,
    stacked; the profiled step's wall time (which each side sums to) and the profiler-free median
    step time of the trials are marked."""
    _check_one_point(ok_rows(rows), "step_breakdown")
    cols = list(schema.HOST_PARTS) + list(schema.GPU_PARTS) + ["gpu_idle_after_sync_ms", "gpu_idle_sync_caused_ms",
                                                                 "profiled_step_ms", "step_ms"]
    agg = per_strategy(rows, cols)
    caused, fallback_note = _sync_idle_column(agg)
    agg[caused] = np.minimum(agg[caused], agg["gpu_idle_ms"])
    agg["gpu_idle_other_ms"] = agg["gpu_idle_ms"] - agg[caused]
    x = _x(agg, rows)
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
    pt = point_label(ok_rows(rows).iloc[0]) if not ok_rows(rows).empty else ""
    _note(fig, "; ".join(t for t in (_failed_note(rows), fallback_note) if t))
    return _title(fig, "Step-time breakdown: host thread vs GPU stream", rows, pt)


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


def sync_cost(rows: pd.DataFrame, level: float = 0.95) -> go.Figure:
    """What each sync costs at one point: the measured step-time loss against the best sync-free
    strategy (profiler-free, paired per trial round, with its CI) beside the GPU idle the trace
    charges to the syncs and the GPU idle difference (both from the profiled steps)."""
    _check_one_point(ok_rows(rows), "sync_cost")
    ok = ok_rows(rows).assign(run_id=run_key(ok_rows(rows)))
    t = for_points(ok, keys=["run_id"], level=level)
    x = list(t["strategy"])
    if t["run_id"].nunique() > 1:
        labels = run_names(ok)
        x = [[labels.get(r, r) for r in t["run_id"]], x]
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
    notes = [_failed_note(rows)]
    if old:
        notes.append("older run: the charged idle is only the first idle gap after each sync")
    if t.empty:
        notes.append("no strategy syncs at this point: nothing to cost")
    _note(fig, "; ".join(n for n in notes if n))
    pt = point_label(ok_rows(rows).iloc[0]) if not ok_rows(rows).empty else ""
    return _title(fig, "What a sync costs: measured loss vs the GPU idle it caused", rows, pt)


def strategy_comparison(rows: pd.DataFrame) -> go.Figure:
    """Median step time across trials per strategy with a 95% bootstrap CI of the median
    (results.stats.median_ci); several runs of the point are set side by side (e.g. two GPUs).
    Disturbed trials (results.noise) are left out of the bars and drawn as red crosses beside them."""
    _check_one_point(ok_rows(rows), "strategy_comparison")
    df = ok_rows(rows)  # disturbed trials too: drawn as crosses beside the bars
    labels = run_names(df)
    df = df.assign(run_id=run_key(df))
    if not df.empty:
        df = df.assign(disturbed=noise.disturbed_flags(df))
    fig = go.Figure()
    n_disturbed = 0
    for i, (rid, g_all) in enumerate(df.groupby("run_id", sort=False)):
        order = strategy_order(g_all["strategy"])
        bad = g_all[g_all["disturbed"]]
        # A strategy whose trials are all disturbed keeps them (a bar of something beats none).
        g = pd.concat([sub if sub["disturbed"].all() else sub[~sub["disturbed"]]
                       for _, sub in g_all.groupby("strategy", sort=False)])
        stats = [median_ci(g.loc[g["strategy"] == s, "step_ms"].astype(float).tolist()) for s in order]
        n = [int((g["strategy"] == s).sum()) for s in order]
        med = [m for m, _, _ in stats]
        fig.add_bar(
            x=order, y=med, name=labels.get(rid, rid or "run"), marker_color=RUN_COLORS[i % len(RUN_COLORS)],
            error_y=dict(type="data", symmetric=False, array=[h - m for m, _, h in stats],
                         arrayminus=[m - lo for m, lo, _ in stats], thickness=1.5, width=6),
            customdata=[[lo, h, k] for (_, lo, h), k in zip(stats, n)],
            text=[f"{m:.2f}" for m in med], textposition="inside",
            hovertemplate="%{x}: median %{y:.3f} ms, 95% CI %{customdata[0]:.3f}–%{customdata[1]:.3f} "
                          "(%{customdata[2]} trials)<extra>%{fullData.name}</extra>",
            offsetgroup=str(i),
        )
        if len(bad):
            n_disturbed += len(bad)
            fig.add_scatter(
                x=bad["strategy"].tolist(), y=bad["step_ms"].astype(float).tolist(), mode="markers",
                name=f"disturbed trials, left out ({labels.get(rid, rid or 'run')})", offsetgroup=str(i),
                marker=dict(symbol="x", size=9, color="#d62728"),
                customdata=[[r] for r in bad.get("disturbed_reason", pd.Series("", index=bad.index)).fillna("")],
                hovertemplate="%{x}: disturbed trial %{y:.3f} ms<br>%{customdata[0]}<extra></extra>",
            )
    fig.update_layout(barmode="group", scattermode="group", yaxis_title="step time, ms (median of quiet trials, 95% CI)",
                      showlegend=True, legend_title="run")
    pt = point_label(df.iloc[0]) if not df.empty else ""
    note = _failed_note(rows)  # counts the disturbed trials left out; where they are drawn is said here
    if n_disturbed:
        note = "; ".join(t for t in (note, "disturbed trials drawn as red crosses beside the bars "
                                               "(rule in dspark_lab/results/noise.py)") if t)
    _note(fig, note)
    return _title(fig, "Step time by strategy", rows, pt)


MAX_SWEEP_RUNS = 4  # rows of sweep subplots at most; the other runs are named in a note


def sweep(rows: pd.DataFrame, workload: Optional[str] = None, model: Optional[str] = None,
          max_runs: int = MAX_SWEEP_RUNS) -> go.Figure:
    """Median step time (over trials) against batch size, one line per strategy and gamma, one
    column per EP size, one row per run. Shows one workload and model (the most recorded if not given).
    At most `max_runs` runs are drawn, the most recently recorded; a note says how many were left
    out (choose runs with results.Runs.select)."""
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise ValueError(f"max_runs must be a positive integer, got {max_runs!r}")
    df = _kept(rows)
    extra = []
    for col, want in (("workload", workload), ("model", model)):
        if col in df.columns and not df.empty:
            pick = want if want is not None else df[col].value_counts().index[0]
            df = df[df[col] == pick]
            extra.append(f"{col} {pick}")
    labels = run_names(df)
    df = df.assign(run_id=run_key(df))
    left_out = []
    all_runs = list(dict.fromkeys(df["run_id"]))
    if len(all_runs) > max_runs:
        when = df.groupby("run_id", sort=False)["recorded_at"].max().astype(str) if "recorded_at" in df else {}
        newest = sorted(all_runs, key=lambda r: (str(when.get(r, "")), r), reverse=True)[:max_runs]
        left_out = [r for r in all_runs if r not in set(newest)]
        df = df[df["run_id"].isin(newest)]
    agg = (df.groupby(["run_id", "ep_size", "batch_size", "gamma", "strategy"], sort=False)["step_ms"]
           .median().reset_index())
    runs = list(dict.fromkeys(agg["run_id"])) or [""]
    eps = sorted(agg["ep_size"].unique()) or [1]
    fig = make_subplots(rows=len(runs), cols=len(eps), shared_yaxes=True, shared_xaxes=True,
                        column_titles=[f"EP {e}" for e in eps],
                        row_titles=[labels.get(r, r) for r in runs] if len(runs) > 1 else None,
                        horizontal_spacing=0.04, vertical_spacing=min(0.08, 0.5 / max(1, len(runs) - 1)))
    gammas = sorted(agg["gamma"].unique())
    seen = set()
    for ri, rid in enumerate(runs):
        for ci, ep in enumerate(eps):
            sub = agg[(agg["run_id"] == rid) & (agg["ep_size"] == ep)]
            for s in strategy_order(sub["strategy"]):
                for gi, gm in enumerate(gammas):
                    line = sub[(sub["strategy"] == s) & (sub["gamma"] == gm)].sort_values("batch_size")
                    if line.empty:
                        continue
                    key = (s, gm)
                    fig.add_scatter(
                        x=line["batch_size"].tolist(), y=line["step_ms"].tolist(), mode="lines+markers",
                        name=f"{s}, gamma {gm}", legendgroup=f"{s}-{gm}", showlegend=key not in seen,
                        line=dict(color=STRATEGY_COLORS.get(s, "#7f7f7f"), dash=DASHES[gi % len(DASHES)]),
                        hovertemplate=f"{s}, EP {ep}, gamma {gm}, batch %{{x}}: %{{y:.3f}} ms<extra></extra>",
                        row=ri + 1, col=ci + 1,
                    )
                    seen.add(key)
    batches = sorted(agg["batch_size"].unique())
    fig.update_xaxes(type="log", tickvals=batches, ticktext=[str(b) for b in batches])
    fig.update_xaxes(title_text="batch size", row=len(runs))
    fig.update_yaxes(title_text="median step time, ms", col=1)
    fig.update_layout(height=max(420, 300 * len(runs), 24 * len(seen) + 160))  # room for the legend
    note = _failed_note(rows)
    if left_out:
        note = (note + "; " if note else "") + (f"{len(left_out)} more run(s) not drawn (the {len(runs)} most recent "
                                                 "are; choose runs with results.Runs.select)")
    _note(fig, note)
    shown = rows[run_key(rows).isin(set(runs))] if left_out else rows
    return _title(fig, "Sweep: median step time over batch size × gamma", shown, ", ".join(extra))


# -- timeline ------------------------------------------------------------------------------------

def _norm_part(lane: str, part: str) -> str:
    p = str(part)
    for pre in ("host_", "gpu_"):
        if p.startswith(pre) and p[len(pre):] in TIMELINE_HOST_PARTS + ("busy", "idle"):
            p = p[len(pre):]
    if p.endswith("_ms"):
        p = p[:-3]
    if p == "busy":  # measure.breakdown.timeline gives merged GPU busy spans
        p = "kernel"
    return p


def _merge_spans(seg: pd.DataFrame) -> pd.DataFrame:
    """Merge touching spans of one lane/part (GPU kernels of a graph replay) for drawing."""
    if len(seg) < 2:
        return seg.assign(n=1)
    seg = seg.sort_values("start_ms")
    out, cur = [], None
    for r in seg.itertuples(index=False):
        if cur is not None and r.start_ms - cur["end_ms"] <= _MERGE_GAP_MS:
            cur["end_ms"] = max(cur["end_ms"], r.end_ms)
            cur["n"] += 1
        else:
            if cur is not None:
                out.append(cur)
            cur = {"start_ms": r.start_ms, "end_ms": r.end_ms, "label": str(r.label), "n": 1}
    out.append(cur)
    return pd.DataFrame(out)


def timeline(timelines: pd.DataFrame, rows: Optional[pd.DataFrame] = None, *, point_id: Optional[str] = None,
             strategies_shown: Optional[Sequence[str]] = None) -> go.Figure:
    """The host thread and the GPU stream over a few profiled steps, one pair of lanes per strategy
    (plus a lane of sync calls): each sync is drawn with its blocked time and labelled with its
    duration; hover names the call and the source line. `rows` gives the fingerprint."""
    tl = flatten_timelines(timelines)
    if point_id is None and not tl.empty:
        pids = tl["point_id"].unique()
        if len(pids) > 1:
            raise ValueError(f"the timelines hold {len(pids)} config points; pass point_id=")
        point_id = pids[0]
    if point_id is not None and not tl.empty:
        tl = tl[tl["point_id"] == point_id]
    if strategies_shown is not None:
        tl = tl[tl["strategy"].isin(list(strategies_shown))]
    fp_rows = rows if rows is not None else tl
    if rows is not None and point_id is not None and "point_id" in rows.columns:
        fp_rows = rows[rows["point_id"] == point_id]
    multi_run = "run_id" in tl.columns and tl["run_id"].nunique() > 1
    rlabels = run_names(fp_rows) if multi_run and rows is not None else {}
    tl = tl.assign(part=[_norm_part(lane, p) for lane, p in zip(tl["lane"], tl["part"])]) if not tl.empty else tl

    groups = []  # (group key, strategy, prefix)
    if not tl.empty:
        keys = ["run_id", "strategy"] if multi_run else ["strategy"]
        present = tl[keys].drop_duplicates()
        for s in strategy_order(present["strategy"]):
            for rec in present[present["strategy"] == s].to_dict("records"):
                prefix = f"{rlabels.get(rec['run_id'], rec['run_id'])} · {s}" if multi_run else s
                groups.append((rec, s, prefix))
    lanes = []
    for _, _, prefix in groups:
        lanes += [f"{prefix} · host", f"{prefix} · syncs", f"{prefix} · GPU"]

    def sel(rec):
        m = pd.Series(True, index=tl.index)
        for k, v in rec.items():
            m &= tl[k] == v
        return tl[m]

    fig = go.Figure()
    extra_parts = sorted(set(tl["part"]) - set(TIMELINE_HOST_PARTS + TIMELINE_SYNC_PARTS + TIMELINE_GPU_PARTS + ("step",))) if not tl.empty else []
    for part in TIMELINE_HOST_PARTS + TIMELINE_SYNC_PARTS + TIMELINE_GPU_PARTS + tuple(extra_parts):
        xs, bases, ys, hover, text = [], [], [], [], []
        for rec, s, prefix in groups:
            g = sel(rec)
            g = g[g["part"] == part]
            if g.empty:
                continue
            lane_kind = "syncs" if part in TIMELINE_SYNC_PARTS else ("host" if (g["lane"] == "host").all() else "GPU")
            spans = _merge_spans(g) if lane_kind == "GPU" else g.assign(n=1)
            for r in spans.itertuples(index=False):
                xs.append(r.end_ms - r.start_ms)
                bases.append(r.start_ms)
                ys.append(f"{prefix} · {lane_kind}")
                more = f" (+{r.n - 1} more)" if r.n > 1 else ""
                hover.append(f"{r.label}{more}<br>{r.start_ms:.3f} → {r.end_ms:.3f} ms ({r.end_ms - r.start_ms:.3f} ms)")
                text.append(f"sync {r.end_ms - r.start_ms:.2f} ms" if part == "sync" else "")
        fig.add_bar(x=xs, base=bases, y=ys, orientation="h", name=TIMELINE_NAMES.get(part, part),
                    marker_color=TIMELINE_COLORS.get(part, "#7f7f7f"), hovertext=hover,
                    hovertemplate="%{hovertext}<extra>" + TIMELINE_NAMES.get(part, part) + "</extra>",
                    text=text, textposition="inside", insidetextanchor="start", textfont=dict(color="white", size=10),
                    constraintext="none", width=0.8 if part not in TIMELINE_SYNC_PARTS else 0.6)
    # Each blocking sync: a marker at its start, labelled with how long it kept the host blocked.
    mx, my, mt, mh = [], [], [], []
    sx, sy, st = [], [], []
    for rec, s, prefix in groups:
        g = sel(rec)
        for r in g[g["part"] == "sync"].itertuples(index=False):
            mx.append(r.start_ms)
            my.append(f"{prefix} · syncs")
            mt.append(f"sync {r.end_ms - r.start_ms:.2f} ms")
            mh.append(str(r.label))
        for r in g[g["part"] == "step"].itertuples(index=False):
            for lane in ("host", "GPU"):
                sx.append(r.start_ms)
                sy.append(f"{prefix} · {lane}")
                st.append(str(r.label))
    fig.add_scatter(x=mx, y=my, mode="markers", text=mt, hovertext=mh,
                    name="blocking sync (host blocked for)", marker=dict(symbol="triangle-right", size=12, color="black"),
                    hovertemplate="%{hovertext}<extra>%{text}</extra>")
    fig.add_scatter(x=sx, y=sy, mode="markers", name="step start", hovertext=st,
                    marker=dict(symbol="line-ns-open", size=26, color="black", line=dict(width=2, color="black")),
                    hovertemplate="%{hovertext} starts at %{x:.3f} ms<extra></extra>")
    fig.update_layout(barmode="overlay", xaxis_title="ms from the start of the first shown step",
                      yaxis=dict(categoryorder="array", categoryarray=lanes[::-1], automargin=True),
                      height=max(380, 60 + 40 * len(lanes)), legend_title="part")
    extra = point_label(fp_rows.iloc[0]) if rows is not None and not fp_rows.empty else ""
    return _title(fig, "Timeline: host thread and GPU stream over a few steps", fp_rows, extra)


def fold_subtitle(layout: dict) -> dict:
    """A layout dict (fig.to_plotly_json()["layout"]) with the subtitle moved into the title as a
    smaller second line, for FigureWidgets. plotly.js places a subtitle under the title's measured
    box (getBBox), which is empty while a widget is drawn off screen, so a panel's first render put
    the subtitle above its title; lines of one title are placed by line count, never measured."""
    title = layout.get("title") or {}
    sub = (title.get("subtitle") or {}).get("text") or ""
    if title.get("text") and sub:
        size = (title.get("subtitle", {}).get("font") or {}).get("size", SUBTITLE_FONT_PX)
        lines = sub.split("<br>")
        styled = "<br>".join(f"<span style='font-size:{size}px;color:#555'>{ln}</span>" for ln in lines)
        layout["title"] = {**title, "text": f"{title['text']}<br>{styled}", "subtitle": {"text": ""}}
        meta = layout.get("meta") if isinstance(layout.get("meta"), dict) else {}
        layout["meta"] = {**meta, "dspark_title": title["text"], "dspark_subtitle": sub}
    return layout


# -- display config and static export ------------------------------------------------------------

# Every figure's plotly.js config: no logo, and no "Share chart..." modebar button (plotly.js 3 adds
# "sendChartToCloud" unless showSendToCloud is false; it would post the figure to a cloud service).
PLOTLY_CONFIG = {"displaylogo": False, "showSendToCloud": False, "modeBarButtonsToRemove": ["sendChartToCloud"]}
SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def apply_display_config() -> None:
    """Make PLOTLY_CONFIG the default of every plotly renderer that takes a config (notebook display,
    `fig.show()`); called when this module is imported. FigureWidgets take it per widget (`widget_config`)."""
    import plotly.io as pio

    for name in list(pio.renderers):
        r = pio.renderers[name]
        if hasattr(r, "config"):
            r.config = {**(r.config or {}), **PLOTLY_CONFIG}


def widget_config(widget) -> None:
    """PLOTLY_CONFIG on a go.FigureWidget (its `_config` is synced to the browser)."""
    widget._config = {**(widget._config or {}), **PLOTLY_CONFIG}


def _kaleido_ready() -> None:
    """No MathJax (it would need a network fetch); Debian's chromium when kaleido has none of its own."""
    import os

    import plotly.io as pio

    pio.defaults.mathjax = None
    if not os.environ.get("BROWSER_PATH"):
        for path in SYSTEM_CHROMIUM:
            if os.path.exists(path):
                os.environ["BROWSER_PATH"] = path
                break


def slide_size(size) -> tuple[int, int]:
    if isinstance(size, str):
        if size not in SLIDE_SIZES:
            raise ValueError(f"size {size!r} is not a known slide size; allowed: {', '.join(SLIDE_SIZES)} "
                             "or a (width, height) pair in pixels")
        return SLIDE_SIZES[size]
    try:
        w, h = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ValueError(f"size must be one of {', '.join(SLIDE_SIZES)} or a (width, height) pair, got {size!r}") from None
    if w < 200 or h < 150:
        raise ValueError(f"size must be at least 200 x 150 pixels, got {w} x {h}")
    return w, h


def export(fig: go.Figure, path_stem, size="slide", formats: Sequence[str] = ("png", "svg")) -> list:
    """Write `fig` as PNG and SVG (by default) at a slide size, laid out for that size so the title,
    subtitle and legend fit: `figures.export(fig, "out/comparison")` -> [out/comparison.png, .svg].

    size: "slide" (1600 x 900, 16:9), "slide-4x3", "half-slide", or (width, height) in pixels. The
    figure passed in is not changed."""
    from pathlib import Path

    w, h = slide_size(size)
    bad = [f for f in formats if f not in ("png", "svg", "pdf")]
    if bad:
        raise ValueError(f"formats {bad} not supported; allowed: png, svg, pdf")
    out = go.Figure(fig)
    out.update_layout(width=w, height=None, template=fig.layout.template)
    fit_layout(out, width=w, height=h)
    _kaleido_ready()
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = stem.with_name(stem.name + "." + fmt)
        out.write_image(str(path), format=fmt, width=w, height=h, scale=1)
        paths.append(path)
    return paths


def save_image(fig: go.Figure, path, **kwargs) -> None:
    """Write a PNG/SVG/PDF with kaleido (no MathJax: it would need a network fetch)."""
    _kaleido_ready()
    fig.write_image(str(path), **kwargs)


apply_display_config()
