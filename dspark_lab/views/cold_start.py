"""The panel's cold start in a fresh kernel (notebook 01's first code cell): the recorded runs'
panel drawn at once, before torch is imported (views never import it), and, where `make_live()`
gives a streaming backend (a CUDA device), a live panel made on a thread beside it, whose first
drawn update replaces the recorded panel in the same output.

  explorer = cold_start.open_panel(make_live)   # make_live() -> a live backend, or None (recorded only)
  explorer.backend()                            # what the notebook measures with (waits for make_live)
  explorer.point(setting)                       # the default setting's complete point, measured once

Importing torch and the live backend took 4.4 s on an H200's host, and the warm-up (CUDA context,
the default step built and graph-captured) follows it: the recorded figures are what the user reads
meanwhile. `marks` holds when each stage ended (time.perf_counter()), for the cold-start study.
"""
from __future__ import annotations

import html
import threading
import time
from typing import Callable, Optional

from dspark_lab.results.viewmodels.backend_protocol import STREAMS, PanelBackend, PointData, checked_capabilities
from dspark_lab.views import panel as panel_mod


POINT_KEYS = ("ep_size", "batch_size", "gamma", "workload")  # what names a point (strategy: the timeline only)


class ColdStart:
    """The recorded panel now; the live panel in its place from its first drawn update."""

    def __init__(self, make_live: Callable[[], Optional[PanelBackend]], recorded: Optional[PanelBackend] = None):
        import ipywidgets as W  # optional: only the panel needs it

        self.marks: dict = {"start": time.perf_counter()}
        recorded = panel_mod.recorded_or_error() if recorded is None else recorded
        self.marks["recorded_loaded"] = time.perf_counter()
        self.recorded = panel_mod.make_panel(recorded)
        self.marks["recorded_drawn"] = time.perf_counter()
        self.live: Optional[panel_mod.Panel] = None
        self.error: Optional[BaseException] = None  # make_live's, shown in the recorded panel
        self.box = W.VBox([self.recorded.widget])
        self._lock = threading.Lock()
        self._made = threading.Event()  # make_live returned (or raised)
        self._complete = threading.Event()  # the live panel drew a complete update
        self._thread = threading.Thread(target=self._go_live, args=(make_live,), name="dspark-go-live", daemon=True)
        self._thread.start()

    @property
    def mode(self) -> str:
        return "live" if self.live is not None else "recorded"

    @property
    def shown(self) -> panel_mod.Panel:
        """The panel in the output now: the live one once it has drawn, else the recorded one."""
        return self.live if self.live is not None and self.box.children[0] is self.live.widget else self.recorded

    def _go_live(self, make_live) -> None:
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
            self.recorded.show_error(e, "The live backend could not start; the recorded runs are shown")
        finally:
            self._made.set()

    def _note(self, text: str) -> None:
        """A line under the recorded panel's banner (its status line keeps naming the point shown)."""
        self.recorded.mode_html.value += f"<div class='dspark-going-live'>{html.escape(text)}</div>"

    def _on_live_drawn(self, live: panel_mod.Panel) -> None:
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
        return self.live.backend if self.live is not None else self.recorded.backend

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
        self.recorded.close()
        self.box.close()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)


def open_panel(make_live: Callable[[], Optional[PanelBackend]], recorded: Optional[PanelBackend] = None) -> ColdStart:
    """The recorded panel drawn now, the live one in its place once it draws (see the module doc)."""
    return ColdStart(make_live, recorded)
