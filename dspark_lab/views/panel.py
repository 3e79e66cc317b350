"""An ipywidgets panel over a backend: controls for EP size, batch size, gamma, strategy and
workload; plotly FigureWidgets that are updated in place (batch_update), never rebuilt.

A backend is a PanelBackend (results.viewmodels.backend_protocol): `options()`, `defaults()`,
`describe()`, `get(settings, on_progress)` -> PointData, `close()`, and the capabilities it declares:
  RecordedBackend(runs)   PICKS_RUNS: the nearest recorded point (per run), a run dropdown and a
                          run filter; says which GPU and date.
  LiveBackend()           STREAMS: run.point.measure_point on this machine's CUDA device, all strategies.
`make_panel()` shows the recorded runs unless given a backend (run.live.open_backend() picks live
on a CUDA machine, else recorded), and the panel says which.
A streaming backend's measurements run on a worker thread (views/live_panel.py): the comparison is
drawn as the trials arrive, a newer setting cancels the running one (sliders also report only on
release), and `close()` leaves no thread or rank process. A failed measurement shows its message
in the panel.
"""
from __future__ import annotations

import html
import time
from typing import Optional

import plotly.graph_objects as go

from dspark_lab.results.viewmodels.backend import ALL_RUNS, load_recorded
from dspark_lab.results.viewmodels.backend_protocol import PICKS_RUNS, STREAMS, PanelBackend, PointData, checked_capabilities
from dspark_lab.results.viewmodels.point_view import point_view
from dspark_lab.results.query.runs import REFERENCE
from dspark_lab.results.facts import strategy_table
from dspark_lab.results.facts.strategy_table import BASELINE
from dspark_lab.views import figures, live_panel
from dspark_lab.views.figures.idle_causes import idle_by_cause

CONTROLS = ("ep_size", "batch_size", "gamma", "strategy", "workload")
FIGURE_HEIGHTS = {"comparison": 420, "syncs": 380, "breakdown": 480, "idle": 380, "timeline": 420}  # px, top to bottom


def _short_error(e: BaseException) -> str:
    msg = str(e).strip() or repr(e)
    return f"{type(e).__name__}: {msg.splitlines()[0] if len(msg) < 2000 else msg[:2000]}"


# -- the panel ------------------------------------------------------------------------------------

def _controls(W, opts: dict, dflt: dict) -> dict:
    """The setting controls: sliders over the recorded values, dropdowns for strategy, workload, run."""
    def slider(name, label):
        vals = opts[name]
        v = dflt.get(name)
        v = v if v in vals else min(vals, key=lambda x: abs(x - (v or vals[0])))
        return W.SelectionSlider(options=vals, value=v, description=label, continuous_update=False,
                                 style={"description_width": "80px"}, layout=W.Layout(width="340px"))

    controls = {
        "ep_size": slider("ep_size", "EP size"),
        "batch_size": slider("batch_size", "batch size"),
        "gamma": slider("gamma", "gamma"),
        "strategy": W.Dropdown(options=opts["strategy"], value=dflt["strategy"], description="strategy",
                               tooltip=f"timeline: this strategy against {BASELINE}",
                               style={"description_width": "80px"}),
        "workload": W.Dropdown(options=opts["workload"], value=dflt["workload"], description="workload",
                               style={"description_width": "80px"}),
    }
    if "run" in opts:
        # Wide enough for a whole label ("NVIDIA H200 2026-11-30 06:47:53 [run id]"): labels that
        # differ only in their seconds or run id must not look the same when cut.
        controls["run"] = W.Dropdown(options=opts["run"], value=dflt.get("run"), description="run",
                                     style={"description_width": "80px"}, layout=W.Layout(width="520px"))
    return controls


def _apply(widget, fig: go.Figure) -> None:
    """Copy `fig` into `widget` in place: trace data and layout updated inside one batch_update (a
    recorded panel's FigureBox is redrawn whole)."""
    if isinstance(widget, figures.FigureBox):
        widget.show(fig)
        return
    new = fig.to_plotly_json()
    lay = figures.fold_subtitle(new.get("layout", {}))  # laid out the same on the first render
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
    def __init__(self, backend: PanelBackend, *, debounce_s: float = 0.05, on_drawn=None):
        """`on_drawn(panel)`: a streaming backend's hook, after each update drawn (views/live_panel.py)."""
        import ipywidgets as W  # optional: only the panel needs it (recorded figures and the report do not)

        capabilities = checked_capabilities(backend)
        self.backend = backend
        self.mode = backend.mode
        self.streams, self.picks_runs = STREAMS in capabilities, PICKS_RUNS in capabilities
        self.last: Optional[PointData] = None
        self.redraws = 0
        self.last_redraw_s: Optional[float] = None
        opts = backend.options()
        dflt = backend.defaults()
        self.controls = _controls(W, opts, dflt)
        # Live: the dispatch control and per-rank figures of real EP ranks (views/live_panel.py).
        self.live = live_panel.LiveParts(W, self, opts, dflt, _apply) if self.streams else None
        # Many recorded runs: a filter narrows the (bounded) run dropdown; Enter applies it.
        self.run_filter = self.run_note = None
        if "run" in opts and self.picks_runs:
            self.run_filter = W.Text(value="", description="runs", continuous_update=False,
                                     placeholder="filter: H200 torch=2.11 since=2026-11-01 name=…",
                                     style={"description_width": "80px"}, layout=W.Layout(width="340px"))
            self.run_note = W.HTML(f"<span class='dspark-runs'>{html.escape(backend.selection_note())}</span>")
            self.run_filter.observe(self._on_filter, names="value")
        self.status = W.HTML("")
        self.error = W.HTML("")
        self.progress = W.FloatProgress(value=0, min=0, max=1, description="", layout=W.Layout(
            width="340px", visibility="visible" if self.streams else "hidden"))
        # Recorded: figures redrawn whole, drawn without importing plotly's widgets (views/figures/render.py).
        box = figures.panel_figure if self.streams else figures.FigureBox
        self.figs = {k: box(k, h) for k, h in FIGURE_HEIGHTS.items()}
        # The banner last: live, it names the GPU, and the fingerprint waits for the CUDA context;
        # the figures above are made meanwhile rather than beside the warm-up's step building.
        self.mode_html = W.HTML(self._mode_banner())
        self.widget = self._layout(W)
        self._worker = live_panel.LiveController(self, debounce_s, on_drawn) if self.streams else None
        for w in self.controls.values():
            w.observe(self._on_change, names="value")
        self.refresh()

    def _layout(self, W):
        c = self.controls
        side = [c["strategy"], c["workload"]] + ([c["run"]] if "run" in c else []) + ([c["dispatch"]] if "dispatch" in c else [])
        if self.run_filter is not None:
            side += [self.run_filter, self.run_note]
        return W.VBox([
            self.mode_html,
            # The sliders' column keeps its width (readouts included) beside the dropdowns'.
            W.HBox([W.VBox([c["ep_size"], c["batch_size"], c["gamma"]],
                           layout=W.Layout(min_width="420px", flex="0 0 auto")), W.VBox(side)]),
            W.HBox([self.progress, self.status]),
            self.error,
            *(getattr(self.figs[k], "widget", self.figs[k]) for k in FIGURE_HEIGHTS),
            *([self.live.box] if self.live is not None else []),
        ])

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

    def filter_runs(self, text: str) -> None:
        """Apply a run filter (RecordedBackend.filter_runs) as if typed into the filter box."""
        self.run_filter.value = text

    def _on_filter(self, change) -> None:
        try:
            note = self.backend.filter_runs(change["new"])
        except ValueError as e:
            self.run_note.value = f"<span class='dspark-runs'>{html.escape(self.backend.selection_note())}</span>"
            self.show_error(e, "Cannot filter the runs")
            return
        self.run_note.value = f"<span class='dspark-runs'>{html.escape(note)}</span>"
        dd = self.controls["run"]
        keep = dd.value if dd.value in set(self.backend.selection[:self.backend.max_options]) else ALL_RUNS
        self._hold = True
        try:
            dd.options = self.backend.options()["run"]
            dd.value = keep
        finally:
            self._hold = False
        self.error.value = ""
        self.refresh()

    def _on_change(self, change) -> None:
        if self._hold:
            return
        if self.picks_runs and "run" in self.controls and change.get("owner") is self.controls["run"]:
            self._offer_run_points(change["new"])
        self.refresh()

    def _offer_run_points(self, run) -> None:
        """Sliders and workloads offer the points the chosen run holds (a one-point run: one value
        each); a value it lacks moves to the nearest it holds."""
        opts = self.backend.options(run)
        self._hold = True
        try:
            for name in ("ep_size", "batch_size", "gamma"):
                w, vals = self.controls[name], opts[name]
                if list(w.options) != vals:
                    v = w.value
                    w.options = vals
                    w.value = v if v in vals else min(vals, key=lambda x: abs(x - v))
            wl = self.controls["workload"]
            if list(wl.options) != opts["workload"]:
                keep = wl.value
                wl.options = opts["workload"]
                wl.value = keep if keep in opts["workload"] else opts["workload"][0]
        finally:
            self._hold = False

    def refresh(self) -> None:
        s = self.settings()
        if self._worker is not None:
            self.live.on_settings(s)
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

    # -- drawing ----------------------------------------------------------------------------------
    def show_error(self, e: BaseException, title: Optional[str] = None) -> None:
        title = title or ("Measurement failed" if self.mode == "live" else "Cannot show this setting")
        self.error.value = (f"<div class='dspark-error' style='color:#8c1c13;padding:4px 8px;border-left:4px solid #d62728'>"
                            f"<b>{html.escape(title)}:</b> {html.escape(_short_error(e))}</div>")
        self.status.value = "<span class='dspark-status'>failed</span>"

    def show(self, data: PointData) -> None:
        t0 = time.perf_counter()
        view = point_view(data.rows, data.timelines, what="the panel")
        if view.ok.empty:
            first = str(view.failed["error"].iloc[0]) if len(view.failed) else "no rows"
            self.show_error(RuntimeError(f"every strategy failed at this point: {first}"),
                            "Measurement failed" if self.mode == "live" else "The recorded measurement failed")
            return
        chosen = self.controls["strategy"].value
        new = {"comparison": self._comparison(view), "syncs": figures.sync_counts(view), "breakdown": figures.step_breakdown(view),
               "idle": idle_by_cause(view),
               "timeline": figures.timeline(view, strategies_shown=list(dict.fromkeys([BASELINE, chosen])))}
        for k, fig in new.items():
            _apply(self.figs[k], fig)
        self.last = data
        self.error.value = ""
        self.status.value = (f"<span class='dspark-status' data-point='{html.escape(str(view.ok['point_id'].iloc[0]))}'>"
                             f"{html.escape(data.note)} — {html.escape(view.fingerprint)}</span>")
        self.redraws += 1
        self.last_redraw_s = time.perf_counter() - t0

    def _comparison(self, view) -> go.Figure:
        """The strategy comparison, the chosen strategy's bar outlined."""
        chosen = self.controls["strategy"].value
        comp = figures.strategy_comparison(view)
        for tr in comp.data:
            if tr.type != "bar":  # disturbed-trial markers keep their own look
                continue
            tr.marker.line = dict(width=[3 if x == chosen else 0 for x in tr.x], color="black")
        return comp

    def show_partial(self, data: PointData) -> None:
        """A live setting's timed trials so far: the comparison only; the profiled figures follow."""
        view = point_view(data.rows, data.timelines, what="the panel")
        if not view.ok.empty:
            _apply(self.figs["comparison"], self._comparison(view))
            self.redraws += 1

    def close(self) -> None:
        """Stop live measuring (no thread or rank process left) and close the widgets."""
        if self._worker is not None:
            self._worker.close()
        self.backend.close()
        self.widget.close()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


class _ErrorBackend:
    """Stands in when no backend could be made, so the panel can say why."""

    mode = "recorded"
    capabilities = frozenset()

    def __init__(self, error: BaseException):
        self._error = error

    def options(self):
        return {"ep_size": [1], "batch_size": [1], "gamma": [1], "strategy": list(strategy_table.names()),
                "workload": [REFERENCE.workload]}

    def defaults(self):
        return {"ep_size": 1, "batch_size": 1, "gamma": 1, "strategy": BASELINE, "workload": REFERENCE.workload}

    def describe(self):
        return "no data to show"

    def get(self, settings, on_progress=None):
        raise self._error

    def close(self):
        """Nothing to release."""


def make_panel(backend=None, **kwargs) -> Panel:
    """A panel over `backend` (run.live.open_backend() picks live on a CUDA machine, else the
    recorded runs); by default the recorded runs. A backend that cannot be made is shown as why."""
    return Panel(recorded_or_error() if backend is None else backend, **kwargs)


def recorded_or_error():
    """The recorded runs' backend, or one that shows why they could not be loaded."""
    try:
        return load_recorded()
    except Exception as e:  # noqa: BLE001
        return _ErrorBackend(e)
