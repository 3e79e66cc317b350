"""The timeline figure: the host thread and the GPU stream over a few profiled steps, one pair of
lanes (plus a lane of sync calls) per strategy and run. Named `timelines` so that the facade's
`figures.timeline` stays the function."""
from __future__ import annotations

from typing import Optional, Sequence

import pandas as pd
import plotly.graph_objects as go

from dspark_lab.results.viewmodels.point_view import PointView, timeline_view
from dspark_lab.results.facts.strategy_table import strategy_order
from dspark_lab.views.figures.layout import titled
from dspark_lab.views.figures.style import (TIMELINE_COLORS, TIMELINE_GPU_PARTS, TIMELINE_HOST_PARTS, TIMELINE_NAMES,
                                            TIMELINE_SYNC_PARTS)

MERGE_GAP_MS = 0.002  # GPU kernels closer than this are drawn as one span (labels kept in hover)
DRAWN_PARTS = TIMELINE_HOST_PARTS + TIMELINE_SYNC_PARTS + TIMELINE_GPU_PARTS


def drawn_part(lane: str, part: str) -> str:
    """The part a recorded segment is drawn as: "host_blocked_ms" and "blocked" alike -> "blocked";
    measure.breakdown.timeline's merged GPU "busy" spans -> "kernel"."""
    p = str(part)
    for pre in ("host_", "gpu_"):
        if p.startswith(pre) and p[len(pre):] in TIMELINE_HOST_PARTS + ("busy", "idle"):
            p = p[len(pre):]
    if p.endswith("_ms"):
        p = p[:-3]
    if p == "busy":
        p = "kernel"
    return p


def _merge_spans(seg: pd.DataFrame) -> pd.DataFrame:
    """Merge touching spans of one lane/part (GPU kernels of a graph replay) for drawing."""
    if len(seg) < 2:
        return seg.assign(n=1)
    seg = seg.sort_values("start_ms")
    out, cur = [], None
    for r in seg.itertuples(index=False):
        if cur is not None and r.start_ms - cur["end_ms"] <= MERGE_GAP_MS:
            cur["end_ms"] = max(cur["end_ms"], r.end_ms)
            cur["n"] += 1
        else:
            if cur is not None:
                out.append(cur)
            cur = {"start_ms": r.start_ms, "end_ms": r.end_ms, "label": str(r.label), "n": 1}
    out.append(cur)
    return pd.DataFrame(out)


def _lane_groups(view: PointView, tl: pd.DataFrame) -> list[tuple[pd.DataFrame, str]]:
    """(segments, lane prefix) per strategy, and per run when several runs are drawn, in strategy order."""
    if tl.empty:
        return []
    multi_run = "run_id" in tl.columns and tl["run_id"].nunique() > 1
    keys = ["run_id", "strategy"] if multi_run else ["strategy"]
    present = tl[keys].drop_duplicates()
    groups = []
    for s in strategy_order(present["strategy"]):
        for rec in present[present["strategy"] == s].to_dict("records"):
            prefix = f"{view.labels.get(rec['run_id'], rec['run_id'])} · {s}" if multi_run else s
            mask = pd.Series(True, index=tl.index)
            for k, v in rec.items():
                mask &= tl[k] == v
            groups.append((tl[mask], prefix))
    return groups


def _part_bars(fig: go.Figure, groups, part: str) -> None:
    """One bar trace of `part` across every lane (always added, maybe empty: a stable trace set)."""
    xs, bases, ys, hover, text = [], [], [], [], []
    for g, prefix in groups:
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
                # A sync's label after its bar, level: inside a short bar plotly turned it upright and cut it
                text=text, textposition="outside", textangle=0, cliponaxis=False,
                textfont=dict(color=TIMELINE_COLORS["sync"], size=10), constraintext="none",
                width=0.8 if part not in TIMELINE_SYNC_PARTS else 0.6)


def _markers(fig: go.Figure, groups) -> None:
    """Each blocking sync: a marker at its start, labelled with how long it kept the host blocked;
    each step's start: a tick on the host and GPU lanes."""
    mx, my, mt, mh = [], [], [], []
    sx, sy, st = [], [], []
    for g, prefix in groups:
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


def timeline(timelines, rows: Optional[pd.DataFrame] = None, *, point_id: Optional[str] = None,
             strategies_shown: Optional[Sequence[str]] = None) -> go.Figure:
    """The host thread and the GPU stream over a few profiled steps, one pair of lanes per strategy
    (plus a lane of sync calls): each sync is drawn with its blocked time and labelled with its
    duration; hover names the call and the source line. `timelines` is a PointView (its segments),
    or the segments with `rows` for the fingerprint (`point_id`: which point, when they hold several)."""
    view = timelines if isinstance(timelines, PointView) else timeline_view(timelines, rows, point_id)
    tl = view.segments
    if strategies_shown is not None:
        tl = tl[tl["strategy"].isin(list(strategies_shown))]
    if not tl.empty:
        tl = tl.assign(part=[drawn_part(lane, p) for lane, p in zip(tl["lane"], tl["part"])])
    groups = _lane_groups(view, tl)
    lanes = [f"{prefix} · {kind}" for _, prefix in groups for kind in ("host", "syncs", "GPU")]
    fig = go.Figure()
    extra_parts = sorted(set(tl["part"]) - set(DRAWN_PARTS + ("step",))) if not tl.empty else []
    for part in DRAWN_PARTS + tuple(extra_parts):
        _part_bars(fig, groups, part)
    _markers(fig, groups)
    fig.update_layout(barmode="overlay", xaxis_title="ms from the start of the first shown step",
                      yaxis=dict(categoryorder="array", categoryarray=lanes[::-1], automargin=True),
                      height=max(380, 60 + 40 * len(lanes)), legend_title="part")
    return titled(fig, "Timeline: host thread and GPU stream over a few steps", view.fingerprint, view.point)

