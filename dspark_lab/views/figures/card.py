"""The platform card drawn: a heatmap per direction (source × size; the colour is the verdict, the
text the median host time of the call), and two machines' cards side by side with the cells whose
verdicts differ marked. Takes card dicts (results.analyses.card format); every number comes from them."""
from __future__ import annotations

from typing import Optional

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dspark_lab.results.analyses import card as card_results
from dspark_lab.views.figures.layout import DEFAULT_WIDTH_PX, titled

VERDICT_COLORS = {card_results.AT_ONCE: "#a1d99b", card_results.FOR_COPY: "#fdd49e", card_results.WAITS: "#ef6548"}
FAILED_COLOR = "#d9d9d9"
DIFFERS_MARK = "≠"  # the verdicts of two cards differ, neither at the rule's edge
EDGE_DIFFERS_MARK = "(≠)"  # they differ, and one of them is at the edge (results.analyses.card.EDGE_RULE)
EDGE_MARK = "~"  # this cell's verdict is at the rule's edge


def _time(us: float) -> str:
    if pd.isna(us):
        return "—"
    return f"{us / 1e3:.1f} ms" if us >= 1e3 else f"{us:.0f} µs"


def _colorscale() -> list:
    """Discrete: z = -1 failed, 0 at once, 1 blocks for the copy, 2 waits."""
    colors = [FAILED_COLOR] + [VERDICT_COLORS[v] for v in card_results.VERDICTS]
    n = len(colors)
    out = []
    for i, c in enumerate(colors):
        out += [[i / n, c], [(i + 1) / n, c]]
    return out


def _grid(f: pd.DataFrame, direction: str, value: str) -> pd.DataFrame:
    """Rows: the direction's sources in SOURCES order (labelled by how the copy is made); columns: sizes."""
    g = f[f["direction"] == direction]
    t = g.pivot_table(index="how", columns="size_bytes", values=value, aggfunc="first", dropna=False)
    order = [how for s, (d, how, _) in card_results.SOURCES.items() if d == direction and how in t.index]
    return t.reindex(index=order, columns=sorted(t.columns))


def _mark(r, differs: dict) -> str:
    key = (r.direction, r.source, r.size_bytes)
    if key in differs:
        return (DIFFERS_MARK if differs[key] else EDGE_DIFFERS_MARK) + " "
    return EDGE_MARK if r.edge else ""


def _heatmap(f: pd.DataFrame, direction: str, differs: Optional[dict] = None, show_scale: bool = False,
             times: bool = True) -> go.Heatmap:
    """`differs`: (direction, source, size) -> True where two cards differ firmly, False at the edge.
    `times`: the median host time as each cell's text (else only its mark; hover has the time)."""
    differs = differs or {}
    code = {None: -1, **{v: i for i, v in enumerate(card_results.VERDICTS)}}
    f = f.assign(z=[code.get(v, -1) for v in f["verdict"]],
                 text=[(_mark(r, differs) + _time(r.host_us)) if times else _mark(r, differs).strip()
                       for r in f.itertuples()],
                 hover=[f"{r.how}, {r.size}, {r.queued_ms:g} ms queued<br>{r.verdict or 'failed: ' + r.error}"
                        + (f" (at the rule's edge: {r.edge})" if r.edge else "") + "<br>host "
                        f"{_time(r.host_us)} (min {_time(r.host_us_min)}, max {_time(r.host_us_max)}, {r.reps} reps); "
                        f"copy on the GPU {_time(r.copy_gpu_us)}<br>sync debug mode: {r.debug_syncs}; blocking CUDA "
                        f"calls in the trace: {r.trace_syncs}<br>{r.gpu_copies}" for r in f.itertuples()])
    z, text, hover = (_grid(f, direction, c) for c in ("z", "text", "hover"))
    # z stays NaN in a cell not measured (a size over the source's cap): drawn blank
    return go.Heatmap(z=z.values, x=[card_results.size_label(c) for c in z.columns], y=list(z.index),
                      text=text.fillna("").values, texttemplate="%{text}", customdata=hover.fillna("not measured").values,
                      hovertemplate="%{customdata}<extra></extra>", colorscale=_colorscale(), zmin=-1.5, zmax=2.5,
                      textfont=dict(size=10), xgap=2, ygap=2, showscale=show_scale,
                      colorbar=dict(tickvals=[-1, 0, 1, 2], ticktext=["failed", *card_results.VERDICTS], len=0.6))


def _rows_px(directions) -> list[int]:
    return [sum(1 for d, _, _ in card_results.SOURCES.values() if d == k) for k in directions]


def card(card: dict, queue: str = "queued") -> go.Figure:
    """The card of one machine at one queue ("queued": the deepest queue, or "empty")."""
    if queue not in ("empty", "queued"):
        raise ValueError(f"queue must be 'empty' or 'queued'; got {queue!r}")
    f = card_results.frame(card)
    f = f[f["queue"] == queue]
    directions = [d for d in card_results.DIRECTIONS if d in set(f["direction"])]
    heights = _rows_px(directions)
    # Sizes are the same columns in every direction: one row of size labels, under the last heatmap.
    fig = make_subplots(rows=len(directions), cols=1, row_heights=heights, vertical_spacing=0.08, shared_xaxes=True,
                        subplot_titles=[card_results.DIRECTIONS[d] for d in directions])
    for i, d in enumerate(directions, start=1):
        fig.add_trace(_heatmap(f, d, show_scale=i == 1), row=i, col=1)
    depth = f["queued_ms"].max() if len(f) else 0
    # The panel's width, so that a notebook shows it whole; r: room for the colour bar's verdict names
    fig.update_layout(height=120 + 34 * sum(heights), width=DEFAULT_WIDTH_PX, margin=dict(l=380, r=200))
    fig.update_yaxes(autorange="reversed")  # sources top to bottom in SOURCES order
    what = f"{depth:g} ms of GPU work queued ahead" if queue == "queued" else "GPU queue empty"
    return titled(fig, f"What each copy does on this machine ({what})",
                  card_results.label(card), "colour: the verdict by results.analyses.card.VERDICT_RULE; text: median host "
                  f"time of the call; {EDGE_MARK}: the verdict is at the rule's edge (hover says why); blank: not measured")


def card_pair(a: dict, b: dict, queue: str = "queued") -> go.Figure:
    """Two machines' cards side by side (a left, b right), the cells whose verdicts differ marked ≠
    (firmly) or (≠) (one of the two verdicts at the rule's edge)."""
    if queue not in ("empty", "queued"):
        raise ValueError(f"queue must be 'empty' or 'queued'; got {queue!r}")
    m = card_results.compare(a, b)
    m = m[(m["queue"] == queue) & m["differs"]]
    differs = {(r.direction, r.source, r.size_bytes): bool(r.differs_firmly) for r in m.itertuples()}
    firm = sum(differs.values())
    fa, fb = (card_results.frame(c) for c in (a, b))
    fa, fb = fa[fa["queue"] == queue], fb[fb["queue"] == queue]
    directions = [d for d in card_results.DIRECTIONS if d in set(fa["direction"]) | set(fb["direction"])]
    heights = _rows_px(directions)
    fig = make_subplots(rows=len(directions), cols=2, row_heights=heights, vertical_spacing=0.08, horizontal_spacing=0.02,
                        shared_yaxes=True, shared_xaxes=True, subplot_titles=[f"{card_results.DIRECTIONS[d]} — {side}" for d in directions
                                                           for side in ("a", "b")])
    for i, d in enumerate(directions, start=1):
        # Two cards in the panel's width: a cell shows only its mark (its times are in the hover)
        fig.add_trace(_heatmap(fa, d, differs, show_scale=i == 1, times=False), row=i, col=1)
        fig.add_trace(_heatmap(fb, d, differs, times=False), row=i, col=2)
    fig.update_layout(height=120 + 34 * sum(heights), width=DEFAULT_WIDTH_PX, margin=dict(l=380, r=200))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-90)  # 18 columns: sizes upright, never over each other
    fig.update_annotations(font_size=11)  # each subplot's title over half the width
    return titled(fig, f"Two machines' cards: {firm} cell(s) with a different verdict ({DIFFERS_MARK}), "
                       f"{len(differs) - firm} more where one verdict is at the rule's edge ({EDGE_DIFFERS_MARK})",
                  f"a: {card_results.label(a)}; b: {card_results.label(b)}",
                  ("GPU work queued ahead" if queue == "queued" else "GPU queue empty")
                  + "; colour: the verdict; hover: median host time; blank: not measured")
