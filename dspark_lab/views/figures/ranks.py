"""Figures of real EP runs, one bar pair per rank (rows with schema.RANK_COLUMNS):
`from dspark_lab.views.figures import ranks`.

  per_rank_breakdown(rows)  each rank's step: host parts and GPU parts, with the time inside the
                            MoE's collectives as its own GPU part (waiting for peers is not "busy")
  who_waits(rows)           how much host wait / collective time each rank got from the others
  one_rank_share(rows)      table: what only rank 0's sync costs, as a share of all ranks' penalty
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dspark_lab.results.facts.strategy_table import BASELINE, SYNC_FREE
from dspark_lab.results.record import schema
from dspark_lab.results.viewmodels.frames import fingerprint_label
from dspark_lab.results.query.runs import ok_rows, point_label
from dspark_lab.results.analyses.profile_checks import describe, overrun_profiles
from dspark_lab.views.figures.layout import add_note, titled
from dspark_lab.views.figures.style import PART_COLORS, PART_NAMES

COLLECTIVE_NAME = "GPU: inside collectives (waiting for peers + transfer)"
COLLECTIVE_NAME_CPU = "collectives (gloo: host wall time)"
COLLECTIVE_COLOR = "#8c6d31"
GPU_PARTS = ("gpu_busy_ms", "gpu_collective_ms", "gpu_idle_after_sync_ms", "gpu_idle_other_ms")


def _real(rows: pd.DataFrame, dispatch: Optional[str]) -> pd.DataFrame:
    r = ok_rows(rows)
    if "ep_mode" not in r.columns or "rank" not in r.columns:
        raise ValueError("rows must carry schema.RANK_COLUMNS (rows of a real EP run: parallel.measure)")
    r = r[r["ep_mode"] == "real"]
    if dispatch is not None:
        r = r[r["dispatch"] == dispatch]
    if r.empty:
        raise ValueError(f"no rows with ep_mode 'real'{f' and dispatch {dispatch!r}' if dispatch else ''}")
    if r["dispatch"].nunique() > 1:
        raise ValueError(f"rows hold several dispatch modes ({', '.join(sorted(r['dispatch'].unique()))}): pick one with dispatch=")
    return r


def per_rank(rows: pd.DataFrame, dispatch: Optional[str] = None, cases: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Means over trials per case x rank of the breakdown columns and step times."""
    r = _real(rows, dispatch)
    cols = [c for c in list(schema.HOST_PARTS) + ["gpu_busy_ms", "gpu_idle_ms", "gpu_idle_after_sync_ms",
                                                   "gpu_collective_ms", "step_ms", "step_ms_max_rank",
                                                   "blocked_from_others_ms", "collective_from_others_ms"] if c in r.columns]
    agg = r.groupby(["rank_case", "rank"], sort=False)[cols].mean(numeric_only=True).reset_index()
    order = list(cases) if cases is not None else list(dict.fromkeys(r["rank_case"]))
    agg = agg[agg["rank_case"].isin(order)]
    agg["_o"] = agg["rank_case"].map({c: i for i, c in enumerate(order)})
    agg = agg.sort_values(["_o", "rank"]).drop(columns="_o").reset_index(drop=True)
    strategies = r.drop_duplicates(["rank_case", "rank"]).set_index(["rank_case", "rank"])["strategy"]
    agg["strategy"] = [strategies.get((c, k)) for c, k in zip(agg["rank_case"], agg["rank"])]
    return agg


def case_label(case: str) -> str:
    """'device_direct,non_blocking' -> 'r0 device_direct<br>r1 non_blocking'; every rank alike ->
    'all device_direct'; a host delay 'delay=1,0' -> '+1 ms on r0'."""
    strategies, _, delay = str(case).partition(" delay=")
    per = strategies.split(",")
    head = f"all {per[0]}" if len(set(per)) == 1 else "<br>".join(f"r{i} {s}" for i, s in enumerate(per))
    if delay:
        ms = [d for d in delay.split(",")]
        head += "<br>" + ", ".join(f"+{d} ms on r{i}" for i, d in enumerate(ms) if d not in ("0", "0.0"))
    return head


def _x(agg: pd.DataFrame, flagged: set) -> list:
    """Two-level categories: the case (readable, horizontal), the rank (⚠ where its profile overran)."""
    return [[case_label(c) for c in agg["rank_case"]],
            [f"r{int(k)}{' ⚠' if (c, k) in flagged else ''}" for c, k in zip(agg["rank_case"], agg["rank"])]]


def per_rank_breakdown(rows: pd.DataFrame, dispatch: Optional[str] = None, cases: Optional[Sequence[str]] = None) -> go.Figure:
    agg = per_rank(rows, dispatch, cases)
    r = _real(rows, dispatch)
    cpu = (r["device"] == "cpu").all()
    agg["gpu_idle_after_sync_ms"] = np.minimum(agg["gpu_idle_after_sync_ms"], agg["gpu_idle_ms"])
    agg["gpu_idle_other_ms"] = agg["gpu_idle_ms"] - agg["gpu_idle_after_sync_ms"]
    over = overrun_profiles(r[r["rank_case"].isin(set(agg["rank_case"]))])
    flagged = set(zip(over["rank_case"], over["rank"])) if "rank_case" in over.columns else set()
    x = _x(agg, flagged)
    fig = go.Figure()
    names = dict(PART_NAMES, gpu_collective_ms=COLLECTIVE_NAME_CPU if cpu else COLLECTIVE_NAME)
    colors = dict(PART_COLORS, gpu_collective_ms=COLLECTIVE_COLOR)
    for group, parts in (("host", schema.HOST_PARTS), ("gpu", GPU_PARTS)):
        base = np.zeros(len(agg))
        for col in parts:
            vals = agg[col].fillna(0).to_numpy(dtype=float)
            fig.add_bar(x=x, y=vals.tolist(), base=base.tolist(), name=names[col], offsetgroup=group, legendgroup=group,
                        marker=dict(color=colors[col], pattern_shape="x" if col == "gpu_idle_after_sync_ms" else ""),
                        hovertemplate=f"{names[col]}: %{{y:.3f}} ms<extra>{group}</extra>")
            base = base + vals
    fig.add_scatter(x=x, y=agg["step_ms"].tolist(), mode="markers", name="this rank's step (median of trials)",
                    marker=dict(symbol="diamond", size=10, color="black"), hovertemplate="step_ms: %{y:.3f}<extra></extra>")
    fig.add_scatter(x=x, y=agg["step_ms_max_rank"].tolist(), mode="markers", name="step, max over ranks",
                    marker=dict(symbol="line-ew-open", size=40, color="#d62728", line=dict(width=3, color="#d62728")),
                    hovertemplate="max over ranks: %{y:.3f}<extra></extra>")
    fig.update_layout(barmode="group", bargap=0.25, bargroupgap=0.05,
                      yaxis_title="ms per step (left bar: host thread, right bar: GPU stream)")
    notes = [describe(over)] + (["CPU ranks (gloo): the collective part is the collectives' host wall time, "
                                 "also inside the host bar"] if cpu else [])
    if any(notes):
        add_note(fig, "; ".join(n for n in notes if n))
    fig.update_xaxes(tickangle=0)
    first = r.iloc[0]
    extra = f"{point_label(first)} · {int(first['world_size'])} ranks · dispatch {first['dispatch']}"
    return titled(fig, "One rank's sync costs every rank: each rank's step, host vs GPU", fingerprint_label(r), extra)


def who_waits(rows: pd.DataFrame, dispatch: Optional[str] = None, cases: Optional[Sequence[str]] = None) -> go.Figure:
    """Per case x rank: host wait and collective time added by the other ranks (against the case in
    which every rank runs as this one does; cases without that baseline are left out)."""
    agg = per_rank(rows, dispatch, cases).dropna(subset=["blocked_from_others_ms", "collective_from_others_ms"], how="all")
    r = _real(rows, dispatch)
    # Cases in which no rank waits for another (every value under 0.05 ms) say nothing here: left out.
    waits = agg[["blocked_from_others_ms", "collective_from_others_ms"]].abs().max(axis=1).fillna(0)
    keep = set(agg.loc[waits >= 0.05, "rank_case"])
    left = [c for c in dict.fromkeys(agg["rank_case"]) if c not in keep]
    agg = agg[agg["rank_case"].isin(keep)].reset_index(drop=True)
    x = _x(agg, set())
    fig = go.Figure()
    fig.add_bar(x=x, y=agg["blocked_from_others_ms"].tolist(), name="host wait (blocked + readback) from others",
                marker_color=PART_COLORS["host_blocked_ms"])
    fig.add_bar(x=x, y=agg["collective_from_others_ms"].tolist(), name="collective time from others",
                marker_color=COLLECTIVE_COLOR)
    fig.update_layout(barmode="group", yaxis_title="ms per step, beyond all ranks alike")
    fig.update_xaxes(tickangle=0)
    if left:
        add_note(fig, f"{len(left)} case(s) where no rank waits for another (< 0.05 ms) not drawn")
    first = r.iloc[0]
    return titled(fig, "Who waits for whom", fingerprint_label(r), f"{point_label(first)} · dispatch {first['dispatch']}")


def one_rank_share(rows: pd.DataFrame, strategy: str = BASELINE, others: str = SYNC_FREE) -> pd.DataFrame:
    """Per dispatch mode: step (max over ranks, median of trials) with all ranks `others`, all
    `strategy`, only rank 0 `strategy`, and the share of the all-ranks penalty that rank 0 alone costs."""
    r = ok_rows(rows)
    r = r[r["ep_mode"] == "real"]
    out = []
    for (d, n), g in r.groupby(["dispatch", "world_size"]):
        n = int(n)  # loaded runs hold world_size as float (NaN in runs recorded before ranks existed)
        med = lambda case: float(g[(g["rank_case"] == case) & (g["rank"] == 0)]["step_ms_max_rank"].median())  # noqa: E731
        a, b = med(",".join([others] * n)), med(",".join([strategy] * n))
        one = med(",".join([strategy] + [others] * (n - 1)))
        out.append({"dispatch": d, "world_size": n, f"all {others}": a, f"all {strategy}": b,
                    f"only rank 0 {strategy}": one, "share_of_penalty": (one - a) / (b - a) if b != a else np.nan})
    # Milliseconds to 0.01 (trial medians vary by more), the share to 0.01.
    return pd.DataFrame(out).round({f"all {others}": 2, f"all {strategy}": 2, f"only rank 0 {strategy}": 2,
                                    "share_of_penalty": 2})
