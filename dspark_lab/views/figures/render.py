"""How figures leave Python: the plotly.js config they are shown with (notebooks, the report, the
panel's widgets) and static images at slide sizes (kaleido)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from dspark_lab.views.figures.layout import (SUBTITLE_FONT_PX, fit_layout, fold_subtitle, wrap_group_labels,
                                             wrap_legend_names)

# Every figure's plotly.js config: no logo, and no "Share chart..." modebar button (plotly.js 3 adds
# "sendChartToCloud" unless showSendToCloud is false; it would post the figure to a cloud service).
PLOTLY_CONFIG = {"displaylogo": False, "showSendToCloud": False, "modeBarButtonsToRemove": ["sendChartToCloud"]}
SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
SLIDE_TEXT_PX = 18  # the smallest text on an exported slide (readable from the back of a room)
SLIDE_SIZES = {"slide": (1600, 900), "slide-4x3": (1400, 1050), "half-slide": (800, 900)}
EXPORT_FORMATS = ("png", "svg", "pdf")


def apply_display_config() -> None:
    """Make PLOTLY_CONFIG the default of every plotly renderer that takes a config (a notebook's
    display of a figure, `fig.show()`). Idempotent; the notebooks call it in their first cell. The
    report passes the config to each figure's HTML, FigureWidgets take it per widget (`widget_config`)."""
    for name in list(pio.renderers):
        r = pio.renderers[name]
        if hasattr(r, "config"):
            r.config = {**(r.config or {}), **PLOTLY_CONFIG}


def widget_config(widget) -> None:
    """PLOTLY_CONFIG on a go.FigureWidget (its `_config` is synced to the browser)."""
    widget._config = {**(widget._config or {}), **PLOTLY_CONFIG}


def as_widget(fig: go.Figure) -> go.FigureWidget:
    """`fig` as a FigureWidget with PLOTLY_CONFIG, its subtitle folded into its title (layout.fold_subtitle:
    a widget drawn off screen would put the subtitle over its title)."""
    widget = go.FigureWidget(fig.to_dict() | {"layout": fold_subtitle(fig.to_plotly_json()["layout"])})
    widget_config(widget)
    return widget


def folded_title(fig: go.Figure) -> dict:
    """The title of `fig` with its subtitle folded in, to set on a widget made by `as_widget`."""
    return fold_subtitle(fig.to_plotly_json()["layout"])["title"]


def panel_figure(name: str, height: int, width: int = 1000) -> go.FigureWidget:
    """An empty FigureWidget of a panel, updated in place later: PLOTLY_CONFIG (no cloud "share"
    button, no logo), and the classes `dspark-figure` and `dspark-figure-<name>` (found by the
    browser test before plotly has drawn into it)."""
    fw = go.FigureWidget(layout=dict(height=height, width=width))
    widget_config(fw)
    fw.add_class("dspark-figure")
    fw.add_class(f"dspark-figure-{name}")
    return fw


class FigureBox:
    """A panel figure drawn as plotly's own mime output (JupyterLab's plotly renderer draws it) in an
    ipywidgets.Output, redrawn whole on each update. It needs neither plotly's FigureWidget nor
    anywidget: importing those imports nbformat, whose schema checker built a grammar for 1.2 s
    on this 2-core machine, before a recorded panel could draw. The recorded panel uses it; the live
    panel keeps FigureWidgets, updated in place. `data` and `layout` are the figure last drawn,
    `bundle` its mime bundle (views/first_view.py stores it)."""

    MIME = "application/vnd.plotly.v1+json"

    def __init__(self, name: str, height: int, width: int = 1000):
        import ipywidgets as W

        self.widget = W.Output(layout=W.Layout(min_height=f"{height}px"))
        self.widget.add_class("dspark-figure")
        self.widget.add_class(f"dspark-figure-{name}")
        self.figure = go.Figure(layout=dict(height=height, width=width))
        self.bundle = None

    @property
    def data(self):
        return self.figure.data

    @property
    def layout(self):
        return self.figure.layout

    def show(self, fig: go.Figure) -> None:
        """Draw `fig`, and keep it as drawn: its title and meta take the folded subtitle (`fig` is
        changed in place; a panel builds a new figure for every update)."""
        from IPython import get_ipython
        from IPython.display import display

        bundle = figure_bundle(fig)
        folded = bundle[self.MIME]["layout"]
        fig.update_layout({k: folded[k] for k in ("title", "meta") if k in folded})
        self.figure, self.bundle = fig, bundle
        if get_ipython() is None:
            return  # no kernel (a script, a test): nothing to draw into; the figure is kept
        with self.widget:
            self.widget.clear_output(wait=True)
            display(bundle, raw=True)


def figure_bundle(fig: go.Figure) -> dict:
    """`fig` as the mime bundle JupyterLab's plotly renderer draws: plain JSON (numpy arrays encoded by
    plotly), the subtitle folded into the title, PLOTLY_CONFIG; a text line for other frontends."""
    import json

    spec = json.loads(pio.to_json(fig, validate=False))
    spec["layout"] = fold_subtitle(spec.get("layout", {}))
    spec["config"] = dict(PLOTLY_CONFIG)
    return {FigureBox.MIME: spec, "text/plain": f"<figure: {fig.layout.title.text or ''}>"}


def _kaleido_ready() -> None:
    """No MathJax (it would need a network fetch); Debian's chromium when kaleido has none of its own."""
    pio.defaults.mathjax = None
    if not os.environ.get("BROWSER_PATH"):
        for path in SYSTEM_CHROMIUM:
            if os.path.exists(path):
                os.environ["BROWSER_PATH"] = path
                break


def slide_size(size) -> tuple[int, int]:
    """(width, height) in pixels of a named slide size or a (width, height) pair."""
    if isinstance(size, str):
        if size not in SLIDE_SIZES:
            raise ValueError(f"size {size!r} is not a known slide size; allowed: {', '.join(SLIDE_SIZES)} "
                             "or a (width, height) pair in pixels")
        return SLIDE_SIZES[size]
    try:
        w, h = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ValueError(f"size must be one of {', '.join(SLIDE_SIZES)} or a (width, height) pair, got {size!r}") from None
    if w < 200 or h < 150:
        raise ValueError(f"size must be at least 200 x 150 pixels, got {w} x {h}")
    return w, h


def slide_figure(fig: go.Figure, size="slide") -> go.Figure:
    """A copy of `fig` laid out for a slide: its size, text of at least SLIDE_TEXT_PX, legend room;
    long legend names, and run labels wider than their group of bars, on several lines."""
    w, h = slide_size(size)
    out = wrap_legend_names(go.Figure(fig))
    out.update_layout(width=w, height=None, template=fig.layout.template)
    out = fit_layout(out, width=w, height=h, text_px=SLIDE_TEXT_PX)
    if wrap_group_labels(out, w, SLIDE_TEXT_PX / SUBTITLE_FONT_PX):  # their lines deepen the axis: again
        out = fit_layout(out, width=w, height=h, text_px=SLIDE_TEXT_PX)
    return out


def export(fig: go.Figure, path_stem, size="slide", formats: Sequence[str] = ("png", "svg")) -> list:
    """Write `fig` as PNG and SVG (by default) at a slide size, laid out for that size so the title,
    subtitle and legend fit: `figures.export(fig, "out/comparison")` -> [out/comparison.png, .svg].

    size: "slide" (1600 x 900, 16:9), "slide-4x3", "half-slide", or (width, height) in pixels. The
    figure passed in is not changed."""
    w, h = slide_size(size)
    bad = [f for f in formats if f not in EXPORT_FORMATS]
    if bad:
        raise ValueError(f"formats {bad} not supported; allowed: {', '.join(EXPORT_FORMATS)}")
    out = slide_figure(fig, size)
    _kaleido_ready()
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_name(stem.name + "." + fmt) for fmt in formats]
    # One kaleido session for every format: each write_image call starts a Chromium of its own.
    _retried(lambda: pio.write_images([out] * len(paths), [str(p) for p in paths], format=list(formats),
                                      width=w, height=h, scale=1))
    return paths


def save_image(fig: go.Figure, path, **kwargs) -> None:
    """Write a PNG/SVG/PDF with kaleido (no MathJax: it would need a network fetch)."""
    _kaleido_ready()
    _write_image(fig, path, **kwargs)


# kaleido's render tab can run a figure before its own page scripts have loaded; the error names
# its missing global. Seen once, on a loaded 2-core machine (a clean-clone CI run), and not
# reproduced: that one error gets one more try. Any other error is the figure's or the machine's,
# and is raised at once.
KALEIDO_NOT_LOADED = "kaleido_scopes is not defined"


def _write_image(fig: go.Figure, path, **kwargs) -> None:
    _retried(lambda: fig.write_image(str(path), **kwargs))


def _retried(write) -> None:
    """Call `write` (a kaleido render), once more where kaleido's page had not yet loaded."""
    try:
        write()
    except Exception as e:  # noqa: BLE001 - kaleido's own JavascriptError class is private
        if KALEIDO_NOT_LOADED not in str(e):
            raise
        write()
