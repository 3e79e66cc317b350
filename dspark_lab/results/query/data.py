"""`RunData`: recorded runs loaded once, with what every question asks of them: rows judged once
(results.rules.noise), headers, run labels, run kinds, the run-level verdicts, timelines read lazily.

The data object of the query layer, as HolisticTraceAnalysis's parsed `Trace`: the headline, the
analyses and the view models take a RunData; the `Runs` facade (query/runs.py) is a RunData with the
questions built on them (loading, the headline, the default selection, summaries) as methods.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import pandas as pd

from dspark_lab.results.facts import run_kinds
from dspark_lab.results.loading.load import TimelineSource
from dspark_lab.results.query import catalog, kinds
from dspark_lab.results.query.catalog import MAX_COMPARED
from dspark_lab.results.record.schema import MACHINE_KEYS
from dspark_lab.results.rules import noise, run_filters, selection
from dspark_lab.results.rules.labels import run_labels
from dspark_lab.results.rules.selection import ok_rows, one_process


class RunData:
    """Loaded runs: rows (one per point x strategy x trial, with a `run_label` column and the
    disturbed verdict), timelines, headers, labels, kinds, and the problems met while loading
    (`warnings`); and the questions every analysis asks of them."""

    def __init__(self, rows: pd.DataFrame, timelines=None,
                 headers: Optional[Sequence[dict]] = None, warnings: Iterable[str] = (), *,
                 labels: Optional[dict] = None, run_kinds: Optional[kinds.RunKinds] = None):
        """`timelines`: a DataFrame of segments, or a load.TimelineSource that reads them when asked.
        `labels`, `run_kinds`: run labels and kinds to keep (a selection keeps those of the runs it
        was chosen from: a run's kind does not change with the rows chosen of it).
        Rows the loader (or a Runs) judged keep their verdict; others are judged here, once."""
        self.headers = list(headers or [])
        rows = noise.judged(rows.reset_index(drop=True))
        if "run_id" not in rows.columns:
            rows = rows.assign(run_id="")
        self._run_kinds = run_kinds if run_kinds is not None else kinds.describe_runs(self.headers, rows)
        self._kind_names = self._run_kinds.names()
        self._labels = dict(labels) if labels is not None else run_labels(
            self.headers, rows, self._kind_names, self._run_kinds.part)
        self.rows = rows.assign(run_label=rows["run_id"].astype(str).map(self._labels))
        self._source = timelines if isinstance(timelines, TimelineSource) else None
        self._timelines = None if self._source is not None else (
            timelines if timelines is not None else pd.DataFrame()).reset_index(drop=True)
        self.warnings = list(warnings)
        self._memo: dict = {}

    def _memoized(self, name: str, make):
        """`make()` once per rows and headers (recomputed if either is replaced)."""
        key = (id(self.rows), len(self.rows), len(self.headers))
        if self._memo.get(name, (None,))[0] != key:
            self._memo[name] = (key, make())
        return self._memo[name][1]

    # -- timelines (read only when asked for) ---------------------------------------------------
    @property
    def timelines(self) -> pd.DataFrame:
        """Every run's timeline segments; reading them all is the slow path: prefer `timeline()`."""
        if self._timelines is None:
            self._timelines = self._source.all(self.run_ids())
        return self._timelines

    @timelines.setter
    def timelines(self, value: pd.DataFrame) -> None:
        self._source, self._timelines = None, value

    def timeline(self, run_id: str, point_id: Optional[str] = None) -> pd.DataFrame:
        """One run's timeline segments (one point's when `point_id` is given), read only for it."""
        if self._timelines is None:
            return self._source.get(str(run_id), point_id)
        tl = self._timelines
        if tl.empty:
            return tl
        keep = pd.Series(True, index=tl.index)
        if "run_id" in tl.columns:
            keep &= tl["run_id"].astype(str) == str(run_id)
        if point_id is not None and "point_id" in tl.columns:
            keep &= tl["point_id"] == point_id
        return tl[keep]

    # -- runs (results.query.catalog) ------------------------------------------------------------------
    def labels(self) -> dict:
        """run_id -> short unique label, oldest run first."""
        return {rid: self._labels[rid] for rid in self.run_ids()}

    def label_of(self, run_id: str) -> str:
        """The run's label (its id when it has none)."""
        return self._labels.get(str(run_id), run_id)

    def kind_of(self, run_id: str) -> str:
        """The run's kind key (results.facts.run_kinds): "default_sweep", "reference", "ep_real", ..."""
        return self._run_kinds.kind.get(str(run_id), "single_point")

    def kind_name(self, run_id: str) -> str:
        """The run's kind as views say it ("default sweep")."""
        return run_kinds.KINDS[self.kind_of(run_id)]

    def part_of(self, run_id: str) -> str:
        """What an EP recording's file holds ("a2a_fixed", "prediction"); "" for other runs."""
        return self._run_kinds.part.get(str(run_id), "")

    def recording_of(self, run_id: str) -> str:
        """The EP recording this run is a part of (its first file's run id); the run itself otherwise."""
        return self._run_kinds.recording.get(str(run_id), str(run_id))

    def runs_of_kind(self, *kind: str, newest_first: bool = True) -> list[str]:
        """Runs of these kinds (results.facts.run_kinds keys), the most recently started first."""
        for k in kind:
            run_kinds.check_kind(k)
        ids = [r for r in self.run_ids() if self.kind_of(r) in kind]
        return self.newest_started(ids) if newest_first else ids

    def grid_size(self, run_id: str) -> int:
        """How many one-process points (EP x batch x gamma x workload) the run holds (successful rows)."""
        return int(self._memoized("grid_sizes", self._grid_sizes).get(str(run_id), 0))

    def _grid_sizes(self) -> dict:
        """run_id -> grid_size, for every run at once (views ask it of every run listed)."""
        ok = one_process(self.ok)
        if ok.empty:
            return {}
        pts = ok.assign(run_id=ok["run_id"].astype(str)).drop_duplicates(
            ["run_id", "ep_size", "batch_size", "gamma", "workload"])
        return pts.groupby("run_id").size().to_dict()

    def richest_grid_run(self, run_ids: Optional[Iterable[str]] = None) -> Optional[str]:
        """The run a view that moves over EP, batch and gamma should open on: of the newest
        machine's runs (or of `run_ids`), the latest default sweep, else the grid run with the most
        points, else the run with the most points; None when there are no runs."""
        ids = list(run_ids) if run_ids is not None else self.ranked_run_ids()
        if not ids:
            return None
        if run_ids is None:  # the newest machine's runs
            info = self.run_info().set_index("run_id")
            m = tuple(info.loc[ids[0], list(MACHINE_KEYS)])
            ids = [r for r in ids if tuple(info.loc[r, list(MACHINE_KEYS)]) == m]
        newest = self.newest_started(ids)
        for kind in run_kinds.GRID_KINDS[:1]:
            hit = [r for r in newest if self.kind_of(r) == kind and self.grid_size(r) > 1]
            if hit:
                return hit[0]
        return max(newest, key=lambda r: (self.kind_of(r) in run_kinds.GRID_KINDS, self.grid_size(r)))

    def grid_runs(self, limit: int = MAX_COMPARED) -> list[str]:
        """Runs to draw as sweeps (a line over batch size needs ≥ 2 points): grid kinds first, the
        newest machine's first, newest first; at most `limit`."""
        ranked = self.ranked_run_ids()
        grid = [r for r in ranked if self.grid_size(r) > 1 and self.kind_of(r) not in run_kinds.EP_KINDS]
        order = {k: i for i, k in enumerate(run_kinds.GRID_KINDS)}
        return sorted(grid, key=lambda r: (order.get(self.kind_of(r), len(order)), ranked.index(r)))[:limit]

    def holding(self, run_ids: Iterable[str], *, ep_size=None, batch_size=None, gamma=None,
                workload=None) -> list[str]:
        """Those of `run_ids` that recorded exactly this point (one-process, successful rows)."""
        ok = one_process(self.ok)
        for col, want in (("ep_size", ep_size), ("batch_size", batch_size), ("gamma", gamma), ("workload", workload)):
            if want is not None:
                ok = ok[ok[col] == want]
        have = set(ok["run_id"].astype(str))
        return [str(r) for r in run_ids if str(r) in have]

    def run_ids(self) -> list[str]:
        return list(self._memoized("run_ids", lambda: catalog.run_order(self.headers, self.rows)))

    def newest_started(self, run_ids: Iterable[str]) -> list[str]:
        """These runs, the most recently started first."""
        return catalog.newest_started(self.headers, run_ids)

    def table(self) -> pd.DataFrame:
        """One row per run: label, machine, when, points (failed too), model / workload, sweep."""
        return catalog.run_table(self.rows, self.headers, self._labels, self.run_ids(), self.run_disturbance(),
                                 self._kind_names)

    def run_info(self) -> pd.DataFrame:
        """One row per run (oldest first): run_id, label, name, file (its stem), gpu, driver, cuda, torch, created."""
        return self._memoized("run_info", lambda: catalog.run_info(
            self.rows, self.headers, self._labels, self.run_ids(),
            self._kind_names, self._run_kinds.part)).copy()

    def ranked_run_ids(self) -> list[str]:
        """Runs in the order views offer them: the latest run of each machine (GPU, driver, CUDA,
        torch), newest machine first; then every other run, newest first."""
        return catalog.ranked_run_ids(self.run_info())

    def select(self, *, gpu: Optional[str] = None, driver: Optional[str] = None, cuda: Optional[str] = None,
               torch: Optional[str] = None, since=None, until=None, name: Optional[str] = None,
               run_id=None, latest_per_machine: bool = False, limit: Optional[int] = None) -> "RunData":
        """The runs matching every filter given, as a Runs (labels kept; timelines still read lazily).

        gpu, name: case-insensitive substring (of the GPU; of the run's label, recorded name or file name);
        driver, cuda, torch: a version or its prefix ("2.11" matches "2.11.0+cu130");
        since, until: dates ("2026-11-30", "2026-11", a datetime), both days included;
        run_id: one id or a list; latest_per_machine: keep each machine's most recent run;
        limit: keep the first `limit` runs in ranked_run_ids order.
        A filter no run matches raises ValueError naming it and the recorded values."""
        return self.subset(run_filters.choose(
            self.run_info(), self.ranked_run_ids(), gpu=gpu, driver=driver, cuda=cuda, torch=torch, since=since,
            until=until, name=name, run_id=run_id, latest_per_machine=latest_per_machine, limit=limit))

    def subset(self, run_ids: Iterable[str]) -> "RunData":
        """These runs only, of the same type with the same labels and verdicts; timelines read lazily."""
        ids = [str(r) for r in run_ids]
        known = set(self.run_ids())
        unknown = [r for r in ids if r not in known]
        if unknown:
            raise ValueError(f"run_id {unknown[0]!r} is not a recorded run; recorded: {', '.join(self.run_ids()[:20])}")
        return self.with_rows(self.rows[self.rows["run_id"].astype(str).isin(ids)], ids)

    def with_rows(self, rows: pd.DataFrame, run_ids: Optional[Iterable[str]] = None) -> "RunData":
        """A Runs of these rows (taken from this one's: verdicts and labels kept) and of the runs
        `run_ids` (default: all of this one's), with their headers; timelines still read lazily."""
        if run_ids is None:
            return type(self)(rows, self._source if self._source is not None else self._timelines, self.headers,
                        self.warnings, labels=self._labels, run_kinds=self._run_kinds)
        ids = [str(r) for r in run_ids]
        wanted = set(ids)
        headers = [h for h in self.headers if str(h.get("run_id")) in wanted]
        tl = self._source.subset(ids) if self._source is not None else (
            self._timelines[self._timelines["run_id"].astype(str).isin(ids)]
            if "run_id" in self._timelines.columns else self._timelines)
        return type(self)(rows, tl, headers, self.warnings, labels=self._labels, run_kinds=self._run_kinds)

    def machines(self) -> pd.DataFrame:
        """One row per machine (GPU, driver, CUDA, torch): how many runs, first and last, the latest run."""
        return catalog.machines(self.run_info())

    # -- selecting (results.rules.selection) -----------------------------------------------------------
    @property
    def ok(self) -> pd.DataFrame:
        """The successful rows (formed once per rows: each view asks for them)."""
        return self._memoized("ok", lambda: ok_rows(self.rows)).copy(deep=False)

    def point(self, point_id: str, run_id: Optional[str] = None) -> pd.DataFrame:
        rows = self.rows[self.rows["point_id"] == point_id]
        if run_id is not None:
            rows = rows[rows["run_id"] == run_id]
        if rows.empty:
            raise ValueError(f"point_id {point_id!r} is not in the recorded rows" + (f" of run {run_id!r}" if run_id else ""))
        return rows

    def nearest(self, *, ep_size=None, batch_size=None, gamma=None, workload=None, model=None,
                run_id=None, ok_only: bool = True, one_process_only: bool = False) -> pd.DataFrame:
        """The rows of the recorded point nearest to the asked settings, per run (selection.nearest)."""
        df = self.ok if ok_only else self.rows
        return selection.nearest(one_process(df) if one_process_only else df, ep_size=ep_size,
                                 batch_size=batch_size, gamma=gamma, workload=workload, model=model, run_id=run_id)

    def reference(self, run_id: Optional[str] = None, ep_size: Optional[int] = None) -> pd.DataFrame:
        """The reference point (REFERENCE) in every run holding it, or in one run. `ep_size=1`
        gives its EP-1 twin. Falls back to the nearest recorded point when it was not recorded."""
        return selection.reference(self.ok, run_id, ep_size)

    def featured_points(self) -> list[tuple[str, str]]:
        """(run_id, point_id) pairs to present: the reference point and its EP-1 twin, per run."""
        return selection.featured_points(self.reference)

    def run_disturbance(self) -> pd.DataFrame:
        """Per (run, point) of the one-process rows: the run-level verdict (results.rules.noise.RUN_RULE),
        from the rows' trial verdicts and the baselines in the runs' headers; formed once per Runs."""
        baselines = {str(h.get("run_id")): h.get(noise.BASELINE_HEADER) for h in self.headers
                     if isinstance(h.get(noise.BASELINE_HEADER), dict)}
        return self._memoized("run_disturbance",
                              lambda: noise.run_disturbance(one_process(self.ok), baselines)).copy()
