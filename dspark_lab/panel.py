"""An ipywidgets panel over a backend: controls for EP size, batch size, gamma, strategy and
workload; plotly FigureWidgets that are updated in place (batch_update), never rebuilt.

Two backends, one interface (`options()`, `describe()`, `get(settings, on_progress)` -> PointData):
  RecordedBackend(rows, timelines)  the nearest recorded point (per run); says which GPU and date.
  LiveBackend()                     runner.measure_point on this machine's CUDA device, all strategies.
`make_panel()` picks live when CUDA is available, else recorded, and says which in the panel.
Live measurements run on a worker thread, latest request wins: dragging a slider never queues a
backlog (sliders also report only on release). A failed measurement shows its message in the panel.
"""
from __future__ import annotations

import html
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import pandas as pd
import plotly.graph_objects as go

from . import figures, schema, strategies
from .config import CAPTURE_BUCKETS, MODEL_PRESETS, WORKLOAD_PRESETS, LabConfig

CONTROLS = ("ep_size", "batch_size", "gamma", "strategy", "workload")
FIGURES = ("comparison", "syncs", "breakdown", "timeline")
BASELINE = "device_direct"
ALL_RUNS = "*"  # the run control's value for "every recorded run, side by side"
MODE_ENV = "DSPARK_LAB_MODE"  # "recorded" forces recorded mode (e.g. headless notebook runs)


@dataclass
class PointData:
    """What a backend returns for one setting: rows of every strategy (one point per run)."""

    rows: pd.DataFrame
    timelines: pd.DataFrame
    note: str = ""  # e.g. "nearest recorded point: ... (asked batch 10)"
    settings: dict = field(default_factory=dict)


def _default_strategy(present) -> str:
    """The strategy first inspected: the last fix (persistent_fill), shown against the baseline."""
    order = figures.strategy_order(present)
    return "persistent_fill" if "persistent_fill" in order else order[-1]


def _short_error(e: BaseException) -> str:
    msg = str(e).strip() or repr(e)
    return f"{type(e).__name__}: {msg.splitlines()[0] if len(msg) < 2000 else msg[:2000]}"


# -- backends -------------------------------------------------------------------------------------

class RecordedBackend:
    """Recorded runs: each setting maps to the nearest recorded point of each selected run."""

    mode = "recorded"

    def __init__(self, rows: pd.DataFrame, timelines: Optional[pd.DataFrame] = None, headers=None):
        if rows is None or len(rows) == 0:
            raise ValueError("no recorded rows: record a run (dspark-lab sweep) or point DSPARK_DATA at recorded data")
        self.rows = rows.reset_index(drop=True)
        self.timelines = figures.flatten_timelines(timelines)
        self.headers = headers or []
        self._labels = figures.run_labels(self.rows)
        # Per-point index: point selection is done on this small frame, rows are fetched by point id.
        self._by_point = {pid: g for pid, g in self.rows.groupby("point_id", sort=False)}
        if not self.timelines.empty:
            self._tl_by_point = {pid: g for pid, g in self.timelines.groupby("point_id", sort=False)}
        else:
            self._tl_by_point = {}
        cols = ["point_id", "ep_size", "batch_size", "gamma", "workload", "model"]
        pts = self.rows.assign(run_id=figures._run_key(self.rows))
        self._points = pts.drop_duplicates(["run_id", "point_id"])[cols + ["run_id"]]

    @classmethod
    def from_store(cls, paths=None) -> "RecordedBackend":
        from . import store

        rows, tl, headers = store.load_runs(paths)
        return cls(rows, tl, headers)

    def options(self) -> dict:
        r = self.rows
        runs = list(dict.fromkeys(figures._run_key(r)))
        return {
            "ep_size": sorted(int(v) for v in r["ep_size"].dropna().unique()),
            "batch_size": sorted(int(v) for v in r["batch_size"].dropna().unique()),
            "gamma": sorted(int(v) for v in r["gamma"].dropna().unique()),
            "strategy": figures.strategy_order(r["strategy"].dropna().unique()),
            "workload": [w for w in r["workload"].value_counts().index],
            "run": [("all recorded runs", ALL_RUNS)] + [(self._labels.get(x, x), x) for x in runs],
        }

    def defaults(self) -> dict:
        ok = figures.ok_rows(self.rows)
        ok = ok if not ok.empty else self.rows
        wl = "sglang_profile" if "sglang_profile" in set(ok["workload"]) else ok["workload"].value_counts().index[0]
        sub = ok[ok["workload"] == wl]
        gpu = sub[~sub["gpu"].astype(str).isin(["none", "unknown", ""])] if "gpu" in sub else sub
        sub = gpu if not gpu.empty else sub  # a GPU run first: CPU runs show only host costs
        last_run = sub.sort_values("recorded_at")["run_id"].iloc[-1] if "run_id" in sub else None
        sub = sub[sub["run_id"] == last_run] if last_run is not None else sub
        eps = sorted(sub["ep_size"].unique())
        pt = figures.select_point(sub, ep_size=eps[-1], batch_size=8, gamma=4)
        r0 = pt.iloc[0]
        return {"ep_size": int(r0["ep_size"]), "batch_size": int(r0["batch_size"]), "gamma": int(r0["gamma"]),
                "strategy": _default_strategy(self.rows["strategy"].dropna().unique()),
                "workload": wl, "run": last_run}

    def describe(self) -> str:
        return (f"RECORDED data ({self.rows['run_id'].nunique() if 'run_id' in self.rows else 1} run(s): "
                + figures.fingerprint_label(self.rows)
                + "). Each setting shows the nearest recorded point.")

    def get(self, settings: dict, on_progress: Optional[Callable] = None) -> PointData:
        pts = self._points
        wl = settings.get("workload")
        if wl is not None and wl in set(pts["workload"]):
            pts = pts[pts["workload"] == wl]
        run = settings.get("run")
        if run not in (None, ALL_RUNS):
            pts = pts[pts["run_id"] == run]
            if pts.empty:
                raise ValueError(f"run {run!r} has no recorded point for workload {wl!r}")
        pts = pts.assign(_d=figures.point_distance(pts, settings.get("ep_size"), settings.get("batch_size"),
                                                   settings.get("gamma")))
        # Per run, the nearest point; then keep the runs that hold the overall-nearest config.
        best = pts.sort_values(["_d", "ep_size", "batch_size", "gamma"], kind="stable").drop_duplicates("run_id")
        best = best[best["_d"] == best["_d"].min()]
        key = best.iloc[0][["ep_size", "batch_size", "gamma"]].tolist()
        best = best[(best[["ep_size", "batch_size", "gamma"]].values == key).all(axis=1)]
        parts = []
        for pid, rid in zip(best["point_id"], best["run_id"]):
            g = self._by_point[pid]
            parts.append(g[figures._run_key(g) == rid])
        rows = pd.concat(parts)
        tl_parts = [self._tl_by_point[pid] for pid in dict.fromkeys(best["point_id"]) if pid in self._tl_by_point]
        tl = pd.concat(tl_parts) if tl_parts else self.timelines.iloc[0:0]
        if "run_id" in tl.columns:
            tl = tl[tl["run_id"].isin(set(best["run_id"]))]
        r0 = best.iloc[0]
        asked = {k: settings.get(k) for k in ("ep_size", "batch_size", "gamma")}
        got = {"ep_size": int(r0["ep_size"]), "batch_size": int(r0["batch_size"]), "gamma": int(r0["gamma"])}
        diff = [f"{k.replace('_', ' ')} {asked[k]}" for k in asked if asked[k] is not None and asked[k] != got[k]]
        note = f"recorded point: {figures.point_label(rows.iloc[0])}"
        if diff:
            note += f" (nearest recorded; you asked {', '.join(diff)})"
        return PointData(rows, tl, note, dict(settings))


# Live measurement size: 3 interleaved trials of 8 steps per strategy and 4 profiled steps, so an
# update of all five strategies fits in about 3 s on an H200 (sglang_profile steps are 6-9 ms;
# 12 steps and 5 profiled steps took 2.9-3.7 s there).
LIVE_STEPS, LIVE_WARMUP, LIVE_TRIALS, LIVE_PROFILE_STEPS = 8, 2, 3, 4


class LiveBackend:
    """Measures on this machine's CUDA device: runner.measure_point with all strategies."""

    mode = "live"

    def __init__(self, base: Optional[LabConfig] = None, measure: Optional[Callable] = None,
                 fingerprint: Optional[dict] = None):
        # Sized for a live update of all strategies within ~3 s on an H200 (see LIVE_* below).
        self.base = base or LabConfig(steps=LIVE_STEPS, warmup=LIVE_WARMUP, trials=LIVE_TRIALS)
        if measure is None:
            from functools import partial

            from .runner import measure_point

            measure = partial(measure_point, profile_steps=LIVE_PROFILE_STEPS, keep_traces=False)
        self._measure = measure
        self._fingerprint = fingerprint
        self.run_id = "live-" + datetime.now().strftime("%Y%m%d-%H%M%S")

    @property
    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            from .measure.probe import fingerprint

            self._fingerprint = fingerprint()
        return self._fingerprint

    def options(self) -> dict:
        experts = MODEL_PRESETS[self.base.model].experts
        return {
            "ep_size": [d for d in range(1, experts + 1) if experts % d == 0],
            "batch_size": [b for b in CAPTURE_BUCKETS if b in (1, 2, 4, 8, 16, 32, 64, 128, 256)],
            "gamma": [1, 2, 3, 4, 6, 8, 12, 16],
            "strategy": list(strategies.names()),
            "workload": list(WORKLOAD_PRESETS),
        }

    def defaults(self) -> dict:
        return {"ep_size": max(self.options()["ep_size"]), "batch_size": self.base.batch_size,
                "gamma": self.base.gamma, "strategy": _default_strategy(strategies.names()),
                "workload": self.base.workload}

    def describe(self) -> str:
        fp = self.fingerprint
        return (f"LIVE on {figures.gpu_name(fp.get('gpu'))} · driver {fp.get('driver')} · torch {fp.get('torch')}: each setting is "
                f"measured now with all strategies ({self.base.trials} trials × {self.base.steps} steps).")

    def config(self, settings: dict) -> LabConfig:
        return self.base.with_(**{k: settings[k] for k in ("ep_size", "batch_size", "gamma", "workload") if k in settings})

    # EP sizes that fit the GPUs present run on real ranks (parallel.EPLive: a persistent worker
    # group, one process per GPU); larger ones stay one process with the predicate flipped.
    real_ep = True
    _ep_live = None

    def runs_real_ep(self, ep_size: int) -> bool:
        from .parallel import workers

        return self.real_ep and 1 < ep_size <= workers.device_count()

    def _measure_real_ep(self, cfg: LabConfig):
        from .parallel.run import EPLive

        if self._ep_live is None:
            self._ep_live = EPLive()
        res = self._ep_live.measure(cfg, list(strategies.names()))
        # Rank 0's rows and timelines stand for the point (the ranks run in lockstep; every row
        # also carries step_ms_max_rank); timelines are keyed by strategy as the figures expect.
        rows = [r for r in res.rows if r["rank"] == 0]
        tls = [dict(t, strategy=t["rank_case"].split(",")[0]) for t in res.timelines if t["rank"] == 0]
        return type(res)(rows, tls, res.samples, res.info)

    def get(self, settings: dict, on_progress: Optional[Callable] = None) -> PointData:
        cfg = self.config(settings)
        if self.runs_real_ep(cfg.ep_size):
            result = self._measure_real_ep(cfg)
        else:
            result = self._measure(cfg, list(strategies.names()), on_progress=on_progress)
        rows = pd.DataFrame(result.rows)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        fp = self.fingerprint
        for k in ("gpu", "driver", "cuda", "torch"):
            rows[k] = fp.get(k, "unknown")
        rows["run_id"], rows["recorded_at"] = self.run_id, now
        tl = figures.flatten_timelines(getattr(result, "timelines", None) or [])
        failed = figures.failed_rows(rows)
        if len(failed) and failed["strategy"].nunique() == rows["strategy"].nunique():
            raise RuntimeError(str(failed["error"].iloc[0]))
        return PointData(rows, tl, f"measured now: {figures.point_label(rows.iloc[0])}", dict(settings))


# -- coalescing worker ----------------------------------------------------------------------------

class LatestWins:
    """Runs `work(request)` on one worker thread; a request submitted while another waits replaces
    it, so only the latest is ever run next (no backlog). `done(request, result, error)` is called
    after each run, with `stale=True` when a newer request is already waiting."""

    def __init__(self, work: Callable, done: Callable, debounce_s: float = 0.3):
        self._work, self._done, self.debounce_s = work, done, debounce_s
        self._lock = threading.Lock()
        self._pending: Any = None
        self._has_pending = False
        self._thread: Optional[threading.Thread] = None
        self.started: list = []  # requests actually run, in order (for tests and the status line)

    def submit(self, request: Any) -> None:
        with self._lock:
            self._pending, self._has_pending = request, True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="dspark-live", daemon=True)
                self._thread.start()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float = 60.0) -> bool:
        t = self._thread
        if t is not None:
            t.join(timeout)
        return not self.busy

    def _loop(self) -> None:
        while True:
            time.sleep(self.debounce_s)  # let a dragged slider settle
            with self._lock:
                if not self._has_pending:
                    self._thread = None
                    return
                req, self._pending, self._has_pending = self._pending, None, False
            self.started.append(req)
            try:
                result, error = self._work(req), None
            except Exception as e:  # noqa: BLE001 - shown in the panel
                result, error = None, e
            with self._lock:
                stale = self._has_pending
            try:
                self._done(req, result, error, stale=stale)
            except Exception:  # noqa: BLE001
                traceback.print_exc()


# -- the panel ------------------------------------------------------------------------------------

def _apply(widget, fig: go.Figure) -> None:
    """Copy `fig` into `widget` in place: trace data and layout updated inside one batch_update."""
    new = fig.to_plotly_json()
    lay = new.get("layout", {})
    lay.pop("template", None)
    same = len(widget.data) == len(new["data"]) and all(
        w.type == n.get("type") for w, n in zip(widget.data, new["data"]))
    with widget.batch_update():
        if same:
            for w, n in zip(widget.data, new["data"]):
                w.update(n, overwrite=True)
        else:
            widget.data = ()
            widget.add_traces(fig.data)
        widget.layout.annotations = lay.pop("annotations", ())
        widget.layout.update(lay, overwrite=True)


class Panel:
    def __init__(self, backend, *, debounce_s: float = 0.3):
        import ipywidgets as W

        self.backend = backend
        self.mode = backend.mode
        self.last: Optional[PointData] = None
        self.redraws = 0
        self.last_redraw_s: Optional[float] = None
        opts = backend.options()
        dflt = backend.defaults()

        def slider(name, label):
            vals = opts[name]
            v = dflt.get(name)
            v = v if v in vals else min(vals, key=lambda x: abs(x - (v or vals[0])))
            return W.SelectionSlider(options=vals, value=v, description=label, continuous_update=False,
                                     style={"description_width": "80px"}, layout=W.Layout(width="340px"))

        self.controls = {
            "ep_size": slider("ep_size", "EP size"),
            "batch_size": slider("batch_size", "batch size"),
            "gamma": slider("gamma", "gamma"),
            "strategy": W.Dropdown(options=opts["strategy"], value=dflt["strategy"], description="strategy",
                                   tooltip="timeline: this strategy against device_direct",
                                   style={"description_width": "80px"}),
            "workload": W.Dropdown(options=opts["workload"], value=dflt["workload"], description="workload",
                                   style={"description_width": "80px"}),
        }
        if "run" in opts:
            self.controls["run"] = W.Dropdown(options=opts["run"], value=dflt.get("run"), description="run",
                                              style={"description_width": "80px"})
        self.mode_html = W.HTML(self._mode_banner())
        self.status = W.HTML("")
        self.error = W.HTML("")
        self.progress = W.FloatProgress(value=0, min=0, max=1, description="", layout=W.Layout(
            width="340px", visibility="visible" if self.mode == "live" else "hidden"))
        self.figs = {k: go.FigureWidget(layout=dict(height=h, width=1000)) for k, h in (
            ("comparison", 420), ("syncs", 380), ("breakdown", 480), ("timeline", 420))}
        c = self.controls
        self.widget = W.VBox([
            self.mode_html,
            W.HBox([W.VBox([c["ep_size"], c["batch_size"], c["gamma"]]),
                    W.VBox([c["strategy"], c["workload"]] + ([c["run"]] if "run" in c else []))]),
            W.HBox([self.progress, self.status]),
            self.error,
            self.figs["comparison"],
            self.figs["syncs"],
            self.figs["breakdown"],
            self.figs["timeline"],
        ])
        self._worker = LatestWins(self._measure, self._measured, debounce_s) if self.mode == "live" else None
        for w in self.controls.values():
            w.observe(self._on_change, names="value")
        self.refresh()

    # -- state ---------------------------------------------------------------------------------
    def settings(self) -> dict:
        return {k: w.value for k, w in self.controls.items()}

    def set(self, **values) -> None:
        """Set several controls at once with one redraw (for notebooks and tests)."""
        self._hold = True
        try:
            for k, v in values.items():
                self.controls[k].value = v
        finally:
            self._hold = False
        self.refresh()

    _hold = False

    def _mode_banner(self) -> str:
        color = "#1a7f37" if self.mode == "live" else "#555"
        return (f"<div class='dspark-mode' style='padding:4px 8px;border-left:4px solid {color};background:#f6f8fa'>"
                f"<b>{'LIVE' if self.mode == 'live' else 'RECORDED'} mode.</b> {html.escape(self.backend.describe())}</div>")

    def _on_change(self, change) -> None:
        if not self._hold:
            self.refresh()

    def refresh(self) -> None:
        s = self.settings()
        if self._worker is not None:
            self.status.value = f"<span class='dspark-status'>measuring {html.escape(self._label(s))} …</span>"
            self.progress.value = 0
            self._worker.submit(s)
            return
        try:
            self.show(self.backend.get(s))
        except Exception as e:  # noqa: BLE001 - shown in the panel, not as a traceback
            self.show_error(e)

    @staticmethod
    def _label(s: dict) -> str:
        return f"EP {s.get('ep_size')} · batch {s.get('batch_size')} · gamma {s.get('gamma')} · {s.get('workload')}"

    # -- live ----------------------------------------------------------------------------------
    def _measure(self, settings: dict) -> PointData:
        def on_progress(msg, frac=None, *args):
            if frac is not None:
                self.progress.value = float(min(max(frac, 0.0), 1.0))
            self.status.value = (f"<span class='dspark-status'>measuring {html.escape(self._label(settings))}: "
                                 f"{html.escape(str(msg))}</span>")

        return self.backend.get(settings, on_progress=on_progress)

    def _measured(self, settings, data, error, stale=False) -> None:
        if stale:
            return  # a newer request is waiting; it will draw
        if error is not None:
            self.show_error(error)
            return
        self.progress.value = 1.0
        try:
            self.show(data)
        except Exception as e:  # noqa: BLE001 - shown in the panel, not as a traceback
            self.show_error(e, "Cannot draw this measurement")

    # -- drawing ----------------------------------------------------------------------------------
    def show_error(self, e: BaseException, title: Optional[str] = None) -> None:
        title = title or ("Measurement failed" if self.mode == "live" else "Cannot show this setting")
        self.error.value = (f"<div class='dspark-error' style='color:#8c1c13;padding:4px 8px;border-left:4px solid #d62728'>"
                            f"<b>{html.escape(title)}:</b> {html.escape(_short_error(e))}</div>")
        self.status.value = "<span class='dspark-status'>failed</span>"

    def show(self, data: PointData) -> None:
        t0 = time.perf_counter()
        rows = data.rows
        ok = figures.ok_rows(rows)
        if ok.empty:
            bad = figures.failed_rows(rows)
            raise_msg = str(bad["error"].iloc[0]) if len(bad) else "no rows"
            self.show_error(RuntimeError(f"every strategy failed at this point: {raise_msg}"),
                            "Measurement failed" if self.mode == "live" else "The recorded measurement failed")
            return
        chosen = self.controls["strategy"].value
        comp = figures.strategy_comparison(rows)
        for tr in comp.data:
            tr.marker.line = dict(width=[3 if x == chosen else 0 for x in tr.x], color="black")
        shown = list(dict.fromkeys([BASELINE, chosen]))
        pid = ok["point_id"].iloc[0] if ok["point_id"].nunique() == 1 else None
        tl = data.timelines
        if pid is None and not tl.empty:
            # several runs with different point ids: keep each run's own point
            keep = set(zip(figures._run_key(ok), ok["point_id"]))
            tl = tl[[(r, p) in keep for r, p in zip(tl.get("run_id", ""), tl["point_id"])]]
            tl = tl.assign(point_id="shown")
            pid = "shown"
        timeline = figures.timeline(tl, rows.assign(point_id=pid) if pid == "shown" else rows,
                                    point_id=pid, strategies_shown=shown)
        new = {"comparison": comp, "syncs": figures.sync_counts(rows), "breakdown": figures.step_breakdown(rows),
               "timeline": timeline}
        for k, fig in new.items():
            _apply(self.figs[k], fig)
        self.last = data
        self.error.value = ""
        self.status.value = (f"<span class='dspark-status' data-point='{html.escape(str(ok['point_id'].iloc[0]))}'>"
                             f"{html.escape(data.note)} — {html.escape(figures.fingerprint_label(ok))}</span>")
        self.redraws += 1
        self.last_redraw_s = time.perf_counter() - t0

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


def load_recorded(paths=None) -> RecordedBackend:
    """Recorded data from `paths`, else $DSPARK_DATA, else the repository's data/ folder."""
    return RecordedBackend.from_store(paths)


def choose_mode() -> str:
    """"live" when a CUDA device is available and DSPARK_LAB_MODE is not "recorded"."""
    if os.environ.get(MODE_ENV, "").lower() == "recorded":
        return "recorded"
    try:
        import torch

        return "live" if torch.cuda.is_available() else "recorded"
    except Exception:  # noqa: BLE001
        return "recorded"


class _ErrorBackend:
    """Stands in when no backend could be made, so the panel can say why."""

    mode = "recorded"

    def __init__(self, error: BaseException):
        self._error = error

    def options(self):
        return {"ep_size": [1], "batch_size": [1], "gamma": [1], "strategy": list(strategies.names()),
                "workload": list(WORKLOAD_PRESETS)}

    def defaults(self):
        return {"ep_size": 1, "batch_size": 1, "gamma": 1, "strategy": BASELINE, "workload": "sglang_profile"}

    def describe(self):
        return "no data to show"

    def get(self, settings, on_progress=None):
        raise self._error


def make_panel(backend=None, **kwargs) -> Panel:
    """A panel over `backend`; by default live on a CUDA machine, else the recorded runs."""
    if backend is None:
        try:
            backend = LiveBackend() if choose_mode() == "live" else load_recorded()
        except Exception as e:  # noqa: BLE001
            backend = _ErrorBackend(e)
    return Panel(backend, **kwargs)
