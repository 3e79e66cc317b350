"""The recorded backend of the panel (torch- and plotly-free).

`RecordedBackend` serves recorded runs: a PanelBackend that PICKS_RUNS (the interface and the
capabilities: results.viewmodels.backend_protocol); `run.live.LiveBackend` measures on this
machine's CUDA device and returns the same PointData.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import pandas as pd

from dspark_lab.results.viewmodels import frames
from dspark_lab.results.viewmodels.backend_protocol import PICKS_RUNS, PointData
from dspark_lab.results.facts.run_kinds import KINDS
from dspark_lab.results.query.runs import MAX_COMPARED, Runs, one_process, point_label
from dspark_lab.results.facts.strategy_table import strategy_order

ALL_RUNS = "*"  # the run control's value for "every recorded run, side by side"


MAX_RUN_OPTIONS = 10  # runs listed in the run dropdown (the rest: narrow the run filter)
FILTER_KEYS = ("gpu", "driver", "cuda", "torch", "since", "until", "name")


class RecordedBackend:
    """Recorded runs: each setting maps to the nearest recorded point of each selected run
    (results.Runs.nearest); runs are named by their unique labels (Runs.labels).

    Scales with the number of runs: the run dropdown lists at most `max_options` runs of the current
    selection (all runs until `filter_runs` narrows it), ranked as Runs.ranked_run_ids (the latest
    run of each machine first), and "all selected side by side" draws the first `side_by_side` of
    them. Timelines are read only for the runs and point drawn (Runs.timeline)."""

    mode = "recorded"
    capabilities = frozenset({PICKS_RUNS})

    def __init__(self, runs: Runs, *, max_options: int = MAX_RUN_OPTIONS, side_by_side: Optional[int] = None,
                 compare: Optional[Sequence[str]] = None):
        if not isinstance(runs, Runs):
            raise TypeError(f"RecordedBackend takes a results.Runs (Runs.load(), or Runs(rows, timelines, headers)), "
                            f"got {type(runs).__name__}")
        if runs.rows.empty:
            raise ValueError("no recorded rows: record a run (dspark-lab sweep) or point DSPARK_DATA at recorded data")
        side_by_side = MAX_COMPARED if side_by_side is None else side_by_side
        for name, v in (("max_options", max_options), ("side_by_side", side_by_side)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.runs = runs
        # The panel draws one-process points; real-rank and predicted rows (one per rank and rank
        # case) are shown apart (views.figures.ranks, notebook 01), never mixed into these figures.
        self.rows = one_process(runs.rows)
        if self.rows.empty:
            raise ValueError("no one-process recorded rows to show (only real-rank or predicted runs)")
        self.headers = runs.headers
        self.max_options, self.side_by_side = max_options, side_by_side
        self.selection: list[str] = self._offered(runs.ranked_run_ids(), filtered=False)
        self.compare = self._compared(compare)
        self.filter_text = ""
        self._views: dict = {}

    @property
    def timelines(self) -> pd.DataFrame:
        """Every run's timeline segments (reads them all; get() reads only the runs it draws)."""
        return frames.flatten_timelines(self.runs.timelines)

    # -- choosing runs --------------------------------------------------------------------------
    def _offered(self, ranked: list[str], *, filtered: bool) -> list[str]:
        """Those of `ranked` with one-process rows, in the order the run dropdown lists them: the
        richest grid run first (unfiltered: the latest default sweep of the newest machine; filtered:
        the richest of the runs the filter matched, never one outside them), then grid runs, then
        the rest; newest first within each."""
        with_rows = set(self.rows["run_id"].astype(str))
        ids = [r for r in ranked if r in with_rows]
        if not ids:
            return ids
        richest = self.runs.richest_grid_run(ids if filtered or len(ids) < len(ranked) else None)
        richest = richest if richest in ids else ids[0]
        rank = {k: i for i, k in enumerate(KINDS)}
        rest = sorted((r for r in ids if r != richest), key=lambda r: (rank.get(self.runs.kind_of(r), 99), ids.index(r)))
        return [richest] + rest

    def _compared(self, compare: Optional[Sequence[str]]) -> list[str]:
        """The runs a view compares (notebook 03's chosen runs), drawn side by side while no filter
        is typed; ValueError naming a run that is not recorded or has no one-process rows."""
        if compare is None:
            return []
        with_rows = set(self.rows["run_id"].astype(str))
        bad = [r for r in map(str, compare) if r not in with_rows]
        if bad:
            raise ValueError(f"compare: run {bad[0]!r} is not a recorded run with one-process rows; "
                             f"recorded: {', '.join(sorted(with_rows)[:10])}")
        return list(dict.fromkeys(map(str, compare)))

    def side_by_side_runs(self) -> list[str]:
        """The runs "all selected, side by side" draws: the compared runs (while no filter is typed),
        else the first `side_by_side` of the selection."""
        if self.compare and not self.filter_text:
            return self.compare[:self.side_by_side]
        return self.selection[:self.side_by_side]

    def run_points(self, run: Optional[str]) -> pd.DataFrame:
        """The one-process points (EP, batch, gamma, workload) of a run, or of the runs drawn side by side."""
        ids = self.side_by_side_runs() if run in (None, ALL_RUNS) else [run]
        r = self.rows[self.rows["run_id"].astype(str).isin(ids)]
        return r.drop_duplicates(["ep_size", "batch_size", "gamma", "workload"])[["ep_size", "batch_size", "gamma", "workload"]]

    def filter_runs(self, text: str) -> str:
        """Narrow the runs offered: words separated by spaces, each `key=value` (keys: gpu, driver,
        cuda, torch, since, until, name; as Runs.select) or a bare word every listed run's label,
        machine, date or file name must contain. "" offers every run again. Returns what is offered;
        ValueError (naming the key or the word) when nothing matches."""
        text = (text or "").strip()
        kw, words = {}, []
        for tok in text.replace(",", " ").split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                if k.strip().lower() not in FILTER_KEYS:
                    raise ValueError(f"run filter key {k!r} is not known; allowed: {', '.join(FILTER_KEYS)}")
                kw[k.strip().lower()] = v.strip()
            else:
                words.append(tok.lower())
        sub = self.runs.select(**kw) if kw else self.runs
        matched = set(sub.run_ids())
        ids = self._offered([r for r in self.runs.ranked_run_ids() if r in matched], filtered=bool(kw))
        if words:
            info = self.runs.run_info().set_index("run_id")
            hay = {rid: " ".join(str(v) for v in r.values).lower() for rid, r in info.iterrows()}
            ids = [r for r in ids if all(w in hay.get(r, "") for w in words)]
            if not ids:
                raise ValueError(f"no recorded run matches the run filter {text!r} (every word must appear "
                                 "in a run's label, GPU, driver, CUDA, torch, date or file name)")
        self.selection, self.filter_text = ids, text
        return self.selection_note()

    def selection_note(self) -> str:
        n_all, n = len(self.runs.run_ids()), len(self.selection)
        listed = min(n, self.max_options)
        note = f"{n} of {n_all} run(s) selected" + (f" (filter: {self.filter_text})" if self.filter_text else "")
        if n > listed:
            note += f"; the {listed} listed first: the latest default sweep, then the other grid runs, then the rest by kind, newest first (narrow the filter for others)"
        if self.compare and not self.filter_text:
            return note + f"; side by side: the {len(self.side_by_side_runs())} runs compared"
        return note + f"; side by side: the first {min(n, self.side_by_side)}"

    def _view(self, ids: list[str]):
        key = tuple(ids)
        if key not in self._views:
            self._views = {key: self.runs.subset(ids)}  # one view kept: the latest selection
        return self._views[key]

    # -- the backend interface ------------------------------------------------------------------
    def options(self, run: Optional[str] = None) -> dict:
        """The controls' values: sliders and workloads over the points `run` holds (default: the run
        the panel opens on; ALL_RUNS: the runs drawn side by side), strategies, and the runs listed."""
        labels = self.runs.labels()
        listed = self.selection[:self.max_options]
        k = len(self.side_by_side_runs())
        pts = self.run_points(self.defaults()["run"] if run is None else run)
        if pts.empty:
            pts = self.run_points(ALL_RUNS)
        return {
            "ep_size": sorted(int(v) for v in pts["ep_size"].dropna().unique()),
            "batch_size": sorted(int(v) for v in pts["batch_size"].dropna().unique()),
            "gamma": sorted(int(v) for v in pts["gamma"].dropna().unique()),
            "strategy": strategy_order(self.rows["strategy"].dropna().unique()),
            "workload": [w for w in pts["workload"].value_counts().index],
            "run": [(f"all selected, side by side ({k} run{'s' if k != 1 else ''})", ALL_RUNS)]
                   + [(labels.get(rid, rid), rid) for rid in listed],
        }

    def defaults(self) -> dict:
        """The reference point (results.REFERENCE) in the run listed first: the richest grid run of
        the newest machine (the latest default sweep), where every slider moves over recorded points."""
        if "defaults" in self._views:
            return dict(self._views["defaults"])
        run = self.selection[0]
        try:
            pt = self.runs.reference(run_id=run)
        except ValueError:
            pt = self.rows[self.rows["run_id"] == run]
        r0 = pt.iloc[0]
        out = {"ep_size": int(r0["ep_size"]), "batch_size": int(r0["batch_size"]), "gamma": int(r0["gamma"]),
               "strategy": frames.default_strategy(self.rows["strategy"].dropna().unique()),
               "workload": r0["workload"], "run": run}
        self._views["defaults"] = out
        return dict(out)

    def describe(self) -> str:
        n = len(self.runs.labels())
        machines = self.runs.machines()
        if len(machines) <= 3:
            where = frames.fingerprint_label(self.rows) if n <= 3 else "; ".join(
                f"{m.GPU} · driver {m.driver} · torch {m.torch}" for m in machines.itertuples())
        else:
            where = f"{len(machines)} machines"
        return f"RECORDED data ({n} run(s): {where}). Each setting shows the nearest recorded point."

    def _side_by_side(self, settings: dict, wl) -> tuple[list[str], str]:
        """The runs drawn side by side at this setting: those of the first `side_by_side` selected
        that hold exactly the asked point, and a sentence on the ones left out and why."""
        pool = self.side_by_side_runs()
        asked = {k: settings.get(k) for k in ("ep_size", "batch_size", "gamma")}
        hold = self.runs.holding(pool, workload=wl, **asked)
        if len(hold) == len(pool):
            return hold, f"side by side: {len(hold)} run{'s' if len(hold) != 1 else ''}"
        left = [self.runs.label_of(r) for r in pool if r not in hold]
        what = f"EP {asked['ep_size']} · batch {asked['batch_size']} · gamma {asked['gamma']}"
        if not hold:
            return pool, (f"none of the {len(pool)} runs side by side recorded {what}; each shows its nearest point")
        return hold, (f"side by side: {len(hold)} of {len(pool)} runs; left out, without a point at {what}: "
                      + "; ".join(left))

    def close(self) -> None:
        """Nothing to release: recorded data holds no thread or process."""

    def get(self, settings: dict, on_progress: Optional[Callable] = None) -> PointData:
        wl = settings.get("workload")
        wl = wl if wl in set(self.rows["workload"]) else None
        run = settings.get("run")
        side = run in (None, ALL_RUNS)
        if side:
            ids, side_note = self._side_by_side(settings, wl)
            runs, run = self._view(ids), None
        else:
            if str(run) not in set(self.runs.run_ids()):
                raise ValueError(f"run {run!r} is not a recorded run; choose one from the run list")
            runs, side_note = self.runs, ""
            held = set(self.run_points(run)["workload"])
            if wl not in held:  # this run recorded other workloads: show its own
                wl = next(iter(self.run_points(run)["workload"]), None)
        rows = runs.nearest(ep_size=settings.get("ep_size"), batch_size=settings.get("batch_size"),
                            gamma=settings.get("gamma"), workload=wl, run_id=run, ok_only=False,
                            one_process_only=True)
        parts = [frames.flatten_timelines(self.runs.timeline(r, p))
                 for r, p in dict.fromkeys(zip(rows["run_id"].astype(str), rows["point_id"]))]
        parts = [t for t in parts if not t.empty]
        tl = pd.concat(parts, ignore_index=True) if parts else frames.flatten_timelines(None)
        if not tl.empty:  # one-process runs recorded by parallel.measure_single named them "<strategy> · rank 0"
            tl = tl.assign(strategy=tl["strategy"].astype(str).str.replace(r" · rank 0$", "", regex=True))
        r0 = rows.iloc[0]
        asked = {k: settings.get(k) for k in ("ep_size", "batch_size", "gamma")}
        got = {"ep_size": int(r0["ep_size"]), "batch_size": int(r0["batch_size"]), "gamma": int(r0["gamma"])}
        diff = [f"{k.replace('_', ' ')} {asked[k]}" for k in asked if asked[k] is not None and asked[k] != got[k]]
        note = f"recorded point: {point_label(r0)}"
        if diff:
            where = self.runs.label_of(run) if run else "the runs side by side"
            note += f" ({where} holds no point at {', '.join(diff)}; this is the nearest it holds)"
        if side_note:
            note += f"; {side_note}"
        return PointData(rows, tl, note, dict(settings))


def load_recorded(paths=None) -> RecordedBackend:
    """Recorded data from `paths`, else $DSPARK_DATA, else the repository's data/ folder."""
    return RecordedBackend(Runs.load(paths))
