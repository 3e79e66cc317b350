"""The sweep figure: median step time over batch size x gamma, one column per EP size, one row per
run (many points; the per-point figures are in point.py). Named `sweeps` so that the facade's
`figures.sweep` stays the function."""
from __future__ import annotations

from typing import Optional

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dspark_lab.results.frames import fingerprint_label, run_key, run_names
from dspark_lab.results.point_view import kept_trials, trials_note
from dspark_lab.results.strategy_info import strategy_order
from dspark_lab.views.figures.layout import add_note, titled
from dspark_lab.views.figures.style import DASHES, STRATEGY_COLORS

MAX_SWEEP_RUNS = 4  # rows of sweep subplots at most; the other runs are named in a note


def sweep(rows: pd.DataFrame, workload: Optional[str] = None, model: Optional[str] = None,
          max_runs: int = MAX_SWEEP_RUNS) -> go.Figure:
    """Median step time (over trials) against batch size, one line per strategy and gamma, one
    column per EP size, one row per run. Shows one workload and model (the most recorded if not given).
    At most `max_runs` runs are drawn, the most recently recorded; a note says how many were left
    out (choose runs with results.Runs.select)."""
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise ValueError(f"max_runs must be a positive integer, got {max_runs!r}")
    df, extra = _one_workload_and_model(kept_trials(rows), workload, model)
    labels = run_names(df)
    df, left_out = _newest_runs(df, max_runs)
    agg = (df.groupby(["run_id", "ep_size", "batch_size", "gamma", "strategy"], sort=False)["step_ms"]
           .median().reset_index())
    runs = list(dict.fromkeys(agg["run_id"])) or [""]
    fig = _grid(agg, runs, labels)
    note = trials_note(rows)
    if left_out:
        note = (note + "; " if note else "") + (f"{len(left_out)} more run(s) not drawn (the {len(runs)} most recent "
                                                 "are; choose runs with results.Runs.select)")
    add_note(fig, note)
    shown = rows[run_key(rows).isin(set(runs))] if left_out else rows
    return titled(fig, "Sweep: median step time over batch size × gamma", fingerprint_label(shown), ", ".join(extra))


def _one_workload_and_model(df: pd.DataFrame, workload: Optional[str], model: Optional[str]):
    """The trials of one workload and one model (each the most recorded unless given), and the words
    that say which."""
    extra = []
    for col, want in (("workload", workload), ("model", model)):
        if col in df.columns and not df.empty:
            pick = want if want is not None else df[col].value_counts().index[0]
            df = df[df[col] == pick]
            extra.append(f"{col} {pick}")
    return df, extra


def _newest_runs(df: pd.DataFrame, max_runs: int):
    """The trials of the `max_runs` most recently recorded runs, and the run ids left out."""
    all_runs = list(dict.fromkeys(df["run_id"]))
    if len(all_runs) <= max_runs:
        return df, []
    when = df.groupby("run_id", sort=False)["recorded_at"].max().astype(str) if "recorded_at" in df else {}
    newest = sorted(all_runs, key=lambda r: (str(when.get(r, "")), r), reverse=True)[:max_runs]
    return df[df["run_id"].isin(newest)], [r for r in all_runs if r not in set(newest)]


def _grid(agg: pd.DataFrame, runs: list, labels: dict) -> go.Figure:
    """One subplot per (run, EP size), one line per (strategy, gamma); a legend entry per line kind."""
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
                    fig.add_scatter(
                        x=line["batch_size"].tolist(), y=line["step_ms"].tolist(), mode="lines+markers",
                        name=f"{s}, gamma {gm}", legendgroup=f"{s}-{gm}", showlegend=(s, gm) not in seen,
                        line=dict(color=STRATEGY_COLORS.get(s, "#7f7f7f"), dash=DASHES[gi % len(DASHES)]),
                        hovertemplate=f"{s}, EP {ep}, gamma {gm}, batch %{{x}}: %{{y:.3f}} ms<extra></extra>",
                        row=ri + 1, col=ci + 1,
                    )
                    seen.add((s, gm))
    batches = sorted(agg["batch_size"].unique())
    fig.update_xaxes(type="log", tickvals=batches, ticktext=[str(b) for b in batches])
    fig.update_xaxes(title_text="batch size", row=len(runs))
    fig.update_yaxes(title_text="median step time, ms", col=1)
    fig.update_layout(height=max(420, 300 * len(runs), 24 * len(seen) + 160))  # room for the legend
    return fig
