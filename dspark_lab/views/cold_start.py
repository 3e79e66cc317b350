"""The panel's cold start in a fresh kernel (notebook 01's first code cell): the recorded runs'
panel drawn at once, before torch is imported (views never import it), and, where `make_live()`
gives a streaming backend (a CUDA device), a live panel made on a thread beside it, whose first
drawn update replaces the recorded panel in the same output.

  explorer = cold_start.open_panel(make_live)   # make_live() -> a live backend, or None (recorded only)
  explorer.backend()                            # what the notebook measures with (waits for make_live)
  explorer.point(setting)                       # the default setting's complete point, measured once

Importing torch and the live backend took 4.4 s on an H200's host, and the warm-up (CUDA context,
the default step built and graph-captured) follows it: the recorded figures are what the user reads
meanwhile. Where the recorded panel's first view was stored by an earlier start for the same runs,
code and install (views/first_view.py), that view is shown at once instead, without pandas or
plotly imported, and the recorded panel, built on the thread, takes its place when drawn; without
one the panel is drawn here and its first view stored for the next start. `marks` holds when each
stage ended (time.perf_counter()), for the cold-start study.
"""
from __future__ import annotations

import html
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, Optional

from dspark_lab.views import first_view

if TYPE_CHECKING:
    from dspark_lab.results.viewmodels.backend_protocol import PanelBackend, PointData
    from dspark_lab.views.panel import Panel

POINT_KEYS = ("ep_size", "batch_size", "gamma", "workload")  # what names a point (strategy: the timeline only)
HEAVY = ("numpy", "pandas", "plotly", "torch")  # what the first view is shown without (imported_at_first_view)


def __getattr__(name: str):
    # The panel module (pandas, plotly) is imported when the recorded panel is built, not with this one.
    if name == "panel_mod":
        from dspark_lab.views import panel

        return panel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ColdStart:
    """The recorded panel now (its stored first view first, where there is one); the live panel in
    its place from its first drawn update."""

    def __init__(self, make_live: Callable[[], Optional[PanelBackend]], recorded: Optional[PanelBackend] = None):
        import ipywidgets as W  # optional: only the panel needs it

        self.marks: dict = {"start": time.perf_counter()}
        self.live: Optional[Panel] = None
        self.error: Optional[BaseException] = None  # make_live's (or the recorded panel's), shown in the output
        self.imported_at_first_view: Optional[list] = None  # of HEAVY, when the stored first view was shown
        self._recorded: Optional[Panel] = None
        self._first: Optional[first_view.FirstView] = None
        self._lock = threading.Lock()
        self._drawn = threading.Event()  # the recorded panel drawn (or its build failed)
        self._made = threading.Event()  # make_live returned (or raised)
        self._complete = threading.Event()  # the live panel drew a complete update
        # Only the default recorded runs have a stored first view (a backend given is not keyed).
        key = first_view.key() if recorded is None else None
        view = first_view.load(key) if key is not None else None
        if view is not None:
            self._first = first_view.FirstView(view)
            self.box = W.VBox([self._first.widget])
            self.marks["first_view_shown"] = time.perf_counter()
            self.imported_at_first_view = sorted(m for m in HEAVY if m in sys.modules)
        else:
            self._build_recorded(recorded)
            self.box = W.VBox([self._recorded.widget])
        self._thread = threading.Thread(target=self._run, args=(make_live, recorded, key), name="dspark-go-live",
                                        daemon=True)
        self._thread.start()

    def _build_recorded(self, recorded: Optional[PanelBackend]) -> None:
        self.marks["recorded_started"] = time.perf_counter()
        try:
            from dspark_lab.views import panel as panel_mod  # pandas and plotly: here, not with this module

            self.marks["recorded_imported"] = time.perf_counter()
            recorded = panel_mod.recorded_or_error() if recorded is None else recorded
            self.marks["recorded_loaded"] = time.perf_counter()
            self._recorded = panel_mod.make_panel(recorded)
            self.marks["recorded_drawn"] = time.perf_counter()
        finally:
            self._drawn.set()

    def _run(self, make_live, recorded, key) -> None:
        """The thread: the recorded panel in the first view's place (built here while it stands in),
        or the first view stored from the one drawn; then the live backend."""
        if self._first is not None:
            try:
                self._build_recorded(recorded)
            except Exception as e:  # noqa: BLE001 - said in the output, in place of the refreshing line
                self.error = e
                self._first.show_error(e, "The recorded panel could not be drawn; its last drawn view is shown")
            else:
                with self._lock:
                    if self.box.children[0] is self._first.widget:
                        self.box.children = (self._recorded.widget,)
                self._first.close()  # out of the output: its widgets' models go too
        elif key is not None:
            first_view.save(self._recorded, key)
        self._go_live(make_live)

    @property
    def recorded(self) -> Panel:
        """The recorded panel (waited for while the stored first view stands in for it)."""
        self._drawn.wait()
        if self._recorded is None:
            raise RuntimeError("the recorded panel could not be drawn") from self.error
        return self._recorded

    @property
    def mode(self) -> str:
        return "live" if self.live is not None else "recorded"

    @property
    def shown(self) -> Panel:
        """The panel in the output now: the live one once it has drawn, else the recorded one
        (waited for while the stored first view stands in)."""
        return self.live if self.live is not None and self.box.children[0] is self.live.widget else self.recorded

    def _go_live(self, make_live) -> None:
        from dspark_lab.results.viewmodels.backend_protocol import STREAMS, checked_capabilities
        from dspark_lab.views import panel as panel_mod

        try:
            # The live panel's FigureWidgets import nbformat's schema checker (over a second): here,
            # before the warm-up, so the first live figure does not wait for it after the warm-up.
            import plotly.graph_objs._figurewidget  # noqa: F401
            backend = make_live()
            self.marks["backend_made"] = time.perf_counter()
            if backend is not None and STREAMS in checked_capabilities(backend):
                self._note("LIVE mode is starting on this machine (CUDA, the first step and its graphs): the "
                           "recorded figures below stay until the first live one replaces them.")
                self.live = panel_mod.Panel(backend, on_drawn=self._on_live_drawn)
        except Exception as e:  # noqa: BLE001 - the recorded panel stays and says why
            self.error = e
            why = "The live backend could not start; the recorded runs are shown"
            if self._recorded is not None:
                self._recorded.show_error(e, why)
            else:
                self._first.show_error(e, why)
        finally:
            self._made.set()

    def _note(self, text: str) -> None:
        """A line under the recorded panel's banner (its status line keeps naming the point shown)."""
        if self._recorded is None:
            return  # its build failed: that error stays in the output until the live panel draws
        self._recorded.mode_html.value += f"<div class='dspark-going-live'>{html.escape(text)}</div>"

    def _on_live_drawn(self, live: Panel) -> None:
        with self._lock:
            if self.box.children[0] is not live.widget:
                self.marks["first_live_drawn"] = time.perf_counter()
                self.box.children = (live.widget,)
        if live.last is not None:
            self.marks.setdefault("first_live_complete", time.perf_counter())
            self._complete.set()

    def wait_live(self, timeout: Optional[float] = None) -> bool:
        """Wait until the live panel has drawn a complete update; False without one (recorded only)."""
        self._made.wait(timeout)
        return self.live is not None and self._complete.wait(timeout)

    def backend(self, timeout: Optional[float] = None) -> PanelBackend:
        """The live backend once make_live has given one (waited for), else the recorded runs'."""
        self._made.wait(timeout)
        if self.live is not None:
            return self.live.backend
        self._drawn.wait(timeout)
        return self.recorded.backend

    def point(self, settings: dict, timeout: Optional[float] = None) -> PointData:
        """The complete point at `settings`: live, the live panel's first complete update when it
        measured those settings (waited for: one measurement on the GPU, not two at once), else
        measured; recorded, the recorded backend's."""
        backend = self.backend(timeout)
        if self.live is not None and self._complete.wait(timeout):
            last = self.live.last
            if last is not None and all(last.rows[k].iloc[0] == settings[k] for k in POINT_KEYS if k in settings):
                return last
        return backend.get(settings)

    def close(self) -> None:
        """Stop live measuring (no thread or rank process left) and close both panels."""
        self._made.wait()
        if self.live is not None:
            self.live.close()
        if self._recorded is not None:
            self._recorded.close()
        if self._first is not None:
            self._first.close()
        self.box.close()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)


def open_panel(make_live: Callable[[], Optional[PanelBackend]], recorded: Optional[PanelBackend] = None) -> ColdStart:
    """The recorded panel drawn now (or its stored first view, the panel built on a thread), the
    live one in its place once it draws (see the module doc)."""
    return ColdStart(make_live, recorded)
