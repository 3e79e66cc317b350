"""The panel's LIVE path: a streamed measurement drawn as its trials arrive, a newer
setting cancelling the running one, and, on real EP ranks, a dispatch control and a per-rank view.

The backend STREAMS (a StreamingBackend of results.viewmodels.backend_protocol, e.g.
run.live.LiveBackend: stream(settings, on_update, on_progress, cancel)); each update has `data`
(PointData), `final`, `trials`, `planned`, `half_width_pct`, `ranks` (every rank's rows, real EP)
and `line()`. This module reads those attributes only: views
never import run/ (layers) nor torch.

  LiveController   one worker thread; the latest setting wins, and it cancels the one running
                   (the backend stops at its next trial boundary); close() leaves no thread.
  LiveParts        the dispatch dropdown and the per-rank figures, shown when the EP size runs
                   on real ranks (backend.runs_real_ep).
"""
from __future__ import annotations

import html
import threading
import traceback
from typing import Any, Optional

from dspark_lab.views.figures import ranks as rank_figures
from dspark_lab.views.figures import panel_figure

RANK_FIGURE_HEIGHTS = {"per_rank": 440, "who_waits": 380}  # px


class LiveController:
    """Runs `panel.backend.stream` for the latest setting on one worker thread and draws its updates
    on the panel. A setting submitted while one is measured cancels it (its later updates are not
    drawn) and runs next; settings submitted meanwhile replace each other (no backlog)."""

    def __init__(self, panel, debounce_s: float = 0.05, on_drawn=None):
        """`debounce_s`: how long a new setting waits for another before it is measured. Short: the
        sliders report a value only when released (continuous_update=False), and a setting that
        comes later still cancels the running one; at 0.3 s it was a seventh of a live update.
        `on_drawn(panel)`: called after each update drawn (views/cold_start.py swaps panels on the first)."""
        self.panel, self.debounce_s, self.on_drawn = panel, debounce_s, on_drawn
        self._lock = threading.Lock()
        self._pending: Any = None
        self._has_pending = False
        self._cancel: Optional[threading.Event] = None  # the running measurement's
        self._closed = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.started: list = []  # settings actually measured, in order (tests, the status line)
        self.cancelled: list = []  # settings whose measurement a newer one cancelled
        self.updates: list = []  # (settings, final, trials) of every update drawn, in order

    def submit(self, settings: dict) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._pending, self._has_pending = settings, True
            if self._cancel is not None:
                self._cancel.set()
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

    def close(self, timeout: float = 30.0) -> bool:
        """Cancel the running measurement, drop the pending one, end the thread; True when it ended."""
        with self._lock:
            self._closed.set()
            self._pending, self._has_pending = None, False
            if self._cancel is not None:
                self._cancel.set()
        return self.wait(timeout)

    def _loop(self) -> None:
        while True:
            self._closed.wait(self.debounce_s)  # let a dragged slider settle (close() ends it at once)
            with self._lock:
                if not self._has_pending or self._closed.is_set():
                    self._thread = None
                    return
                req, self._pending, self._has_pending = self._pending, None, False
                cancel = self._cancel = threading.Event()
            self.started.append(req)
            try:
                self.panel.backend.stream(req, on_update=lambda u: self._draw(req, u, cancel),
                                          on_progress=lambda msg, frac=None, *a: self._progress(req, msg, frac, cancel),
                                          cancel=cancel)
            except Exception as e:  # noqa: BLE001 - shown in the panel
                if cancel.is_set():
                    self.cancelled.append(req)
                else:
                    self.panel.show_error(e)
            finally:
                with self._lock:
                    self._cancel = None

    def _progress(self, req: dict, msg, frac, cancel: threading.Event) -> None:
        if cancel.is_set():
            return
        p = self.panel
        if frac is not None:
            p.progress.value = float(min(max(frac, 0.0), 1.0))
        p.status.value = (f"<span class='dspark-status'>measuring {html.escape(p._label(req))}: "
                          f"{html.escape(str(msg))}</span>")

    def _draw(self, req: dict, update, cancel: threading.Event) -> None:
        if cancel.is_set():
            return  # a newer setting is on its way: its updates draw
        p = self.panel
        try:
            line = f"<span class='dspark-live-line'>{html.escape(update.line())}</span>"
            if update.final:
                p.show(update.data)  # its status line names the point and the machine
                p.progress.value = 1.0
                p.status.value += f" · {line}"
                if p.live is not None:
                    p.live.show_ranks(update.ranks, req.get("dispatch"))
            else:
                p.show_partial(update.data)
                p.progress.value = min(update.trials / max(update.planned, 1), 1.0) * 0.9  # the rest: profiling
                p.status.value = f"<span class='dspark-status'>{html.escape(p._label(req))}: {line}</span>"
            self.updates.append((req, update.final, update.trials))
            if self.on_drawn is not None:
                self.on_drawn(p)
        except Exception as e:  # noqa: BLE001 - shown in the panel, not as a traceback
            traceback.print_exc()
            p.show_error(e, "Cannot draw this measurement")


class LiveParts:
    """The live EP controls and figures: a dispatch dropdown in the panel's controls, and each
    rank's breakdown and who-waits-for-whom after each complete update on real ranks."""

    def __init__(self, W, panel, opts: dict, dflt: dict, apply):
        """`apply(widget, fig)`: the panel's in-place figure update."""
        self.panel, self._apply = panel, apply
        self.dispatch = None
        if "dispatch" in opts:
            self.dispatch = W.Dropdown(options=opts["dispatch"], value=dflt.get("dispatch", opts["dispatch"][0]),
                                       description="dispatch", tooltip="how the MoE joins the real ranks",
                                       style={"description_width": "80px"})
            panel.controls["dispatch"] = self.dispatch
        # The per-rank figures are made when real ranks are first shown: a FigureWidget costs
        # 20-50 ms of the interpreter, and a panel's first figure waits on what its making takes.
        self.figs: dict = {}
        self.rank_note = W.HTML("")
        self.box = W.VBox([self.rank_note], layout=W.Layout(display="none"))

    def real_ep(self, settings: dict) -> bool:
        # Made only for a backend that STREAMS, so it is a StreamingBackend (results.viewmodels.backend_protocol).
        return bool(self.panel.backend.runs_real_ep(settings.get("ep_size", 1)))

    def on_settings(self, settings: dict) -> None:
        """Show the dispatch control only where real ranks run; hide a per-rank view of another setting."""
        real = self.real_ep(settings)
        if self.dispatch is not None:
            self.dispatch.layout.display = "" if real else "none"
        if not real:
            self.box.layout.display = "none"

    def show_ranks(self, rows, dispatch: Optional[str]) -> None:
        if rows is None or rows.empty:
            self.box.layout.display = "none"
            return
        if not self.figs:
            self.figs = {k: panel_figure(k, h) for k, h in RANK_FIGURE_HEIGHTS.items()}
            self.box.children = (self.rank_note, *self.figs.values())
        self._apply(self.figs["per_rank"], rank_figures.per_rank_breakdown(rows, dispatch))
        self._apply(self.figs["who_waits"], rank_figures.who_waits(rows, dispatch))
        world = int(rows["world_size"].max())
        self.rank_note.value = (f"<b>Real ranks:</b> {world} processes, dispatch {html.escape(str(dispatch))}: each "
                                "rank's step, and how much each rank waits because the others differ.")
        self.box.layout.display = ""
