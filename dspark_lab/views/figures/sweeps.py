"""The sweep figure: median step time over batch size x gamma, one column per EP size, one row per
run (many points; the per-point figures are in point.py). Named `sweeps` so that the facade's
`figures.sweep` stays the function."""
from __future__ import annotations

from typing import Optional

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dspark_lab.results.viewmodels.frames import fingerprint_label, run_key, run_names
from dspark_lab.results.viewmodels.point_view import kept_trials, trials_note
from dspark_lab.results.rules.selection import REFERENCE
from dspark_lab.results.facts.strategy_table import strategy_order
from dspark_lab.views.figures.layout import add_note, titled
from dspark_lab.views.figures.style import DASHES, STRATEGY_COLORS

MAX_SWEEP_RUNS = 4  # rows of sweep subplots at most; the other runs are named in a note


def sweep(rows: pd.DataFrame, workload: Optional[str] = None, model: Optional[str] = None,
          max_runs: int = MAX_SWEEP_RUNS, gamma: Optional[int] = None) -> go.Figure:
    """Median step time (over trials) against batch size, one line per strategy (at most five per
    facet), one facet per (run, EP size), at one gamma (`gamma`, else the reference point's when
    recorded, else the most recorded). Shows one workload and model (the most recorded if not given).
    Only runs with a line to draw (≥ 2 batch sizes) are faceted; a one-point run is named in the note
    (its numbers are a table row). At most `max_runs` runs are drawn, the most recently recorded."""
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise ValueError(f"max_runs must be a positive integer, got {max_runs!r}")
    df, extra = _one_workload_and_model(kept_trials(rows), workload, model)
    labels = run_names(df)
    df, gamma_note = _one_gamma(df, gamma)
    extra += [gamma_note] if gamma_note else []
    df, flat = _runs_with_lines(df)
    df, left_out = _newest_runs(df, max_runs)
    agg = (df.groupby(["run_id", "ep_size", "batch_size", "gamma", "strategy"], sort=False)["step_ms"]
           .median().reset_index())
    runs = list(dict.fromkeys(agg["run_id"])) or [""]
    fig = _grid(agg, runs, labels)
    note = trials_note(rows)
    if left_out:
        note = (note + "; " if note else "") + (f"{len(left_out)} more run(s) not drawn (the {len(runs)} most recent "
                                                 "are; choose runs with results.Runs.select)")
    if flat:
        note = (note + "; " if note else "") + (f"{len(flat)} run(s) with one batch size per EP not drawn "
                                                 "(no line to show; see the run table)")
    add_note(fig, note)
    shown = rows[run_key(rows).isin(set(runs))] if left_out else rows
    return titled(fig, "Sweep: median step time over batch size, one line per strategy", fingerprint_label(shown), ", ".join(extra))


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


def _one_gamma(df: pd.DataFrame, gamma: Optional[int]):
    """The trials at one gamma, and the words that say which of the recorded ones."""
    if df.empty or "gamma" not in df.columns:
        return df, ""
    have = sorted(int(g) for g in df["gamma"].dropna().unique())
    if gamma is None:
        gamma = REFERENCE.gamma if REFERENCE.gamma in have else int(df["gamma"].value_counts().index[0])
    elif gamma not in have:
        raise ValueError(f"gamma {gamma!r} is not recorded in these rows; recorded: {', '.join(map(str, have))}")
    out = df[df["gamma"] == gamma]
    return out, f"gamma {gamma}" + (f" (of {', '.join(map(str, have))})" if len(have) > 1 else "")


def _runs_with_lines(df: pd.DataFrame):
    """The trials of runs holding ≥ 2 batch sizes at some EP size, and the run ids without."""
    if df.empty:
        return df, []
    n = df.groupby(["run_id", "ep_size"])["batch_size"].nunique().groupby(level=0).max()
    keep = set(n[n >= 2].index)
    return df[df["run_id"].isin(keep)], [r for r in dict.fromkeys(df["run_id"]) if r not in keep]


def _newest_runs(df: pd.DataFrame, max_runs: int):
    """The trials of the `max_runs` most recently recorded runs, and the run ids left out."""
    all_runs = list(dict.fromkeys(df["run_id"]))
    if len(all_runs) <= max_runs:
        return df, []
    when = df.groupby("run_id", sort=False)["recorded_at"].max().astype(str) if "recorded_at" in df else {}
    newest = sorted(all_runs, key=lambda r: (str(when.get(r, "")), r), reverse=True)[:max_runs]
    return df[df["run_id"].isin(newest)], [r for r in all_runs if r not in set(newest)]


def _grid(agg: pd.DataFrame, runs: list, labels: dict) -> go.Figure:
    """One subplot per (run, EP size), titled with both (no rotated row titles), one line per strategy."""
    eps = sorted(agg["ep_size"].unique()) or [1]
    many = len(runs) > 1
    titles = [(f"{labels.get(r, r)} · EP {e}" if many else f"EP {e}") for r in runs for e in eps]
    fig = make_subplots(rows=len(runs), cols=len(eps), shared_yaxes=True, shared_xaxes=True,
                        subplot_titles=titles, horizontal_spacing=0.05,
                        vertical_spacing=min(0.12, 0.6 / max(1, len(runs) - 1)))
    seen = set()
    for ri, rid in enumerate(runs):
        for ci, ep in enumerate(eps):
            sub = agg[(agg["run_id"] == rid) & (agg["ep_size"] == ep)]
            for s in strategy_order(sub["strategy"]):
                line = sub[sub["strategy"] == s].sort_values("batch_size")
                if line.empty:
                    continue
                fig.add_scatter(
                    x=line["batch_size"].tolist(), y=line["step_ms"].tolist(), mode="lines+markers",
                    name=s, legendgroup=s, showlegend=s not in seen,
                    line=dict(color=STRATEGY_COLORS.get(s, "#7f7f7f"), dash=DASHES[0]),
                    hovertemplate=f"{s}, EP {ep}, batch %{{x}}: %{{y:.2f}} ms<extra></extra>",
                    row=ri + 1, col=ci + 1,
                )
                seen.add(s)
    for ann in fig.layout.annotations:  # the facet titles: small, left of centre, never rotated
        ann.update(font=dict(size=12))
    batches = sorted(agg["batch_size"].unique())
    fig.update_xaxes(type="log", tickvals=batches, ticktext=[str(b) for b in batches], tickangle=0)
    fig.update_xaxes(title_text="batch size", row=len(runs))
    fig.update_yaxes(title_text="median step time, ms", col=1)
    fig.update_layout(height=max(420, 300 * len(runs), 24 * len(seen) + 160))  # room for the legend
    return fig
