"""Slide-ready export (figures.export) and the plotly config every figure is shown with."""
from __future__ import annotations

import re
import struct
import xml.etree.ElementTree as ET

import pytest

from dspark_lab.views import figures
from helpers import a_point  # the synthetic-runs fixture `data` is in conftest.py


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def _texts(svg_path):
    """(text, x, y) of each <text> in the SVG, with its parents' translate() added."""
    root = ET.parse(svg_path).getroot()
    out = []

    def walk(el, dx, dy):
        m = re.search(r"translate\(([-\d.e]+)[ ,]+([-\d.e]+)\)", el.get("transform", ""))
        if m:
            dx, dy = dx + float(m[1]), dy + float(m[2])
        if el.tag.endswith("}text") or el.tag == "text":
            txt = "".join(el.itertext())
            out.append((txt, dx + float(el.get("x", 0) or 0), dy + float(el.get("y", 0) or 0)))
        for c in el:
            walk(c, dx, dy)

    walk(root, 0.0, 0.0)
    return out


@pytest.mark.parametrize("make", ["step_breakdown", "sweep"])
def test_export_writes_png_and_svg_at_the_slide_size_with_title_and_subtitle_inside(make, data, tmp_path):  # noqa: F811
    pytest.importorskip("kaleido")
    rows = data[0]
    fig = figures.step_breakdown(a_point(rows)) if make == "step_breakdown" else figures.sweep(rows)
    before = fig.to_plotly_json()
    try:
        paths = figures.export(fig, tmp_path / "fig", size="slide")
    except Exception as e:  # kaleido needs a Chromium
        if "browser" in str(e).lower() or "chrom" in str(e).lower():
            pytest.skip(f"kaleido could not render here: {e}")
        raise
    assert fig.to_plotly_json() == before  # the figure passed in is left as it was
    png, svg = paths
    assert png.suffix == ".png" and svg.suffix == ".svg"
    w, h = figures.SLIDE_SIZES["slide"]
    assert _png_size(png) == (w, h)
    root = ET.parse(svg).getroot()
    assert (float(root.get("width")), float(root.get("height"))) == (w, h)
    texts = _texts(svg)
    title = fig.layout.title.text
    sub_first = fig.layout.title.subtitle.text.split("<br>")[0]
    hits = {k: [t for t in texts if t[0] == k] for k in (title,)}
    assert hits[title], f"title {title!r} not in the SVG"
    sub = [t for t in texts if t[0] and sub_first.startswith(t[0][:40])]
    assert sub, "subtitle not in the SVG"
    for txt, x, y in hits[title] + sub:
        assert 0 <= x < w and 0 < y < h, (txt, x, y)
    # the subtitle is drawn below the title, and every legend entry inside the image
    assert min(y for _, _, y in sub) > hits[title][0][2]
    for name in figures.legend_entries(fig):
        found = [t for t in texts if t[0] == name]
        assert found, name
        assert all(0 < y < h for _, _, y in found), (name, found)


def test_slide_size_rejects_unknown_sizes():
    assert figures.slide_size((1280, 720)) == (1280, 720)
    with pytest.raises(ValueError, match="size"):
        figures.slide_size("poster")
    with pytest.raises(ValueError, match="size"):
        figures.slide_size((10, 10))


def test_importing_the_figures_changes_no_renderer():
    """No side effect at import: the renderers' configs are changed only by apply_display_config()."""
    import subprocess
    import sys

    code = ("import plotly.io as pio; before = {n: dict(getattr(pio.renderers[n], 'config', None) or {}) "
            "for n in pio.renderers}; from dspark_lab.views import figures, panel, report; "
            "after = {n: dict(getattr(pio.renderers[n], 'config', None) or {}) for n in pio.renderers}; "
            "print(before == after, pio.renderers['notebook'].config.get('showSendToCloud'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "None"], out


def test_no_share_button_anywhere(data):  # noqa: F811
    import plotly.io as pio

    rows, tl, headers, _ = data
    assert figures.PLOTLY_CONFIG["showSendToCloud"] is False
    assert "sendChartToCloud" in figures.PLOTLY_CONFIG["modeBarButtonsToRemove"]
    # notebook display (the renderers that take a config), once the notebook's first cell has run
    figures.apply_display_config()
    for name in ("notebook", "notebook_connected", "browser", "iframe"):
        assert pio.renderers[name].config["showSendToCloud"] is False, name
    # the report's HTML
    from dspark_lab.results import Runs
    from dspark_lab.views import report

    runs = Runs(rows, tl, headers)
    doc = report.build_html(runs)
    assert '"showSendToCloud": false' in doc and '"sendChartToCloud"' in doc
    # the panel's figures: the recorded panel's boxes draw plotly's mime JSON with the config, a
    # live panel's FigureWidgets carry it per widget
    pytest.importorskip("ipywidgets")
    from dspark_lab.results.viewmodels.backend import RecordedBackend
    from dspark_lab.views import panel

    p = panel.Panel(RecordedBackend(runs))
    for box in p.figs.values():
        assert figures.figure_bundle(box.figure)[figures.FigureBox.MIME]["config"]["showSendToCloud"] is False
    assert figures.panel_figure("comparison", 300)._config["showSendToCloud"] is False


def test_long_legends_go_below_the_plot_with_room_for_every_row(data):  # noqa: F811
    fig = figures.sweep(data[0])
    names = figures.legend_entries(fig)
    rows = figures.legend_rows(names, (fig.layout.width or figures.DEFAULT_WIDTH_PX) - 80)
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.yref == "container"
    assert fig.layout.margin.b >= 70 + figures.LEGEND_ROW_PX * rows
    # laying out again changes nothing (the panel and export call it on laid-out figures)
    again = figures.fit_layout(fig.__class__(fig))
    assert again.layout.height == fig.layout.height and again.layout.margin.t == fig.layout.margin.t


class _FlakyFigure:
    """Stands in for a go.Figure whose write_image fails with `errors` first, then writes."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), []

    def write_image(self, path, **kwargs):
        self.calls.append((path, kwargs))
        if self.errors:
            raise self.errors.pop(0)


def test_kaleido_not_yet_loaded_gets_one_more_try(tmp_path):
    from dspark_lab.views.figures import render

    fig = _FlakyFigure(RuntimeError("ReferenceError: kaleido_scopes is not defined at <anonymous>:1:26"))
    render._write_image(fig, tmp_path / "a.png", format="png")
    assert [c[0] for c in fig.calls] == [str(tmp_path / "a.png")] * 2 and fig.calls[1][1] == {"format": "png"}


def test_kaleido_not_yet_loaded_twice_and_other_errors_are_raised(tmp_path):
    from dspark_lab.views.figures import render

    twice = _FlakyFigure(*[RuntimeError("kaleido_scopes is not defined")] * 2)
    with pytest.raises(RuntimeError, match="kaleido_scopes"):
        render._write_image(twice, tmp_path / "a.png")
    assert len(twice.calls) == 2
    other = _FlakyFigure(ValueError("Invalid format 'bmp'"))
    with pytest.raises(ValueError, match="bmp"):
        render._write_image(other, tmp_path / "a.bmp")
    assert len(other.calls) == 1  # no second try for the figure's own error


def test_export_renders_every_format_in_one_kaleido_call(data, tmp_path, monkeypatch):
    """Each kaleido call starts a Chromium of its own: export hands all its formats to one call, at the
    slide size, and never renders a format alone."""
    import plotly.io as pio

    calls = []
    monkeypatch.setattr(pio, "write_images", lambda figs, files, **kw: calls.append((figs, files, kw)))
    monkeypatch.setattr(type(figures.sweep(data[0])), "write_image", lambda *a, **k: pytest.fail("one format alone"))
    paths = figures.export(figures.sweep(data[0]), tmp_path / "fig", formats=("png", "svg", "pdf"))
    assert [p.name for p in paths] == ["fig.png", "fig.svg", "fig.pdf"]
    (figs, files, kw), = calls
    assert files == [str(p) for p in paths] and kw["format"] == ["png", "svg", "pdf"] and len(figs) == 3
    assert (kw["width"], kw["height"]) == figures.SLIDE_SIZES["slide"]
