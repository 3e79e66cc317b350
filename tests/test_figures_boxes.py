"""Every figure the notebooks and the report draw, drawn in Chromium at notebook size and as a slide:
no text outside its figure, no two texts over each other (tests/figure_boxes.py measures the boxes).
Also, without a browser, the layout rules those boxes follow (margins grown for long or rotated tick
labels, the note placed below them)."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest

from dspark_lab.views.figures import hazards as hazard_figures
from figure_boxes import problems

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]


def notebook_figures() -> list[tuple[str, go.Figure]]:
    """(name, figure) as the notebooks and the report draw them from the recorded data in data/."""
    from dspark_lab.gallery import report as gallery_report
    from dspark_lab.results import Runs
    from dspark_lab.results.analyses import card as card_results
    from dspark_lab.results.viewmodels import inspect_view, picks
    from dspark_lab.results.viewmodels.backend import RecordedBackend
    from dspark_lab.results.record import inspect_record
    from dspark_lab.views import figures, report
    from dspark_lab.views.figures import card as card_figures
    from dspark_lab.views.figures import ranks as figures_ranks

    runs = Runs.load()
    b = RecordedBackend(runs)
    point = b.get(b.defaults())
    rows, tl = point.rows, point.timelines
    out = [("sync_counts", figures.sync_counts(rows)),
           ("timeline", figures.timeline(tl, rows, strategies_shown=["device_direct", "persistent_fill"])),
           ("step_breakdown", figures.step_breakdown(rows)), ("sync_cost", figures.sync_cost(rows)),
           ("strategy_comparison", figures.strategy_comparison(rows))]
    ep1 = picks.ep1_point(runs)
    if not ep1.empty:
        out.append(("strategy_comparison_ep1", figures.strategy_comparison(ep1.rows)))
    real = picks.real_ep(runs)
    if not real.empty:
        out += [("per_rank_breakdown", figures_ranks.per_rank_breakdown(real.rows, real.dispatch)),
                ("who_waits", figures_ranks.who_waits(real.rows, real.dispatch))]
    side = b.get({**b.defaults(), "run": None})  # the runs side by side
    out += [("comparison_side_by_side", figures.strategy_comparison(side.rows)),
            ("breakdown_side_by_side", figures.step_breakdown(side.rows)), ("sync_cost_side_by_side", figures.sync_cost(side.rows))]
    chosen = runs.subset(runs.default_selection())
    pid = report.featured_points(chosen)[0]
    out.append(("comparison_chosen", figures.strategy_comparison(chosen.rows[chosen.rows.point_id == pid])))
    out.append(("breakdown_chosen", figures.step_breakdown(chosen.rows[chosen.rows.point_id == pid])))
    grid = runs.subset(runs.grid_runs())
    out.append(("sweep", figures.sweep(grid.ok, workload=chosen.reference().workload.iloc[0])))
    cards = card_results.recorded()
    if cards:
        mine = max(cards, key=lambda c: str(c.get("recorded", "")))
        out.append(("card", card_figures.card(mine)))
        others = [c for c in cards if c is not mine]
        if others:
            out.append(("card_pair", card_figures.card_pair(mine, others[-1])))
    pair = inspect_record.recorded_pair("scalar_item")
    if pair:
        view = inspect_view.view(pair[0])
        out += [("inspect_timeline", figures.timeline(view)), ("inspect_breakdown", figures.step_breakdown(view)),
                ("inspect_syncs", figures.sync_counts(view)),
                ("inspect_diff_breakdown", figures.step_breakdown(inspect_view.view(*pair)))]
    gb = gallery_report.backend()
    fig = getattr(gb, "figure", None)
    if callable(fig):
        out.append(("gallery", fig(gb.names()[0])))
    hz = _recorded_hazard_curves()
    if hz:
        out.append(("hazard_curves", hazard_figures.curves(hz)))
    return out


def _recorded_hazard_curves():
    """The newest hazards record that holds a curve, as notebook 04 draws it (None: no such record)."""
    from dspark_lab.results.analyses import hazards

    found = [h for h in hazards.recorded() if h.get("window") or h.get("pageable_race")]
    return found[-1] if found else None


PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><script>{js}</script></head>
<body style="margin:0">{divs}</body></html>"""


def _page(figs: list[tuple[str, go.Figure]], tmp_path: Path) -> Path:
    from plotly.offline import get_plotlyjs

    # Each in a box of the width a figure without its own is laid out for (a notebook's output area is
    # about that wide), so labels that only fit a wider page are caught.
    from dspark_lab.views.figures import DEFAULT_WIDTH_PX

    divs = "".join(f"<div style='width:{max(DEFAULT_WIDTH_PX, f.layout.width or 0)}px'>"
                   f"{f.to_html(full_html=False, include_plotlyjs=False, div_id=name)}</div>" for name, f in figs)
    path = tmp_path / "figures.html"
    path.write_text(PAGE.format(js=get_plotlyjs(), divs=divs))
    return path


def draw_and_measure(figs, tmp_path: Path, screenshots: Path | None = None) -> dict:
    from playwright.sync_api import sync_playwright

    path = _page(figs, tmp_path)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1700, "height": 1000})
            page.goto(path.as_uri())
            page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {len(figs)}",
                                   timeout=120_000)
            page.wait_for_timeout(300)  # plotly's autorange of ticks settles on the next frame
            found = problems(page)
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                for name, _ in figs:
                    page.locator(f"#{name}").screenshot(path=str(screenshots / f"{name}.png"))
        finally:
            browser.close()
    return found


@pytest.fixture(scope="module")
def figs():
    return notebook_figures()


browser = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")


@browser
@pytest.mark.browser
def test_every_notebook_figure_has_its_text_inside_and_apart(figs, tmp_path):
    pytest.importorskip("playwright.sync_api")
    assert draw_and_measure(figs, tmp_path) == {}


@browser
@pytest.mark.browser
def test_every_figure_as_a_slide_has_its_text_inside_and_apart(figs, tmp_path):
    pytest.importorskip("playwright.sync_api")
    from dspark_lab.views.figures.render import slide_figure

    assert draw_and_measure([(n, slide_figure(f)) for n, f in figs], tmp_path) == {}


# --- the same rules without a browser: the layout the figures ask for ----------------------------
def _bars(n_runs: int, strategies=("device_direct", "non_blocking", "on_demand", "on_demand_pinned", "persistent_fill")):
    from dspark_lab.views.figures.layout import add_note, titled

    fig = go.Figure()
    runs = [f"H200 · default sweep · 11-30 0{i}:00" for i in range(n_runs)]
    x = [[r for r in runs for _ in strategies], [s for _ in runs for s in strategies]] if n_runs > 1 else list(strategies)
    fig.add_bar(x=x, y=[1.0] * (len(strategies) * n_runs), name="bars")
    add_note(fig, "4 disturbed trials left out")
    return titled(fig, "Step-time breakdown", "NVIDIA H200 · driver 580 · torch 2.11")


def test_category_labels_that_do_not_fit_stand_upright_with_the_note_below_them():
    from dspark_lab.views.figures.layout import CHAR_PX

    few, many = _bars(1), _bars(4)
    assert few.layout.xaxis.tickangle == 0
    assert many.layout.xaxis.tickangle == -90
    depth = len("on_demand_pinned") * CHAR_PX
    plot_h = many.layout.height - many.layout.margin.t - many.layout.margin.b
    (note,) = [a for a in many.layout.annotations if a.name == "dspark-note"]
    # the note's bottom edge (yanchor bottom), in px under the plot: under the upright labels and the
    # run row, inside the figure
    note_bottom_px = -note.y * plot_h
    assert note.yanchor == "bottom" and note_bottom_px - 16 >= depth + 12 + 28
    assert note_bottom_px <= many.layout.margin.b


def test_a_slide_breaks_long_legend_names_and_y_titles_but_not_the_figure_it_came_from():
    from dspark_lab.views.figures.render import slide_figure

    fig = go.Figure(go.Bar(x=["a"], y=[1], name="GPU: idle a sync caused (waiting for the host from the sync "
                                                 "until the host is ahead again)"))
    fig.update_layout(yaxis_title="ms per step (left bar: host thread, right bar: GPU stream)")
    from dspark_lab.views.figures.layout import titled
    titled(fig, "t", "fp")
    slide = slide_figure(fig)
    assert "<br>" in slide.data[0].name and "<br>" not in fig.data[0].name
    assert "<br>" in slide.layout.yaxis.title.text


def test_sync_labels_sit_level_after_their_bar_and_crosses_stand_apart_from_every_run_colour(data):
    from dspark_lab.results.viewmodels.backend import RecordedBackend
    from dspark_lab.results import Runs
    from dspark_lab.views import figures
    from dspark_lab.views.figures.style import RUN_COLORS

    rows, tl, headers, _ = data
    b = RecordedBackend(Runs(rows, tl, headers))
    point = b.get({**b.defaults(), "run": None})
    syncs = {t.name: t for t in figures.timeline(point.timelines, point.rows).data}[figures.TIMELINE_NAMES["sync"]]
    assert syncs.textposition == "outside" and syncs.textangle == 0 and syncs.cliponaxis is False
    crosses = [t for t in figures.strategy_comparison(point.rows).data if t.type == "scatter"]
    assert all(t.marker.color not in RUN_COLORS for t in crosses)


def test_the_card_fits_the_panels_width():
    from dspark_lab.views.figures import DEFAULT_WIDTH_PX
    from dspark_lab.views.figures import card as card_figures
    from helpers import synthetic_card

    assert card_figures.card(synthetic_card()).layout.width <= DEFAULT_WIDTH_PX
    assert card_figures.card_pair(synthetic_card(), synthetic_card(gpu="B")).layout.width <= DEFAULT_WIDTH_PX


def test_the_hazard_curves_fit_the_panels_width():
    """Notebook 04's race-window figure: no wider than the width every other figure is laid out for, so
    it stays inside its output area wherever the panel does."""
    from dspark_lab.views.figures import DEFAULT_WIDTH_PX

    rec = {"fingerprint": {"gpu": "GPU A"}, "window": [{"delay_us": d, "wrong": w, "n": 10} for d, w in ((0, 9), (5, 2), (50, 0))],
           "pageable_race": [{"bytes": b, "raced": r, "n": 10} for b, r in ((4096, 0), (1 << 20, 3))]}
    fig = hazard_figures.curves(rec)
    assert fig.layout.width is None or fig.layout.width <= DEFAULT_WIDTH_PX
    hz = _recorded_hazard_curves()
    if hz:
        assert (hazard_figures.curves(hz).layout.width or 0) <= DEFAULT_WIDTH_PX


def test_run_labels_wider_than_their_group_of_bars_are_broken_at_their_dots_for_the_notebook_and_the_slide():
    from dspark_lab.views.figures.render import slide_figure

    fig = _bars(4)  # 4 runs of 5 strategies at the default width: about 31 characters a group
    given = [f"H200 · default sweep · 11-30 0{i}:00" for i in range(4)]
    shown = list(dict.fromkeys(fig.data[0].x[0]))
    assert shown == [g.replace(" · 11-30", "<br>11-30") for g in given]
    assert fig.layout.meta["dspark_outer_labels"] == dict(zip(shown, given))
    one_line = _bars(1)
    assert "<br>" not in str(one_line.data[0].x) and "dspark_outer_labels" not in (one_line.layout.meta or {})
    # the slide breaks the labels as given (not the notebook's lines) for its own width and text size
    slide = slide_figure(fig)
    back = slide.layout.meta["dspark_outer_labels"]
    assert [back[s] for s in dict.fromkeys(slide.data[0].x[0])] == given
