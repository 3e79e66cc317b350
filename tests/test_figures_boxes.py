"""Every figure the notebooks and the report draw, drawn in Chromium at notebook size and as a slide:
no text outside its figure, no two texts over each other (tests/figure_boxes.py measures the boxes).
Also, without a browser, the layout rules those boxes follow (margins grown for long or rotated tick
labels, the note placed below them)."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest

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
            ("breakdown_side_by_side", figures.step_breakdown(side.rows))]
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
    return out


PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><script>{js}</script></head>
<body style="margin:0">{divs}</body></html>"""


def _page(figs: list[tuple[str, go.Figure]], tmp_path: Path) -> Path:
    from plotly.offline import get_plotlyjs

    divs = "".join(f"<div>{f.to_html(full_html=False, include_plotlyjs=False, div_id=name)}</div>" for name, f in figs)
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
