"""One config point as every view shows it, derived once: `point_view(rows, timelines)`.

The figures, the panel and the report all draw a point the same way: the successful trials, the
disturbed ones left out (the rows' `disturbed` verdict), the runs named by their labels, the
machine fingerprint in words, a note naming what was left out or failed, and the timeline
segments of each run's own point. `PointView` holds those, so that no view selects or labels
trials itself (torch- and plotly-free).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from dspark_lab.results.rules import noise
from dspark_lab.results.viewmodels.frames import fingerprint_label, flatten_timelines, run_key, run_names
from dspark_lab.results.rules.labels import point_label
from dspark_lab.results.rules.selection import failed_rows, ok_rows
from dspark_lab.results.facts.strategy_table import strategy_order

FAILED_ERROR_CHARS = 120  # of each failed strategy's error, in the note


def _verdict(ok: pd.DataFrame) -> pd.Series:
    """True for a disturbed trial: the rows' `disturbed` column (results.Runs and the runner set it
    by the current rule; None/NaN = not disturbed), else the rule applied now (rows that carry no
    verdict, e.g. built by hand)."""
    if ok.empty:
        return pd.Series(False, index=ok.index, dtype=bool)
    if "disturbed" in ok.columns:
        return ok["disturbed"].map(lambda v: isinstance(v, (bool, np.bool_)) and bool(v)).astype(bool)
    return noise.disturbed_flags(ok).astype(bool)


def judged_trials(rows: pd.DataFrame) -> pd.DataFrame:
    """The successful trials with `run_id` as text and `disturbed` as a bool verdict."""
    ok = ok_rows(rows)
    return ok.assign(run_id=run_key(ok), disturbed=_verdict(ok))


def kept_trials(rows: pd.DataFrame) -> pd.DataFrame:
    """What every figure aggregates: the successful trials not marked disturbed (as Runs counts)."""
    ok = judged_trials(rows)
    return ok[~ok["disturbed"]]


def trials_note(rows: pd.DataFrame) -> str:
    """"3 disturbed trials left out; failed: non_blocking: CUDA error ..." ("" when nothing was)."""
    ok = judged_trials(rows)
    left_out = int(ok["disturbed"].sum())
    notes = [f"{left_out} disturbed trials left out"] if left_out else []
    bad = failed_rows(rows)
    if not bad.empty:
        first = bad.drop_duplicates("strategy")
        notes.append("failed: " + "; ".join(f"{r.strategy}: {str(r.error)[:FAILED_ERROR_CHARS]}"
                                            for r in first.itertuples()))
    return "; ".join(notes)


@dataclass(frozen=True, eq=False)
class PointView:
    """One config point of one or several runs, ready to draw (build it with `point_view`).

    rows      every row given (successful and failed trials)
    ok        the successful trials, disturbed ones included, `run_id` as text, `disturbed` a bool
    kept      `ok` without the disturbed trials: what medians and bars are made of
    failed    the failed rows
    note      what was left out or failed, in words ("" when nothing was)
    labels    run_id -> the name drawn for the run (frames.run_names)
    run_ids   the runs, in first-seen order
    fingerprint  GPU, driver, torch and date of the rows, in words
    point     "EP 2 · batch 8 · gamma 4 · sglang_profile" ("" when no trial succeeded)
    segments  timeline segments of each run's own point (one row per segment)
    """

    rows: pd.DataFrame
    ok: pd.DataFrame
    kept: pd.DataFrame
    failed: pd.DataFrame
    note: str
    labels: dict
    run_ids: tuple
    fingerprint: str
    point: str
    segments: pd.DataFrame

    @property
    def left_out(self) -> int:
        """Disturbed trials left out of `kept`."""
        return int(self.ok["disturbed"].sum())

    @property
    def several_runs(self) -> bool:
        return len(self.run_ids) > 1

    def per_strategy(self, columns: Sequence[str]) -> pd.DataFrame:
        """One row per (run, strategy) with the median over kept trials of `columns`, runs in
        first-seen order and strategies in strategy order. A column a run lacks (recorded before it
        existed) or a null value becomes NaN, never a crash."""
        df = self.kept
        if df.empty:
            return pd.DataFrame(columns=["run_id", "strategy", *columns])
        df = df.assign(**{c: pd.to_numeric(df[c], errors="coerce") if c in df.columns else np.nan for c in columns})
        agg = df.groupby(["run_id", "strategy"], sort=False)[list(columns)].median().reset_index()
        order = {s: i for i, s in enumerate(strategy_order(agg["strategy"]))}
        runs = {r: i for i, r in enumerate(dict.fromkeys(df["run_id"]))}
        agg["_o"] = agg["strategy"].map(order) + 1000 * agg["run_id"].map(runs)
        return agg.sort_values("_o").drop(columns="_o").reset_index(drop=True)


def check_one_point(rows: pd.DataFrame, what: str) -> None:
    """ValueError unless the successful rows hold at most one config point per run."""
    ok = ok_rows(rows)
    if ok.empty:
        return
    per_run = ok.groupby(run_key(ok))["point_id"].nunique()
    if (per_run > 1).any():
        raise ValueError(
            f"{what} shows one config point per run, but the rows hold {int(per_run.max())} points of one run; "
            "pick one with results.Runs(...).nearest(ep_size=..., batch_size=..., gamma=..., workload=...)"
        )


def _segments_of(rows: pd.DataFrame, segments: pd.DataFrame) -> pd.DataFrame:
    """The segments of the (run, point) pairs the rows hold: each run's own point. Segments without
    a run id (a live measurement's) are matched on the point alone."""
    if rows.empty or segments.empty or "point_id" not in rows.columns or "point_id" not in segments.columns:
        return segments
    if "run_id" in segments.columns:
        pairs = set(zip(run_key(rows), rows["point_id"]))
        keep = [(str(r), p) in pairs for r, p in zip(segments["run_id"], segments["point_id"])]
    else:
        keep = segments["point_id"].isin(set(rows["point_id"])).tolist()
    return segments[keep]


def point_view(rows: Optional[pd.DataFrame], timelines=None, *, what: str = "this view") -> PointView:
    """The PointView of `rows` (one config point per run; ValueError naming `what` otherwise) and
    their timelines (records, or a frame of segments; None for none)."""
    rows = rows if rows is not None else pd.DataFrame()
    check_one_point(rows, what)
    ok = judged_trials(rows)
    segments = _segments_of(rows, flatten_timelines(timelines))
    return PointView(
        rows=rows, ok=ok, kept=ok[~ok["disturbed"]], failed=failed_rows(rows), note=trials_note(rows),
        labels=run_names(rows), run_ids=tuple(dict.fromkeys(run_key(rows))),
        fingerprint=fingerprint_label(rows), point=point_label(ok.iloc[0]) if not ok.empty else "",
        segments=segments,
    )


def timeline_view(timelines, rows: Optional[pd.DataFrame] = None, point_id: Optional[str] = None) -> PointView:
    """The PointView of one point's timelines: `point_id`, or the only point the timelines hold
    (ValueError when they hold several); `rows` (any points) give the fingerprint and labels."""
    tl = flatten_timelines(timelines)
    if point_id is None and not tl.empty:
        pids = tl["point_id"].unique()
        if len(pids) > 1:
            raise ValueError(f"the timelines hold {len(pids)} config points; pass point_id=")
        point_id = pids[0]
    if point_id is not None and not tl.empty:
        tl = tl[tl["point_id"] == point_id]
    if rows is not None and point_id is not None and "point_id" in rows.columns:
        rows = rows[rows["point_id"] == point_id]
    return point_view(rows, tl, what="timeline")
