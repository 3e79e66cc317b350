"""The step model's figure (results.analyses.step_model): modelled step time with and without the sync over
the target verify's GPU time, at one host-prep scale. A model's numbers, titled as such."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dspark_lab.results.analyses.step_model import StepModel
from dspark_lab.views.figures.layout import titled
from dspark_lab.views.figures.style import STRATEGY_COLORS


def penalty_model(model: StepModel, host_prep_scale: float = 1.0, verify_ms: float | None = None) -> go.Figure:
    m = model.scaled(host_prep_scale, verify_ms)
    vs = np.linspace(0.25, max(10.0, m.verify_ms * 1.5), 80)
    dd = [m.scaled(1.0, v).device_direct_ms() for v in vs]
    free = [m.scaled(1.0, v).sync_free_ms() for v in vs]
    fig = go.Figure()
    fig.add_scatter(x=vs, y=dd, mode="lines", name="device_direct (host waits in the sync)",
                    line=dict(color=STRATEGY_COLORS["device_direct"]))
    fig.add_scatter(x=vs, y=free, mode="lines", name="sync-free (host runs ahead)",
                    line=dict(color=STRATEGY_COLORS["persistent_fill"]))
    fig.add_scatter(x=[m.verify_ms, m.verify_ms], y=[m.sync_free_ms(), m.device_direct_ms()], mode="markers+lines",
                    name=f"this setting: penalty {m.penalty_ms():.2f} ms", line=dict(color="black", dash="dot"))
    fig.update_layout(xaxis_title="target verify, ms of GPU work queued before the scalar",
                      yaxis_title="modelled step time, ms", showlegend=True)
    return titled(fig, "Model: what sets the sync's cost", "a model (results/analyses/step_model.py), not a measurement",
                  f"host prep × {host_prep_scale:g}: exposed host work {m.prep_before_ms + m.post_scalar_ms + m.launch_ms:.2f} ms "
                  f"· host {m.host_ms:.2f} ms, GPU {m.gpu_ms:.2f} ms per step")
