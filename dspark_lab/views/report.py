"""A standalone HTML report of recorded runs: the headline with its rule, machines, key
comparisons in words, the figures.

`build_html(runs)` returns one HTML document with plotly.js embedded inline, so the file opens
offline, from disk, with no server. Every number comes from `results.Runs` (the same numbers as
the CLI, the panel and the notebooks); every string from a run file is HTML-escaped.
"""
from __future__ import annotations

import html
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from dspark_lab.results.facts import wait_kinds
from dspark_lab.results.viewmodels import frames
from dspark_lab.results.record.output import write_text_safely
from dspark_lab.results.viewmodels.point_view import PointView, point_view
from dspark_lab.results.query.runs import MAX_COMPARED, Runs, failed_rows, point_label
from dspark_lab.results.query.headline import DETAIL
from dspark_lab.results.facts import strategy_table
from dspark_lab.results.facts.strategy_table import BASELINE, strategy_order
from dspark_lab.views import figures
from dspark_lab.views.card_report import card_sections
from dspark_lab.views.source_lines import sync_site_line


def _runs_of(runs) -> Runs:
    """A Runs, or rows as a notebook holds them (one measurement, e.g. a live point) as a Runs."""
    return runs if isinstance(runs, Runs) else Runs(runs)


def sync_sites(point) -> pd.DataFrame:
    """Per (run, strategy) of one point (its rows or its PointView): syncs per step, host blocked ms,
    GPU idle after the sync, step time, the recorded sync site and the line of code it names now
    (source_lines.sync_site_line: the code, or why it cannot be shown)."""
    view = point if isinstance(point, PointView) else point_view(point, what="sync_sites")
    agg = view.per_strategy(["syncs_per_step", "host_blocked_ms", "gpu_idle_after_sync_ms", "step_ms"])
    site = view.ok.groupby(["run_id", "strategy"])["sync_site"].first()
    agg["sync_site"] = [site.get((r, s), "") or "" for r, s in zip(agg["run_id"], agg["strategy"])]
    resolved = [sync_site_line(s) or {} for s in agg["sync_site"]]
    agg["code"] = [r.get("code") or r.get("note") or "" for r in resolved]
    return agg


def featured_points(runs) -> list[str]:
    """Point ids to present: the reference point (results.REFERENCE) and its EP-1 twin."""
    return list(dict.fromkeys(pid for _, pid in _runs_of(runs).featured_points()))


def _num(v) -> str:
    """2 decimals, or "n/a" where the run did not record the value."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if f != f else f"{f:.2f}"


def comparison_items(runs, point_ids: Optional[Iterable[str]] = None, baseline: str = BASELINE) -> list[dict]:
    """Per (run, point): {"head": what the baseline costs, "lines": what each other strategy buys}.
    Each run's own trials, paired by round (Runs.compare)."""
    runs = _runs_of(runs)
    ok = runs.ok
    point_ids = list(point_ids) if point_ids is not None else featured_points(runs)
    labels = runs.labels()
    out = []
    for pid in point_ids:
        pt = ok[ok["point_id"] == pid]
        for rid, g in pt.groupby(frames.run_key(pt), sort=False):
            if baseline not in set(g["strategy"]):
                continue
            b = g[g["strategy"] == baseline].iloc[0]
            summ = runs.summary(g)
            base = summ[summ["strategy"] == baseline].iloc[0]
            head = (f"{labels.get(rid, rid)}, {point_label(g.iloc[0])}: "
                    f"{baseline} takes {base['median_ms']:.2f} ms per step (median of {base['trials']} trials) with "
                    f"{_num(b['syncs_per_step'])} host-blocking syncs per step; the host sits blocked "
                    f"{_num(b['host_blocked_ms'])} ms of each profiled step and the GPU starves "
                    + (f"{_num(b['gpu_idle_sync_caused_ms'])} ms because of the sync (every gap until the host is ahead again)"
                       if _num(b.get('gpu_idle_sync_caused_ms')) != "n/a" else
                       f"{_num(b['gpu_idle_after_sync_ms'])} ms right after the sync (older run: first gap only)"))
            if b.get("sync_site"):
                head += f" (sync at {b['sync_site']})"
            if wait_kinds.charges_text(b.get("wait_charges")):
                head += f"; by kind of wait: {wait_kinds.charges_text(b.get('wait_charges'))}"
            lines = []
            for s in strategy_order(g["strategy"]):
                if s == baseline:
                    continue
                c = runs.compare(g, s, baseline)
                r = g[g["strategy"] == s].iloc[0]
                lines.append(f"{c['verdict']}; {_num(r['syncs_per_step'])} syncs per step, "
                             f"host blocked {_num(r['host_blocked_ms'])} ms")
            out.append({"run_id": rid, "point_id": pid, "fingerprint": frames.fingerprint_label(g),
                        "head": head, "lines": lines})
    return out


def key_comparisons(runs, point_ids: Optional[Iterable[str]] = None, baseline: str = BASELINE) -> list[str]:
    """Sentences, one per (run, point): what the baseline costs and what each strategy buys."""
    return [it["head"] + ". " + ". ".join(it["lines"]) + ("." if it["lines"] else "")
            for it in comparison_items(runs, point_ids, baseline)]


def cross_run_comparisons(runs, baseline: str = BASELINE) -> list[str]:
    """For featured points recorded in several runs: per run, the baseline against its best fix."""
    runs = _runs_of(runs)
    ok = runs.ok
    if ok.empty or ok["run_id"].nunique() < 2:
        return []
    out = []
    for pid in featured_points(runs):
        pt = ok[ok["point_id"] == pid]
        if pt["run_id"].nunique() < 2:
            continue
        bits = [f"on {c['label']}: {c['verdict']}" for c in runs.cross_run(pt, baseline)]
        if bits:
            out.append(f"{point_label(pt.iloc[0])}: " + "; ".join(bits) + ".")
    return out


# -- the document --------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1250px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em} h2{margin-top:2em;border-bottom:1px solid #ccc} table{border-collapse:collapse;font-size:.9em}
td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left} th{background:#f4f4f4}
li{margin:.4em 0} code{background:#f4f4f4;padding:0 .2em} .muted{color:#666;font-size:.9em}
.headline p.detail{margin:.15em 0 .15em 1.5em}
"""


# A field longer than this is cut with a note before it reaches the HTML: a 200 MB error string
# recorded in a run file once made a 205 MB report; the run file keeps the whole text.
MAX_FIELD_CHARS = 2000


def cut_text(value, limit: int = MAX_FIELD_CHARS):
    """`value` itself, or a string longer than `limit` cut to it with a note saying how much was left out."""
    if not isinstance(value, str) or len(value) <= limit:
        return value
    return f"{value[:limit]}… [{len(value) - limit} more characters cut; the run file holds the whole text]"


def _table(df: pd.DataFrame) -> str:
    cut = df.copy()
    for c in cut.columns:
        if not pd.api.types.is_numeric_dtype(cut[c]):  # object or string columns
            cut[c] = cut[c].map(cut_text)
    return cut.to_html(index=False, escape=True, border=0, na_rep="")


MAX_WARNINGS_SHOWN = 50  # problems listed in the report; the CLI prints every one


def chosen_runs(runs: Runs, compare=None, max_compared: int = MAX_COMPARED) -> list[str]:
    """The run ids the report draws: `compare` (run ids, or a Runs from Runs.select) or the default
    selection (the latest run of each machine, then the most recent), at most `max_compared`."""
    if not isinstance(max_compared, int) or isinstance(max_compared, bool) or max_compared < 1:
        raise ValueError(f"max_compared must be a positive integer, got {max_compared!r}")
    if compare is None:
        return runs.default_selection(max_compared)
    ids = compare.run_ids() if isinstance(compare, Runs) else [str(r) for r in ([compare] if isinstance(compare, str) else compare)]
    known, wanted = set(runs.run_ids()), set(ids)
    unknown = [r for r in ids if r not in known]
    if unknown:
        raise ValueError(f"compare: run {unknown[0]!r} is not among the loaded runs")
    return [r for r in runs.ranked_run_ids() if r in wanted][:max_compared]


def build_html(runs: Runs, *, title: str = "dspark-lab: how num_token_non_padded is made, measured",
               compare=None, max_compared: int = MAX_COMPARED, cards=None, hazard_records=None,
               cpu_runs: bool = False) -> str:
    """The standalone report of a results.Runs as one HTML string (plotly.js inline, once; opens
    offline). Figures and comparisons are drawn for the chosen runs only (`compare`, else the
    default selection: chosen_runs); every run is listed in the tables, so the file grows with what
    it shows, not with the number of runs loaded. The platform cards and hazard records are those
    recorded under data/machines/ unless given (views.card_report). `cpu_runs`: the headline
    headlines CPU-only runs too (Runs.headline), else leaves them out and names them."""
    if not isinstance(runs, Runs):
        raise TypeError(f"build_html takes a results.Runs (Runs.load(), or Runs(rows, timelines, headers)), "
                        f"got {type(runs).__name__}")
    ids = chosen_runs(runs, compare, max_compared) if runs.run_ids() else []
    shown = runs.subset(ids) if ids else runs
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{esc(title)}</h1>"]
    parts += _preface(runs, ids, compare, max_compared)
    parts += _headline(runs, cpu_runs)
    parts += _tables(runs, shown)
    parts += _comparisons(shown)
    fig_html = _FigureHtml()
    parts += _points(shown, fig_html)
    parts += _sweeps(runs, shown, fig_html, chosen=compare is not None)
    parts += card_sections(fig_html, cards, hazard_records)
    parts += _failed(shown)
    parts += _all_runs(runs, ids)
    parts.append("</body></html>")
    return "\n".join(parts)


class _FigureHtml:
    """A figure's HTML div; plotly.js is inlined with the first figure only (the file stays offline)."""

    def __init__(self):
        self.first = True

    def __call__(self, fig) -> str:
        out = fig.to_html(full_html=False, include_plotlyjs=self.first, config=figures.PLOTLY_CONFIG)
        self.first = False
        return out


def _preface(all_runs: Runs, ids: list, compare, max_compared: int) -> list[str]:
    """When it was made and from what, and which runs the figures compare."""
    esc = html.escape
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    n_all, n_machines = len(all_runs.run_ids()), len(all_runs.machines())
    labels = all_runs.labels()
    how = ("chosen" if compare is not None else
           "by default: the headline run of each machine, then the newest other runs that recorded its point")
    return [f"<p class='muted'>Generated {esc(now)} from {n_all} recorded run(s) on {n_machines} machine(s) "
            f"({len(all_runs.rows)} rows). Every number below comes from these recorded runs; each figure "
            "names the GPU, driver, torch and date it shows.</p>",
            f"<p class='compared'>Compared in the figures: {len(ids)} of {n_all} run(s) ({esc(how)}; at most "
            f"{max_compared}): " + ", ".join(f"<b>{esc(labels.get(r, r))}</b>" for r in ids) + ". "
            + ("Every run is listed under <a href='#all-runs'>All runs</a>; choose others with "
               "<code>dspark-lab report --gpu/--driver/--torch/--since/--until/--name</code> or "
               "<code>Runs.select(...)</code>.</p>" if n_all > len(ids) else "</p>")]


def _headline(all_runs: Runs, cpu_runs: bool = False) -> list[str]:
    """The headline over every run, as the CLI and the notebooks print it (per machine its first line,
    the rest indented below it), and the problems met while loading."""
    esc = html.escape
    head = all_runs.headline(cpu_runs=cpu_runs)
    lines = [f"<p class='detail'>{esc(line.strip())}</p>" if line.startswith(DETAIL) else f"<p><b>{esc(line)}</b></p>"
             for line in head.lines()]
    parts = ["<h2>Headline</h2><div class='headline'>", "".join(lines),
             f"<p class='muted rule'>{esc(head.rule)}</p></div>"]
    if all_runs.warnings:
        parts.append("<h2>Skipped while loading</h2><ul class='skipped'>")
        parts.append("".join(f"<li><code>{esc(cut_text(w))}</code></li>" for w in all_runs.warnings[:MAX_WARNINGS_SHOWN]))
        if len(all_runs.warnings) > MAX_WARNINGS_SHOWN:
            parts.append(f"<li>… and {len(all_runs.warnings) - MAX_WARNINGS_SHOWN} more (`dspark-lab report` "
                         "prints every one)</li>")
        parts.append("</ul>")
    return parts


def _tables(all_runs: Runs, shown: Runs) -> list[str]:
    st = pd.DataFrame([{"strategy": r.name, "what it does": r.description, "from": r.source}
                       for r in strategy_table.rows()])  # the table now: registered strategies too
    return ["<h2>Machines</h2>", _table(all_runs.machines()), "<h2>Runs compared</h2>", _table(shown.table()),
            "<h2>Strategies</h2>", _table(st)]


def _featured(runs: Runs) -> list[str]:
    return list(dict.fromkeys(p for _, p in runs.featured_points()))


def _comparisons(runs: Runs) -> list[str]:
    esc = html.escape
    parts = ["<p><b>No successful recorded points to show.</b></p>"] if runs.ok.empty else []
    parts.append("<h2>Key comparisons</h2><ul>")
    for it in comparison_items(runs, _featured(runs)):
        sub = "".join(f"<li>{esc(line)}</li>" for line in it["lines"])
        parts.append(f"<li>{esc(it['head'])}.<ul>{sub}</ul></li>")
    for line in cross_run_comparisons(runs):
        parts.append(f"<li>{esc(line)}</li>")
    parts.append("</ul><p class='muted'>Percentages: median over paired trials of the ratio of step times, "
                 "95% bootstrap confidence interval; an interval containing 0 is reported as no measurable "
                 "difference.</p>")
    return parts


def _runs_drawn(runs: Runs, drawn) -> list[str]:
    """A point's figures draw the compared runs that hold it: where that is fewer than the runs the
    preface counts, how many and which are not drawn (none: nothing to say)."""
    compared = runs.run_ids()
    left = [r for r in compared if r not in set(map(str, drawn))]
    if not left:
        return []
    labels = runs.labels()
    return [f"<p class='muted'>Drawn here: {len(compared) - len(left)} of the {len(compared)} compared runs; "
            f"without this point: {html.escape('; '.join(labels.get(r, r) for r in left))}.</p>"]


def _points(runs: Runs, fig_html: _FigureHtml) -> list[str]:
    """Per featured point: where the host blocks, the point's figures, each run's timeline."""
    parts = []
    ok = runs.ok
    for pid in _featured(runs):
        view = point_view(ok[ok["point_id"] == pid], what="the report")
        parts.append(f"<h2>{html.escape(view.point)}</h2>")
        parts += _runs_drawn(runs, view.run_ids)
        sites = sync_sites(view)
        sites = sites[sites["sync_site"] != ""]
        if not sites.empty:
            parts.append("<p>Where the host blocks (first sync outside the by-design readback):</p>")
            show = sites.assign(run=sites["run_id"].map(runs.labels()))[
                ["run", "strategy", "syncs_per_step", "host_blocked_ms", "sync_site", "code"]]
            parts.append(_table(show.round(3)))
        for make in (figures.strategy_comparison, figures.sync_counts, figures.step_breakdown):
            parts.append(fig_html(make(view)))
        for rid in view.run_ids:
            t = runs.timeline(rid, pid)  # this run's segments only, read now
            if not t.empty:
                parts.append(fig_html(figures.timeline(t, view.ok[view.ok["run_id"] == rid], point_id=pid)))
    return parts


def _sweeps(runs: Runs, shown: Runs, fig_html: _FigureHtml, chosen: bool) -> list[str]:
    """The compared runs that hold a grid; when the default selection holds none (one-point runs of
    the headline's point), the latest grid runs (Runs.grid_runs), said so."""
    ids = [r for r in shown.run_ids() if shown.grid_size(r) > 1]
    note = ""
    if not ids and not chosen:
        ids = runs.grid_runs()
        note = (f"<p class='muted'>The compared runs hold one point each; the sweeps are the {len(ids)} most recent "
                f"grid run(s): {html.escape('; '.join(runs.label_of(r) for r in ids))}.</p>")
    if not ids:
        return []
    grid = runs.subset(ids)
    parts = ["<h2>Sweeps</h2>"] + ([note] if note else [])
    for (model, wl), g in grid.ok.groupby(["model", "workload"], sort=False):
        if g["point_id"].nunique() > 1:
            parts.append(fig_html(figures.sweep(g, workload=wl, model=model)))
    return parts


def _failed(runs: Runs) -> list[str]:
    bad = failed_rows(runs.rows)
    if bad.empty:
        return []
    cols = [c for c in ("run_label", "gpu", "ep_size", "batch_size", "gamma", "workload", "strategy", "error") if c in bad]
    return ["<h2>Failed points</h2>", _table(bad.drop_duplicates(["point_id", "strategy", "run_id"])[cols])]


def _all_runs(all_runs: Runs, ids: list) -> list[str]:
    parts = [f"<h2 id='all-runs'>All runs ({len(all_runs.run_ids())})</h2>",
             "<p class='muted'>Newest first; <b>yes</b> under “compared” marks the runs drawn above. "
             "“failed points” counts every run's failures.</p>"]
    table = all_runs.table()
    if not table.empty:
        shown = set(ids)
        table.insert(1, "compared", ["yes" if r in shown else "" for r in table["run id"]])
        parts.append(_table(table.iloc[::-1]))
    return parts


def write_html(path, runs: Runs, **kwargs) -> Path:
    """Write the report of a results.Runs; returns its path. Refuses to overwrite a run file (results.record.output)."""
    return write_text_safely(Path(path), build_html(runs, **kwargs))
