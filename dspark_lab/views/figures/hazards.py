"""The hazards' curves: the race's window (share of wrong values against the refill delay) and the
pageable copies that raced, by size. Rows from results.analyses.hazards; nothing is typed in."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dspark_lab.results.analyses import card as card_results
from dspark_lab.results.analyses import hazards as hazards_results
from dspark_lab.views.figures.layout import DEFAULT_WIDTH_PX, titled


def curves(rec: dict) -> go.Figure:
    """Left: wrong share against the delay between a pinned copy and the refill of its source, one
    line per GPU queue ahead of the copy. Right: share of pageable non-blocking copies that raced, by size."""
    w, r = hazards_results.window_frame(rec), hazards_results.race_frame(rec)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=["refill delay after a pinned copy", "pageable non-blocking copy, overwritten at once"])
    for q, g in w.groupby("queued_us", sort=True):
        fig.add_trace(go.Scatter(x=g["delay_us"].clip(lower=0.5), y=g["share"] * 100, mode="lines+markers",
                                 name=f"{q:g} us queued ahead" if q else "nothing queued ahead",
                                 text=[f"{a} of {b}" for a, b in zip(g["wrong"], g["n"])],
                                 hovertemplate="%{text} wrong at %{customdata:g} us<extra></extra>", customdata=g["delay_us"]),
                      row=1, col=1)
    fig.add_trace(go.Bar(x=[f"{b >> 10} KiB" if b < 1 << 20 else f"{b >> 20} MiB" for b in r["bytes"]], y=r["share"] * 100,
                         name="copies raced", text=[f"{a}/{b}" for a, b in zip(r["raced"], r["n"])], textposition="outside"),
                  row=1, col=2)
    fig.update_xaxes(type="log", title_text="host delay before the refill, us (0 drawn at 0.5)", row=1, col=1)
    fig.update_xaxes(title_text="copy size", row=1, col=2)
    fig.update_yaxes(title_text="% wrong", range=[0, 105], row=1, col=1)
    fig.update_yaxes(title_text="% raced", range=[0, 110], row=1, col=2)
    fig.update_layout(height=420, width=DEFAULT_WIDTH_PX)  # the panel's: inside the output area wherever the panel is
    return titled(fig, "How wide the race's window is on this machine", card_results.label(rec),
                  "each point is a count of wrong values measured on the GPU's side after the loop")
