"""A standalone HTML report of recorded runs: the headline with its rule, machines, key
comparisons in words, the figures.

`build_html(runs)` returns one HTML document with plotly.js embedded inline, so the file opens
offline, from disk, with no server. Every number comes from `results.Runs` (the same numbers as
the CLI, the panel and the notebooks); every string from a run file is HTML-escaped.
"""
from __future__ import annotations

import html
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from dspark_lab.results import frames
from dspark_lab.views import figures
from dspark_lab.results.runs import MAX_COMPARED, Runs, failed_rows, ok_rows, point_label
from dspark_lab.results.output import write_text_safely
from dspark_lab.results.paths import PACKAGE_DIR
from dspark_lab.results.strategy_info import BASELINE, BUILTIN_INFO, strategy_order

# Both forms the measurement writes: "path(line): function" (trace attribution) and
# "path:line function" (sync debug mode).
_SITE = re.compile(r"^(?P<path>[^():]+?)(?:\((?P<line>\d+)\):|:(?P<line2>\d+))\s*(?P<func>.*)$")



def _as_runs(runs, timelines=None, headers=None) -> Runs:
    """A Runs from a Runs, or from (rows, timelines, headers) frames as older callers pass them."""
    if isinstance(runs, Runs):
        return runs
    return Runs(runs, timelines, _header_list(headers))


def _header_list(headers) -> list:
    if isinstance(headers, pd.DataFrame):
        return headers.to_dict("records")
    if isinstance(headers, dict):
        return [dict(v, run_id=k) for k, v in headers.items()]
    return list(headers or [])


def package_source(path: str) -> Optional[Path]:
    """The file of this installed package that a recorded path names, or None.

    Only a .py file inside the package folder is ever opened: the path is taken from its last
    `dspark_lab/` component (recorded paths may come from another checkout), resolved (so `..` and
    links cannot lead out), and checked to lie under the package. Anything else is not read."""
    p = str(path).replace("\\", "/")
    if "dspark_lab/" not in p:
        return None
    rel = p.rsplit("dspark_lab/", 1)[1]
    try:
        cand = (PACKAGE_DIR / rel).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if cand.suffix != ".py" or not cand.is_relative_to(PACKAGE_DIR) or not cand.is_file():
        return None
    return cand


def sync_site_line(site: str) -> Optional[dict]:
    """Resolve a recorded `sync_site` ("dspark_lab/strategies.py:25 device_direct", or
    "dspark_lab/strategies.py(25): device_direct") to the line in this package:
    {"site", "path", "line", "function", "code", "note"}. `code` is the source line when the path
    is a .py file inside the installed package (see package_source) and the line still lies inside
    the named function; otherwise `code` is None and `note` says why (the site text is shown alone)."""
    if not site or not isinstance(site, str):
        return None
    m = _SITE.match(site.strip())
    out = {"site": site, "path": None, "line": None, "function": None, "code": None, "note": ""}
    if not m:
        return out
    path, line, func = m["path"], int(m["line"] or m["line2"]), m["func"].strip()
    out.update(path=path, line=line, function=func)
    src_path = package_source(path)
    if src_path is None:
        out["note"] = "not a source file of the dspark_lab package"
        return out
    try:
        src = src_path.read_text()
    except (OSError, UnicodeDecodeError):
        out["note"] = "not readable"
        return out
    lines = src.splitlines()
    spans = []
    try:
        if not func:
            raise SyntaxError  # no function named: take the line as it is
        import ast

        spans = [(n.lineno, n.end_lineno) for n in ast.walk(ast.parse(src))
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func.split(".")[-1]]
    except SyntaxError:
        pass
    inside = not spans or any(a <= line <= b for a, b in spans)
    if 1 <= line <= len(lines) and inside:
        out["code"] = lines[line - 1].strip()
    elif spans:
        a, b = spans[0]
        out["note"] = f"the source changed since this run: {func} is now at {path} lines {a}-{b}"
    return out


def sync_sites(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (run, strategy) of one point: syncs per step, host blocked ms, and the offending line."""
    agg = figures.per_strategy(rows, ["syncs_per_step", "host_blocked_ms", "gpu_idle_after_sync_ms", "step_ms"])
    ok = ok_rows(rows)
    site = ok.assign(run_id=frames.run_key(ok)).groupby(["run_id", "strategy"])["sync_site"].first()
    agg["sync_site"] = [site.get((r, s), "") or "" for r, s in zip(agg["run_id"], agg["strategy"])]
    resolved = [sync_site_line(s) or {} for s in agg["sync_site"]]
    agg["code"] = [r.get("code") or r.get("note") or "" for r in resolved]
    return agg


def featured_points(runs) -> list[str]:
    """Point ids to present: the reference point (results.REFERENCE) and its EP-1 twin."""
    return list(dict.fromkeys(pid for _, pid in _as_runs(runs).featured_points()))


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
    runs = _as_runs(runs)
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
    runs = _as_runs(runs)
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
"""


def _table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, escape=True, border=0, na_rep="")


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


def build_html(runs, timelines_df: Optional[pd.DataFrame] = None, headers=None, *,
               title: str = "dspark-lab: how num_token_non_padded is made, measured",
               compare=None, max_compared: int = MAX_COMPARED) -> str:
    """The standalone report as one HTML string (plotly.js inline, once; opens offline). Takes a
    results.Runs (or rows, timelines, headers frames). Figures and comparisons are drawn for the
    chosen runs only (`compare`, else the default selection: chosen_runs); every run is listed in
    the tables, so the file grows with what it shows, not with the number of runs loaded."""
    all_runs = _as_runs(runs, timelines_df, headers)
    ids = chosen_runs(all_runs, compare, max_compared) if all_runs.run_ids() else []
    runs = all_runs.subset(ids) if ids else all_runs
    rows = runs.rows
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{esc(title)}</h1>"]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    n_all, n_machines = len(all_runs.run_ids()), len(all_runs.machines())
    labels = all_runs.labels()
    parts.append(f"<p class='muted'>Generated {esc(now)} from {n_all} recorded run(s) on {n_machines} machine(s) "
                 f"({len(all_runs.rows)} rows). Every number below comes from these recorded runs; each figure "
                 "names the GPU, driver, torch and date it shows.</p>")
    how = ("chosen" if compare is not None else
           "by default: the latest run of each machine, then the most recent runs")
    parts.append(f"<p class='compared'>Compared in the figures: {len(ids)} of {n_all} run(s) ({esc(how)}; at most "
                 f"{max_compared}): " + ", ".join(f"<b>{esc(labels.get(r, r))}</b>" for r in ids) + ". "
                 + ("Every run is listed under <a href='#all-runs'>All runs</a>; choose others with "
                    "<code>dspark-lab report --gpu/--driver/--torch/--since/--until/--name</code> or "
                    "<code>Runs.select(...)</code>.</p>" if n_all > len(ids) else "</p>"))

    parts.append("<h2>Headline</h2><div class='headline'>")
    head = all_runs.headline()  # over every run, as the CLI and the notebooks print it (one line a machine)
    parts.append("".join(f"<p>{esc(line)}</p>" for line in head.lines()))
    parts.append(f"<p class='muted rule'>{esc(head.rule)}</p></div>")

    if all_runs.warnings:
        parts.append("<h2>Skipped while loading</h2><ul class='skipped'>")
        parts.append("".join(f"<li><code>{esc(w)}</code></li>" for w in all_runs.warnings[:MAX_WARNINGS_SHOWN]))
        if len(all_runs.warnings) > MAX_WARNINGS_SHOWN:
            parts.append(f"<li>… and {len(all_runs.warnings) - MAX_WARNINGS_SHOWN} more (`dspark-lab report` "
                         "prints every one)</li>")
        parts.append("</ul>")

    parts.append("<h2>Machines</h2>")
    parts.append(_table(all_runs.machines()))
    parts.append("<h2>Runs compared</h2>")
    parts.append(_table(runs.table()))

    parts.append("<h2>Strategies</h2>")
    st = pd.DataFrame([{"strategy": name, "what it does": what, "from": source}
                       for name, (what, source) in BUILTIN_INFO.items()])
    parts.append(_table(st))

    ok = runs.ok
    if ok.empty:
        parts.append("<p><b>No successful recorded points to show.</b></p>")
    featured = runs.featured_points()
    parts.append("<h2>Key comparisons</h2><ul>")
    for it in comparison_items(runs, list(dict.fromkeys(p for _, p in featured))):
        sub = "".join(f"<li>{esc(line)}</li>" for line in it["lines"])
        parts.append(f"<li>{esc(it['head'])}.<ul>{sub}</ul></li>")
    for line in cross_run_comparisons(runs):
        parts.append(f"<li>{esc(line)}</li>")
    parts.append("</ul><p class='muted'>Percentages: median over paired trials of the ratio of step times, "
                 "95% bootstrap confidence interval; an interval containing 0 is reported as no measurable "
                 "difference.</p>")

    first = [True]

    def fig_html(fig) -> str:
        out = fig.to_html(full_html=False, include_plotlyjs=first[0], config=figures.PLOTLY_CONFIG)
        first[0] = False
        return out

    for pid in dict.fromkeys(p for _, p in featured):
        pt = ok[ok["point_id"] == pid]
        parts.append(f"<h2>{esc(point_label(pt.iloc[0]))}</h2>")
        sites = sync_sites(pt)
        sites = sites[sites["sync_site"] != ""]
        if not sites.empty:
            parts.append("<p>Where the host blocks (first sync outside the by-design readback):</p>")
            show = sites.assign(run=sites["run_id"].map(runs.labels()))[
                ["run", "strategy", "syncs_per_step", "host_blocked_ms", "sync_site", "code"]]
            parts.append(_table(show.round(3)))
        for make in (figures.strategy_comparison, figures.sync_counts, figures.step_breakdown):
            parts.append(fig_html(make(pt)))
        for rid in dict.fromkeys(frames.run_key(pt)):
            t = runs.timeline(rid, pid)  # this run's segments only, read now
            if not t.empty:
                prow = pt[frames.run_key(pt) == rid]
                parts.append(fig_html(figures.timeline(t, prow, point_id=pid)))

    if not ok.empty:
        parts.append("<h2>Sweeps</h2>")
        for (model, wl), g in ok.groupby(["model", "workload"], sort=False):
            if g["point_id"].nunique() > 1:
                parts.append(fig_html(figures.sweep(g, workload=wl, model=model)))

    bad = failed_rows(rows)
    if not bad.empty:
        parts.append("<h2>Failed points</h2>")
        cols = [c for c in ("run_label", "gpu", "ep_size", "batch_size", "gamma", "workload", "strategy", "error") if c in bad]
        parts.append(_table(bad.drop_duplicates(["point_id", "strategy", "run_id"])[cols]))

    parts.append(f"<h2 id='all-runs'>All runs ({n_all})</h2>")
    parts.append("<p class='muted'>Newest first; <b>yes</b> under “compared” marks the runs drawn above. "
                 "“failed points” counts every run's failures.</p>")
    table = all_runs.table()
    if not table.empty:
        shown = set(ids)
        table.insert(1, "compared", ["yes" if r in shown else "" for r in table["run id"]])
        parts.append(_table(table.iloc[::-1]))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(path, runs, timelines_df=None, headers=None, **kwargs) -> Path:
    """Write the report; returns its path. Refuses to overwrite a run file (results.output)."""
    html_text = build_html(runs, timelines_df, headers, **kwargs)
    return write_text_safely(Path(path), html_text)
