"""The report's platform-card and hazards sections: each machine's latest card drawn with its
threshold and the seeds' claims in words, two machines side by side, and the hazard counts.
Everything comes from the recorded files under data/machines/ (results.analyses.card, results.analyses.hazards)."""
from __future__ import annotations

import html
from typing import Callable, Optional, Sequence

import pandas as pd

from dspark_lab.results.analyses import card as card_results
from dspark_lab.results.analyses import card_host
from dspark_lab.results.analyses import card_primitives as prim_results
from dspark_lab.results.analyses import hazards as hazards_results
from dspark_lab.views.figures import card as card_figures
from dspark_lab.views.figures import hazards as hazard_figures


def latest_per_machine(records: Sequence[dict]) -> list[dict]:
    """The most recent record of each GPU + driver, newest machine first."""
    best: dict = {}
    for r in records:
        fp = r.get("fingerprint", {})
        key = (str(fp.get("gpu")), str(fp.get("driver")))
        if key not in best or str(r.get("recorded", "")) > str(best[key].get("recorded", "")):
            best[key] = r
    return sorted(best.values(), key=lambda r: str(r.get("recorded", "")), reverse=True)


def card_sections(fig_html: Callable, cards: Optional[Sequence[dict]] = None,
                  hazard_records: Optional[Sequence[dict]] = None) -> list[str]:
    """HTML parts: the cards (default: every card recorded under data/machines/) and the hazards."""
    esc = html.escape
    cards = latest_per_machine(card_results.recorded() if cards is None else cards)
    hazard_records = latest_per_machine(hazards_results.recorded() if hazard_records is None else hazard_records)
    if not cards and not hazard_records:
        return []
    parts = ["<h2>Platform cards: what every kind of copy does, by size and source</h2>",
             f"<p class='muted rule'>{esc(card_results.VERDICT_RULE)}</p>"]
    for c in cards:
        f = card_results.frame(c)
        parts.append(f"<h3>{esc(card_results.label(c))}</h3>")
        parts.append(fig_html(card_figures.card(c)))
        words = [card_results.threshold_in_words(card_results.wait_threshold(f)),
                 card_results.threshold_in_words(card_results.wait_threshold(f, "d2h", "into_pageable_nb"))]
        parts.append("<ul>" + "".join(f"<li>{esc(w)}.</li>" for w in words)
                     + "".join(f"<li>{esc(w.lstrip('- '))}</li>" for w in card_results.claims_in_words(c)[1:]) + "</ul>")
        parts += primitives_section(c)
    if len(cards) >= 2:
        a, b = cards[0], cards[1]
        parts.append("<h3>Two machines side by side</h3>")
        lines = card_results.compare_lines(a, b) + prim_results.compare_lines(a, b)
        parts.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>")
        parts.append(fig_html(card_figures.card_pair(a, b)))
    for h in hazard_records:
        fp = h.get("fingerprint", {})
        parts.append(f"<h2>What each fix can break (wrong values under host run-ahead), {esc(str(fp.get('gpu')))}, "
                     f"driver {esc(str(fp.get('driver')))}, {esc(str(h.get('recorded', ''))[:10])}</h2>")
        parts.append(f"<p class='muted'>{h.get('steps')} steps per form, {h.get('queued_ms_per_step')} ms of GPU work "
                     "queued before each step; checked on the GPU's side after the loop.</p>")
        parts.append(pd.DataFrame(hazards_results.table(h)).to_html(index=False, escape=True, border=0))
        parts += [f"<p><b>unexpected:</b> {esc(s)}</p>" for s in hazards_results.surprises(h)]
        parts += hazard_stories(fig_html, h)
    return parts


def hazard_stories(fig_html: Callable, h: dict) -> list[str]:
    """The race's window and the pageable threshold (where recorded), and each real-world story
    beside what this machine measured for it."""
    esc = html.escape
    parts = []
    if h.get("window") or h.get("pageable_race"):
        parts.append("<h3>The race's window, measured</h3>")
        parts.append("<ul>" + "".join(f"<li>{esc(w)}.</li>" for w in hazards_results.curves_in_words(h)) + "</ul>")
        parts.append(fig_html(hazard_figures.curves(h)))
    parts.append("<h3>The hazards as they happened</h3>")
    parts.append(hazards_results.stories(h).to_html(index=False, escape=True, border=0))
    return parts


def primitives_section(card: dict) -> list[str]:
    """HTML parts: the card's host, its wait/launch cells (the rule once, the table, the graph fits) and
    the published anchors beside them, in a table of their own; [] for a card without those cells."""
    esc = html.escape
    parts = [f"<p class='muted'>host: {esc(card_host.host_in_words(card))}</p>"]
    try:
        t = prim_results.table(card)
    except ValueError as e:  # a damaged primitives field: the copy cells above still stand
        return parts + [f"<p><b>wait/launch cells not shown:</b> {esc(str(e))}</p>"]
    if t.empty:
        return parts
    parts += [f"<h4>What each way of waiting and launching costs here</h4><p class='muted rule'>"
              f"{esc(prim_results.PRIMITIVE_RULE)} Cells: · cheap, h costs host time, w waits (with the process "
              "CPU share of the wait), ~ at the rule's edge; median [fastest-slowest] µs per call.</p>",
              t.to_html(escape=True, border=0)]
    fits = prim_results.graph_fits_in_words(prim_results.frame(card))
    parts.append("<ul>" + "".join(f"<li>{esc(w)}.</li>" for w in fits) + "</ul>")
    parts.append("<p class='muted'>Published anchors (their sources' own figures and settings, set beside this "
                 "card's cells, not measured here):</p>")
    parts.append(prim_results.anchors_beside(card).to_html(index=False, escape=True, border=0))
    return parts
