"""The layout engine: title block, legend below the plot, notes, sizes, computed in pixels so that
a figure is laid out the same on its first render (a FigureWidget drawn off screen) and after."""
from __future__ import annotations

import re
from typing import Optional, Sequence

import plotly.graph_objects as go

from dspark_lab.views.figures.style import NOTE_COLOR

TITLE_FONT_PX, SUBTITLE_FONT_PX, LEGEND_ROW_PX = 17, 12, 22
DEFAULT_WIDTH_PX = 1000  # the panel's width; a figure without a width is laid out for this one
WRAP_CHARS = 120  # a subtitle line longer than this is broken at its "; " / " — " separators
NOTE_NAME = "dspark-note"  # the annotation fit_layout places between the x axis and the legend


def wrap(text: str, width: int = WRAP_CHARS) -> str:
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


def titled(fig: go.Figure, text: str, fingerprint: str, extra: str = "") -> go.Figure:
    """`fig` with its title and, as subtitle, the machine fingerprint (and `extra`), laid out."""
    sub = fingerprint + (f" — {extra}" if extra else "")
    fig.update_layout(title=dict(text=text, subtitle=dict(text=wrap(sub))))
    wrap_group_labels(fig, int(fig.layout.width or DEFAULT_WIDTH_PX))  # run labels side by side never overlap
    return fit_layout(fig)


def add_note(fig: go.Figure, text: str) -> None:
    """A red note under the plot (what was left out or failed); nothing when `text` is empty."""
    if text:
        fig.add_annotation(text=wrap(text), xref="paper", yref="paper", x=0, y=-0.22, showarrow=False,
                           xanchor="left", font=dict(size=11, color=NOTE_COLOR), name=NOTE_NAME)


def legend_entries(fig: go.Figure) -> list[str]:
    """The names the legend shows, in order: one entry per trace with a name, unless hidden with
    showlegend=False (a legend group only toggles its traces together; each still has its entry)."""
    return [str(tr.name) for tr in fig.data if tr.showlegend is not False and tr.name]


def legend_rows(names: Sequence[str], width_px: float, scale: float = 1.0) -> int:
    """Rows of text a horizontal legend of `names` takes at `width_px` (entry ≈ 7 px a character of
    its longest line + the swatch, times `scale` for larger text). When the entries do not fit on one
    row, plotly sets them in columns as wide as the widest entry; an entry of several lines ("<br>")
    makes its row as many lines tall."""
    if not names:
        return 0
    lines = [str(n).split("<br>") for n in names]
    widths = [scale * (7.0 * max(len(ln) for ln in n) + 50) for n in lines]
    extra = sum(len(n) - 1 for n in lines)  # at most: each tall entry in a row of its own
    if sum(widths) <= width_px:
        return max(len(n) for n in lines)
    per_row = max(1, int(width_px // max(widths)))
    return -(-len(names) // per_row) + extra


def wrap_legend_names(fig: go.Figure, width: int = 60) -> go.Figure:
    """Legend names longer than `width` characters broken into lines of about equal length, none
    longer than `width` where the spaces allow (each cut at the space nearest its even share), so that
    one long entry does not set the whole legend in a single wide column. Changes the names: for a
    copy made to be drawn (a slide), not for a figure whose traces are found by name."""
    for tr in fig.data:
        name = tr.name
        if name and "<br>" not in name and len(name) > width:
            spaces = [i for i, c in enumerate(name) if c == " "]
            if spaces:
                n = -(-len(name) // width)
                cuts = sorted({min(spaces, key=lambda i: abs(i - j * len(name) / n)) for j in range(1, n)})
                bounds = [-1] + cuts + [len(name)]
                tr.name = "<br>".join(name[a + 1:b] for a, b in zip(bounds, bounds[1:]))
    return fig


def legend_width(names: Sequence[str], scale: float = 1.0) -> float:
    """Pixels across a vertical legend of `names`: its widest entry (longest line and the swatch),
    as legend_rows counts an entry."""
    return max((scale * (7.0 * max(len(ln) for ln in str(n).split("<br>")) + 50) for n in names), default=0.0)


CHAR_PX = 7.0  # a character of 12 px text, wide enough for plotly's default font (Open Sans / Arial)


def _x_pairs(fig: go.Figure) -> tuple[list, bool]:
    """The categories on the first x axis in order of first appearance, ((outer, inner) pairs on a
    two-level axis: a run label under each group of strategies), and whether it has two levels."""
    cats, multi = [], False
    for tr in fig.data:
        x = getattr(tr, "x", None)
        if x is None or (getattr(tr, "xaxis", None) or "x") != "x" or getattr(tr, "orientation", None) == "h":
            continue
        x = list(x)
        if x and isinstance(x[0], (list, tuple)):
            multi, x = True, list(zip(*x))
        cats += [v for v in x if isinstance(v, (str, tuple))]
    return list(dict.fromkeys(cats)), multi


def _x_categories(fig: go.Figure) -> tuple[list[str], int, int]:
    """The category labels on the first x axis (the inner level of a two-level axis), how many
    categories it has, and the lines of its outer labels (0 on an axis of one level)."""
    cats, multi = _x_pairs(fig)
    outer = [_n_lines(c[0]) for c in cats if multi and isinstance(c, tuple)]
    return [str(c[-1] if isinstance(c, tuple) else c) for c in cats], len(cats), max(outer, default=1 if multi else 0)


def _break_at_dots(label: str, chars: int) -> str:
    """`label` broken at its " · " separators into lines of at most `chars` where the pieces allow; a
    piece longer than that is broken at its spaces as well."""
    lines: list[str] = []
    for piece in label.split(" · "):
        if lines and len(lines[-1]) + 3 + len(piece) <= chars:
            lines[-1] += " · " + piece
        else:
            lines += _break_at_spaces(piece, chars)
    return "<br>".join(lines)


def _break_at_spaces(text: str, chars: int) -> list[str]:
    """`text` in lines of at most `chars` broken at spaces (a word longer than that on a line of its own)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def wrap_group_labels(fig: go.Figure, width: int, k: float = 1.0) -> bool:
    """The outer labels of a two-level x axis (the run under each group of strategies) that are wider
    than their group's share of the laid-out plot, broken at their " · " separators (and, where a piece
    is still too wide, its spaces) into lines that fit. Changes the x values (`titled` does it for every
    figure it lays out, at its width; a slide's copy again at the slide's, from the labels as given,
    which the layout's meta keeps). True where a label shown changed."""
    cats, multi = _x_pairs(fig)
    if not multi:
        return False
    lay = fig.layout
    meta = dict(lay.meta) if isinstance(lay.meta, dict) else {}
    given = dict(meta.get("dspark_outer_labels") or {})  # label shown -> label as given
    per_group: dict = {}
    for outer, _ in cats:
        o = given.get(str(outer), str(outer))
        per_group[o] = per_group.get(o, 0) + 1
    left = lay.margin.l if lay.margin.l is not None else 80 * k  # fit_layout's margins where none is set yet
    plot_w = width - left - (lay.margin.r if lay.margin.r is not None else 40 * k)
    chars = int(plot_w * min(per_group.values()) / len(cats) / (CHAR_PX * k))
    new = {o: "<br>".join(_break_at_dots(line, chars) if len(line) > chars else line for line in o.split("<br>"))
           for o in per_group}  # a label's own lines kept, each broken where it is too wide
    changed = False
    for tr in fig.data:
        x = getattr(tr, "x", None)
        if x is not None and (getattr(tr, "xaxis", None) or "x") == "x" and len(x) == 2 \
                and isinstance(x[0], (list, tuple)):
            shown = [new[given.get(str(o), str(o))] for o in x[0]]
            shown = [o if v == str(o) else v for o, v in zip(x[0], shown)]  # an unchanged label keeps its type
            changed = changed or shown != list(x[0])
            tr.x = [shown, list(x[1])]
    fig.update_layout(meta={**meta, "dspark_outer_labels": {v: o for o, v in new.items()}})
    return changed


def _x_tick_depth(fig: go.Figure, width: int, right: float, k: float) -> float:
    """Pixels the first x axis's category labels take below the plot, their angle set so that they
    never overlap: horizontal where every category is wider than its label, else upright (-90°: a
    slanted label would reach past the figure's left edge). Set here, not left to plotly's choice
    made in the browser, so the note and legend below can be placed under them. An angle the
    figure set itself is kept. `right`: the right margin in pixels (a legend beside the plot's included)."""
    labels, n, outer_lines = _x_categories(fig)
    if not labels:
        return 0.0
    lay = fig.layout
    meta = dict(lay.meta) if isinstance(lay.meta, dict) else {}
    longest = max(len(v) for v in labels) * CHAR_PX * k
    if lay.xaxis.tickangle is not None and not meta.get("dspark_tickangle"):
        upright = lay.xaxis.tickangle not in (0, 180, -180)
    else:
        plot_w = width - (lay.margin.l if lay.margin.l is not None else 80 * k) - right
        upright = longest > 0.9 * plot_w / max(n, 1)
        fig.update_xaxes(tickangle=-90 if upright else 0)
        fig.update_layout(meta={**meta, "dspark_tickangle": True})
    depth = (longest + 8 * k) if upright else (SUBTITLE_FONT_PX + 8) * k
    return depth + ((SUBTITLE_FONT_PX + 16 + (outer_lines - 1) * (SUBTITLE_FONT_PX + 6)) * k if outer_lines else 0)


def _wrap_axis_title(fig: go.Figure, plot_h: float, k: float) -> None:
    """A y-axis title longer than the plot is tall, broken into two lines (it would run into the title)."""
    t = fig.layout.yaxis.title.text
    if t and "<br>" not in t and len(t) * CHAR_PX * k > plot_h:
        cut = t.rfind(" ", 0, len(t) // 2 + 8)
        if cut > 0:
            fig.update_layout(yaxis_title_text=t[:cut] + "<br>" + t[cut + 1:])


def _top_margin(lay, k: float = 1.0) -> int:
    title_lines = _n_lines(lay.title.text)
    sub_lines = _n_lines(lay.title.subtitle.text) if lay.title.text else 0
    return int(14 + title_lines * k * (TITLE_FONT_PX + 8) + sub_lines * k * (SUBTITLE_FONT_PX + 5) + 26 * k)


def _scale_text(fig: go.Figure, text_px: int) -> None:
    """Every text but the title block at `text_px` at least: axes, ticks, bar labels, legend, notes."""
    fig.update_layout(font=dict(size=text_px), legend=dict(font=dict(size=text_px)))
    fig.update_xaxes(tickfont=dict(size=text_px), title_font=dict(size=text_px))
    fig.update_yaxes(tickfont=dict(size=text_px), title_font=dict(size=text_px))
    for a in fig.layout.annotations:
        a.update(font=dict(size=max(text_px, (a.font.size or 0) if a.font else 0)))


MIN_PLOT_SHARE = 0.4  # a figure of fixed height (a slide) keeps at least this share of it for the plot
SIDE_GAP_PX = 24  # between the plot's right edge and a legend set beside it


def _bottom_margin(fig: go.Figure, width: int, right: float, k: float, note_px: float, legend_px: float) -> int:
    """Pixels under the plot: the x axis's labels and title, the note, and a legend below (`legend_px`)."""
    axis_px = _x_tick_depth(fig, width, right, k) + (24 * k if fig.layout.xaxis.title.text else 0)
    return int(max(70 * k, axis_px + 28 * k) + note_px + (legend_px + 12 if legend_px else 0))


def _side_legend_px(fig: go.Figure, names: Sequence[str], width: int, right: float, room_h: float, k: float) -> int:
    """Pixels a legend takes right of the plot (its widest entry and a gap), where it fits there: its
    lines within `room_h` (the plot's top to the note's) and the plot left at least half the figure's
    width. 0 where it does not: it stays below the plot."""
    lay = fig.layout
    side = legend_width(names, k) + SIDE_GAP_PX * k
    lines = sum(len(str(n).split("<br>")) for n in names) + (1 if lay.legend.title.text else 0)
    left = lay.margin.l if lay.margin.l is not None else 80 * k
    if lines * LEGEND_ROW_PX * k > room_h or width - left - right - side < width / 2:
        return 0
    return int(side)


def fit_layout(fig: go.Figure, width: Optional[int] = None, height: Optional[int] = None,
               text_px: Optional[int] = None) -> go.Figure:
    """Title, subtitle and legend placed explicitly, in pixels from the figure's top and bottom edges.

    The title block's top margin is computed from its lines, and the legend sits horizontally below the
    plot with the bottom margin and height grown by its rows, so nothing is clipped or scrolls off. At
    a fixed `height` (a slide) where a legend below would leave the plot less than MIN_PLOT_SHARE of
    it, the legend stands in one column right of the plot instead, when it fits there.
    Nothing here depends on text measured in the browser, so the first render (a FigureWidget drawn
    before it is on screen) is laid out the same as a redraw. Idempotent: call again after a change
    of size (`export` does). `text_px`: the smallest text in pixels (a slide: 18; default 12), every
    font and the margins scaled with it."""
    lay = fig.layout
    width = int(width or lay.width or DEFAULT_WIDTH_PX)
    k = (text_px or SUBTITLE_FONT_PX) / SUBTITLE_FONT_PX
    top = _top_margin(lay, k)
    names = legend_entries(fig) if lay.showlegend or lay.showlegend is None else []
    rows = legend_rows(names, width - 80 * k, k)
    meta = dict(lay.meta) if isinstance(lay.meta, dict) else {}
    plot_h = meta.get("dspark_plot_px") or max(200, int(height or lay.height or 450) - 120)  # kept across calls
    right = meta.get("dspark_margin_r", lay.margin.r if lay.margin.r is not None else 40)  # the figure's own
    row_px = LEGEND_ROW_PX * k
    note = [a for a in lay.annotations if getattr(a, "name", None) == NOTE_NAME]
    note_px = sum(_n_lines(a.text) for a in note) * 16 * k + (8 * k if note else 0)
    bottom = _bottom_margin(fig, width, right, k, note_px, row_px * rows)
    side = 0
    if height and rows and height - top - bottom < MIN_PLOT_SHARE * height:
        side = _side_legend_px(fig, names, width, right, height - top - note_px - 16 * k, k)
        if side:
            rows, bottom = 0, _bottom_margin(fig, width, right + side, k, note_px, 0)
    total = int(height) if height else int(plot_h + top + bottom)
    _wrap_axis_title(fig, total - top - bottom, k)
    fig.update_layout(
        height=total,
        margin=dict(t=top, b=bottom, l=lay.margin.l if lay.margin.l is not None else int(80 * k), r=right + side),
        title=dict(x=0, xref="container", xanchor="left", y=1, yref="container", yanchor="top",
                   pad=dict(t=14, l=16), font=dict(size=round(TITLE_FONT_PX * k)),
                   subtitle=dict(font=dict(size=round(SUBTITLE_FONT_PX * k), color="#555"))),
        meta={**(dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}), "dspark_plot_px": plot_h,
              "dspark_margin_r": right},
    )
    if text_px:
        _scale_text(fig, text_px)
    _place_legend(fig, width, total, top, rows, side)
    for a in note:  # a failure note sits between the x axis and the legend (annotations take paper units)
        above_px = (row_px * rows + 16 if rows else 8) - bottom
        a.update(yref="paper", y=above_px / max(1, total - top - bottom), yanchor="bottom")
    return fig


def _place_legend(fig: go.Figure, width: int, total: int, top: int, rows: int, side: int) -> None:
    """The legend in rows below the plot, its left edge in line with the title's (16 px, never flush
    with the figure's), or (`side` px) in one column right of the plot, level with its top. Entries
    in trace order ("grouped" would stack a row's legend groups)."""
    if rows:
        fig.update_layout(legend=dict(orientation="h", x=16 / width, xanchor="left", xref="container",
                                      y=0, yref="container", yanchor="bottom", entrywidthmode="pixels",
                                      traceorder="normal"))
    elif side:
        fig.update_layout(legend=dict(orientation="v", x=1 - 16 / width, xanchor="right", xref="container",
                                      y=1 - top / total, yref="container", yanchor="top", traceorder="normal"))


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
