"""Tidy rows -> plotly figures. Pure functions: a DataFrame in, a `go.Figure` out, nothing typed in.

Every number drawn comes from the DataFrame (`schema.ROW_COLUMNS`), and every figure names, in its
subtitle, the GPU, driver, torch and date of the rows it shows (`schema.FINGERPRINT_COLUMNS`).

The per-point figures (`sync_counts`, `step_breakdown`, `timeline`, `strategy_comparison`) show ONE
config point per recorded run (several runs of the same point are set side by side, e.g. two GPUs);
pick a point with `select_point`. `sweep` shows many points. Trace sets are stable (one trace per
part or kind, present even when empty) so a widget can update data in place.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import schema, strategies

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
}
PART_COLORS = {
    "host_prep_ms": "#9ecae1", "host_blocked_ms": "#d62728", "host_readback_ms": "#bdbdbd",
    "host_copy_ms": "#ff7f0e", "host_launch_ms": "#2ca02c", "host_other_ms": "#dadaeb",
    "gpu_busy_ms": "#3f3f8f", "gpu_idle_after_sync_ms": "#f4a582", "gpu_idle_other_ms": "#eeeeee",
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
}
TIMELINE_NAMES = {
    "prep": "host: batch prep", "blocked": "host: blocked in a sync", "readback": "host: result readback",
    "copy": "host: async copy call", "launch": "host: launch / CUDA API", "other": "host: other Python",
    "sync": "sync call (blocking)", "readback_sync": "readback sync (by design)",
    "kernel": "GPU: busy (kernels)", "h2d_copy": "GPU: host-to-device copy", "memcpy": "GPU: other copy",
}
TIMELINE_COLUMNS = ("point_id", "strategy", "lane", "part", "start_ms", "end_ms", "label")
_MERGE_GAP_MS = 0.002  # GPU kernels closer than this are drawn as one span (labels kept in hover)


# -- fingerprints and labels ---------------------------------------------------------------------

def _date(recorded_at) -> str:
    s = "" if recorded_at is None or (isinstance(recorded_at, float) and np.isnan(recorded_at)) else str(recorded_at)
    return s[:10]


def gpu_name(gpu) -> str:
    """The GPU column as shown: a CPU-only run records gpu "none"."""
    g = "" if gpu is None or (isinstance(gpu, float) and np.isnan(gpu)) else str(gpu)
    return "CPU only (no GPU)" if g.lower() in ("", "none", "cpu") else g


def fingerprints(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct (gpu, driver, torch, date) in `rows`, in first-seen order."""
    cols = [c for c in ("gpu", "driver", "cuda", "torch", "recorded_at", "run_id") if c in rows.columns]
    if rows.empty or "gpu" not in cols:
        return pd.DataFrame(columns=["gpu", "driver", "torch", "date"])
    fp = rows[cols].copy()
    fp["date"] = fp["recorded_at"].map(_date) if "recorded_at" in fp else ""
    for c in ("driver", "torch"):
        if c not in fp:
            fp[c] = ""
    fp["gpu"] = fp["gpu"].map(gpu_name)
    return fp[["gpu", "driver", "torch", "date"]].astype(str).drop_duplicates().reset_index(drop=True)


def fingerprint_label(rows: pd.DataFrame) -> str:
    """"NVIDIA H200 · driver 580.95 · torch 2.11.0+cu130 · 2026-05-01" (joined with "; " for several)."""
    fp = fingerprints(rows)
    if fp.empty:
        return "no recorded machine fingerprint in these rows"
    return "; ".join(f"{r.gpu} · driver {r.driver} · torch {r.torch} · {r.date}" if r.driver.lower() != "none"
                     else f"{r.gpu} · torch {r.torch} · {r.date}" for r in fp.itertuples())


def run_labels(rows: pd.DataFrame) -> dict:
    """run_id -> a short label: the GPU and date, with the run id where that is ambiguous."""
    if "run_id" not in rows.columns or rows.empty:
        return {}
    first = rows.drop_duplicates("run_id")
    base = {r["run_id"]: f"{gpu_name(r.get('gpu'))} {_date(r.get('recorded_at'))}".strip() for _, r in first.iterrows()}
    counts = pd.Series(list(base.values())).value_counts()
    return {rid: (lab if counts[lab] == 1 else f"{lab} [{str(rid)[:8]}]") for rid, lab in base.items()}


EP_MODE_LABELS = {"real": "real ranks", "predicate_only": "one GPU, predicate only", "predicted": "predicted"}


def point_label(row) -> str:
    """'EP 2 · batch 8 · gamma 4 · sglang_profile' for a row (Series or dict)."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    parts = [f"EP {get('ep_size')}", f"batch {get('batch_size')}", f"gamma {get('gamma')}"]
    mode = get("ep_mode")
    if mode in EP_MODE_LABELS:  # how EP was run (schema.RANK_COLUMNS); nothing to say at EP 1
        parts[0] += f" ({EP_MODE_LABELS[mode]})"
    if get("workload") is not None:
        parts.append(str(get("workload")))
    if get("model") is not None:
        parts.append(f"model {get('model')}")
    return " · ".join(parts)


def strategy_order(present: Iterable[str]) -> list[str]:
    known = list(strategies.names())
    present = list(dict.fromkeys(present))
    return [s for s in known if s in present] + sorted(s for s in present if s not in known)


def _title(fig: go.Figure, text: str, rows: pd.DataFrame, extra: str = "") -> go.Figure:
    sub = fingerprint_label(rows) + (f" — {extra}" if extra else "")
    fig.update_layout(title=dict(text=text, subtitle=dict(text=sub)), margin=dict(t=90))
    return fig


# -- selecting data ------------------------------------------------------------------------------

def ok_rows(rows: pd.DataFrame) -> pd.DataFrame:
    if "status" not in rows.columns:
        return rows
    return rows[rows["status"] == "ok"]


def failed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    if "status" not in rows.columns:
        return rows.iloc[0:0]
    return rows[rows["status"] != "ok"]


def _run_key(rows: pd.DataFrame) -> pd.Series:
    return rows["run_id"].astype(str) if "run_id" in rows.columns else pd.Series("", index=rows.index)


def _check_one_point(rows: pd.DataFrame, what: str) -> None:
    if rows.empty:
        return
    per_run = rows.groupby(_run_key(rows))["point_id"].nunique()
    if (per_run > 1).any():
        raise ValueError(
            f"{what} shows one config point per run, but the rows hold {int(per_run.max())} points of one run; "
            "pick one with figures.select_point(rows, ep_size=..., batch_size=..., gamma=..., workload=...)"
        )


def point_distance(points: pd.DataFrame, ep_size=None, batch_size=None, gamma=None) -> pd.Series:
    """Distance of each point to the asked settings: log2 steps in each asked dimension, summed."""
    d = pd.Series(0.0, index=points.index)
    for col, want in (("ep_size", ep_size), ("batch_size", batch_size), ("gamma", gamma)):
        if want is not None:
            d = d + (np.log2(points[col].astype(float)) - np.log2(float(want))).abs()
    return d


def select_point(rows: pd.DataFrame, *, ep_size=None, batch_size=None, gamma=None, workload=None,
                 model=None, run_id=None, point_id=None) -> pd.DataFrame:
    """The rows (all strategies, all trials) of the recorded point nearest to the asked settings.

    Workload, model and run are matched exactly when given (and present); EP size, batch size and
    gamma by nearest (log2 distance). Where several runs hold the nearest point, all are kept, so a
    figure can set the GPUs side by side; pass run_id to keep one. Ties go to the smaller point.
    """
    if rows.empty:
        raise ValueError("no recorded rows to select from")
    df = rows
    if point_id is not None:
        df = df[df["point_id"] == point_id]
        if df.empty:
            raise ValueError(f"point_id {point_id!r} is not in the rows")
        return df
    for col, want in (("workload", workload), ("model", model), ("run_id", run_id)):
        if want is not None and col in df.columns:
            hit = df[df[col] == want]
            if hit.empty:
                known = sorted(map(str, df[col].dropna().unique()))
                raise ValueError(f"{col} {want!r} is not in the recorded rows; recorded: {', '.join(known)}")
            df = hit
    pts = df.drop_duplicates("point_id")[["point_id", "ep_size", "batch_size", "gamma"]].copy()
    pts["_d"] = point_distance(pts, ep_size, batch_size, gamma)
    pts = pts.sort_values(["_d", "ep_size", "batch_size", "gamma"], kind="stable")
    return df[df["point_id"] == pts["point_id"].iloc[0]]


# -- aggregation (medians of recorded values; trace columns repeat on each trial row) -------------

def per_strategy(rows: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """One row per (run, strategy) with the median over trials of `columns`, in strategy order."""
    df = ok_rows(rows)
    if df.empty:
        return pd.DataFrame(columns=["run_id", "strategy", *columns])
    # Missing or null values (a column an older run lacks) become NaN, never a crash.
    df = df.assign(run_id=_run_key(df), **{c: pd.to_numeric(df[c], errors="coerce") if c in df.columns
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
    labels = run_labels(rows.assign(run_id=_run_key(rows)))
    return [[labels.get(r, r) for r in agg["run_id"]], list(agg["strategy"])]


def _failed_note(rows: pd.DataFrame) -> str:
    bad = failed_rows(rows)
    if bad.empty:
        return ""
    first = bad.drop_duplicates("strategy")
    return "failed: " + "; ".join(f"{r.strategy}: {str(r.error)[:120]}" for r in first.itertuples())


def _note(fig: go.Figure, text: str) -> None:
    if text:
        fig.add_annotation(text=text, xref="paper", yref="paper", x=0, y=-0.22, showarrow=False,
                           xanchor="left", font=dict(size=11, color="#8c1c13"))


# -- figures -------------------------------------------------------------------------------------

def sync_counts(rows: pd.DataFrame) -> go.Figure:
    """Host-blocking syncs per step by strategy, stacked by kind; the by-design readback beside them."""
    _check_one_point(ok_rows(rows), "sync_counts")
    cols = [c for c, _ in SYNC_KINDS] + [READBACK_KIND[0], "syncs_per_step"]
    agg = per_strategy(rows, cols)
    x = _x(agg, rows)
    fig = go.Figure()
    for col, name in SYNC_KINDS:
        fig.add_bar(x=x, y=agg[col].tolist(), name=name, marker_color=SYNC_COLORS[col], offsetgroup="syncs",
                    hovertemplate=f"{name}: %{{y:.2f}} per step<extra></extra>")
    fig.add_bar(x=x, y=agg[READBACK_KIND[0]].tolist(), name=READBACK_KIND[1], offsetgroup="readback",
                marker=dict(color=SYNC_COLORS[READBACK_KIND[0]], pattern_shape="/"),
                hovertemplate="readback: %{y:.2f} per step<extra></extra>")
    fig.add_scatter(x=x, y=agg["syncs_per_step"].tolist(), mode="text", name="total (syncs_per_step)",
                    text=[f"{v:.2f}" for v in agg["syncs_per_step"]], textposition="top center",
                    showlegend=False, hoverinfo="skip")
    fig.update_layout(barmode="relative", yaxis_title="host-blocking calls per step", legend_title="kind")
    pt = point_label(ok_rows(rows).iloc[0]) if not ok_rows(rows).empty else ""
    _note(fig, _failed_note(rows))
    return _title(fig, "Syncs per step by strategy", rows, pt)


def step_breakdown(rows: pd.DataFrame) -> go.Figure:
    """Where each step's wall time went: host parts (left bar) and GPU parts (right bar) per strategy,
    stacked; the profiled step's wall time (which each side sums to) and the profiler-free median
    step time of the trials are marked."""
    _check_one_point(ok_rows(rows), "step_breakdown")
    cols = list(schema.HOST_PARTS) + list(schema.GPU_PARTS) + ["gpu_idle_after_sync_ms", "profiled_step_ms", "step_ms"]
    agg = per_strategy(rows, cols)
    agg["gpu_idle_after_sync_ms"] = np.minimum(agg["gpu_idle_after_sync_ms"], agg["gpu_idle_ms"])
    agg["gpu_idle_other_ms"] = agg["gpu_idle_ms"] - agg["gpu_idle_after_sync_ms"]
    x = _x(agg, rows)
    fig = go.Figure()
    for group, parts in (("host", schema.HOST_PARTS), ("gpu", GPU_DRAWN_PARTS)):
        base = np.zeros(len(agg))
        for col in parts:
            vals = agg[col].to_numpy(dtype=float)
            fig.add_bar(x=x, y=vals.tolist(), base=base.tolist(), name=PART_NAMES[col], offsetgroup=group,
                        legendgroup=group,
                        marker=dict(color=PART_COLORS[col], pattern_shape="x" if col == "gpu_idle_after_sync_ms" else ""),
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
    _note(fig, _failed_note(rows))
    return _title(fig, "Step-time breakdown: host thread vs GPU stream", rows, pt)


def strategy_comparison(rows: pd.DataFrame, baseline: str = "device_direct") -> go.Figure:
    """Median step time across trials per strategy with a 95% bootstrap CI of the median
    (measure.timing.median_ci); several runs of the point are set side by side (e.g. two GPUs)."""
    from .measure.timing import median_ci

    _check_one_point(ok_rows(rows), "strategy_comparison")
    df = ok_rows(rows)
    df = df.assign(run_id=_run_key(df))
    labels = run_labels(df)
    fig = go.Figure()
    for i, (rid, g) in enumerate(df.groupby("run_id", sort=False)):
        order = strategy_order(g["strategy"])
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
        )
    fig.update_layout(barmode="group", yaxis_title="step time, ms (median of trials, 95% CI)",
                      showlegend=True, legend_title="run")
    pt = point_label(df.iloc[0]) if not df.empty else ""
    _note(fig, _failed_note(rows))
    return _title(fig, "Step time by strategy", rows, pt)


def sweep(rows: pd.DataFrame, workload: Optional[str] = None, model: Optional[str] = None) -> go.Figure:
    """Median step time (over trials) against batch size, one line per strategy and gamma, one
    column per EP size, one row per run. Shows one workload and model (the most recorded if not given)."""
    df = ok_rows(rows)
    extra = []
    for col, want in (("workload", workload), ("model", model)):
        if col in df.columns and not df.empty:
            pick = want if want is not None else df[col].value_counts().index[0]
            df = df[df[col] == pick]
            extra.append(f"{col} {pick}")
    df = df.assign(run_id=_run_key(df))
    agg = (df.groupby(["run_id", "ep_size", "batch_size", "gamma", "strategy"], sort=False)["step_ms"]
           .median().reset_index())
    runs = list(dict.fromkeys(agg["run_id"])) or [""]
    eps = sorted(agg["ep_size"].unique()) or [1]
    labels = run_labels(df)
    fig = make_subplots(rows=len(runs), cols=len(eps), shared_yaxes=True, shared_xaxes=True,
                        column_titles=[f"EP {e}" for e in eps],
                        row_titles=[labels.get(r, r) for r in runs] if len(runs) > 1 else None,
                        horizontal_spacing=0.04, vertical_spacing=0.08)
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
    _note(fig, _failed_note(rows))
    _title(fig, "Sweep: median step time over batch size × gamma", rows, ", ".join(extra))
    fig.update_layout(margin=dict(t=120))
    return fig


# -- timeline ------------------------------------------------------------------------------------

def flatten_timelines(timelines) -> pd.DataFrame:
    """Timeline records or a DataFrame with a nested `segments` column -> one row per segment."""
    if timelines is None:
        return pd.DataFrame(columns=list(TIMELINE_COLUMNS))
    df = timelines if isinstance(timelines, pd.DataFrame) else pd.DataFrame(list(timelines))
    if "segments" not in df.columns:
        return df
    keep = [c for c in df.columns if c not in ("segments", "kind")]
    out = []
    for rec in df.to_dict("records"):
        for seg in rec.get("segments") or []:
            lane, part, s, e, label = (list(seg) + [""] * 5)[:5]
            out.append({**{k: rec[k] for k in keep}, "lane": lane, "part": part, "start_ms": float(s),
                        "end_ms": float(e), "label": label})
    return pd.DataFrame(out, columns=keep + ["lane", "part", "start_ms", "end_ms", "label"])


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
    rlabels = run_labels(fp_rows) if multi_run and rows is not None else {}
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


# -- static export -------------------------------------------------------------------------------

def save_image(fig: go.Figure, path, **kwargs) -> None:
    """Write a PNG/SVG/PDF with kaleido (no MathJax: it would need a network fetch)."""
    import plotly.io as pio

    pio.defaults.mathjax = None
    fig.write_image(str(path), **kwargs)
