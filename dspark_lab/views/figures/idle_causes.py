"""The GPU idle of each strategy's step by cause (sync / host-bound / other; measure/idle_causes.py),
with the run-ahead fraction and the median launch lead over each bar: where the GPU's idle comes
from, and how far ahead the host launches."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dspark_lab.results.analyses.run_ahead_idle import IDLE_CAUSES
from dspark_lab.views.figures.layout import add_note, titled
from dspark_lab.views.figures.point import Point, as_view, categories
from dspark_lab.views.figures.style import CAUSE_COLORS

NOT_RECORDED = "GPU idle by cause and run-ahead not in this run (recorded before they were measured)"


def idle_by_cause(point: Point) -> go.Figure:
    """Stacked bars per strategy: GPU idle per step drained by a sync, host-bound, other (they sum to
    the measured idle); the run-ahead fraction and the median launch lead written over each bar."""
    view = as_view(point, "idle_by_cause")
    cols = [k for _, k, _ in IDLE_CAUSES] + ["gpu_idle_ms", "run_ahead_fraction", "launch_lead_median_ms"]
    agg = view.per_strategy(cols)
    x = categories(view, agg)
    fig = go.Figure()
    base = np.zeros(len(agg))
    for cause, key, what in IDLE_CAUSES:
        vals = np.nan_to_num(agg[key].to_numpy(dtype=float))
        fig.add_bar(x=x, y=vals.tolist(), base=base.tolist(), name=f"{cause.replace('_', '-')}: {what}",
                    marker_color=CAUSE_COLORS[cause], hovertemplate=f"{cause}: %{{y:.3f}} ms<extra></extra>")
        base = base + vals
    labels = [f"run-ahead {f:.2f}<br>lead {d:+.2f} ms" if np.isfinite(f) else ""
              for f, d in zip(agg["run_ahead_fraction"].astype(float), agg["launch_lead_median_ms"].astype(float))]
    fig.add_scatter(x=x, y=base.tolist(), mode="text", text=labels, textposition="top center", showlegend=False,
                    hoverinfo="skip")
    fig.update_layout(barmode="overlay", yaxis_title="GPU idle, ms per step (profiled steps)")
    fig = titled(fig, "GPU idle by cause, and how far ahead the host launches", view.fingerprint, view.point)
    if agg["gpu_idle_host_bound_ms"].isna().all():
        add_note(fig, NOT_RECORDED)
    return fig
