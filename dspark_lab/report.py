"""A standalone HTML report of recorded runs: machines, key comparisons in words, the figures.

`build_html(rows, timelines, headers)` returns one HTML document with plotly.js embedded inline,
so the file opens offline, from disk, with no server. Every number in it comes from the rows;
comparisons use `measure.timing.compare` (bootstrap CI; a difference inside the spread is said to
be "no measurable difference").
"""
from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from . import figures, schema, strategies
from .measure.timing import compare

BASELINE = "device_direct"
PREFERRED = dict(workload="sglang_profile", batch_size=8, gamma=4)

# Both forms the measurement writes: "path(line): function" (trace attribution) and
# "path:line function" (sync debug mode).
_SITE = re.compile(r"^(?P<path>[^():]+?)(?:\((?P<line>\d+)\):|:(?P<line2>\d+))\s*(?P<func>.*)$")


# -- small helpers shared with the notebooks -----------------------------------------------------

def sync_site_line(site: str) -> Optional[dict]:
    """Resolve a recorded `sync_site` ("dspark_lab/strategies.py:25 device_direct", or
    "dspark_lab/strategies.py(25): device_direct") to the line
    in this checkout: {"site", "path", "line", "function", "code", "note"}. `code` is the source
    line when it still lies inside the named function; where the source changed since the run,
    `code` is None and `note` says where the function is now."""
    if not site or not isinstance(site, str):
        return None
    m = _SITE.match(site.strip())
    out = {"site": site, "path": None, "line": None, "function": None, "code": None, "note": ""}
    if not m:
        return out
    path, line, func = m["path"], int(m["line"] or m["line2"]), m["func"].strip()
    out.update(path=path, line=line, function=func)
    root = Path(__file__).resolve().parent.parent
    src = None
    for cand in (root / path, Path(path)):
        try:
            if cand.is_file():
                src = cand.read_text()
                break
        except OSError:
            pass
    if src is None:
        out["note"] = f"{path} is not part of this checkout"
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
    ok = figures.ok_rows(rows)
    site = ok.assign(run_id=figures._run_key(ok)).groupby(["run_id", "strategy"])["sync_site"].first()
    agg["sync_site"] = [site.get((r, s), "") or "" for r, s in zip(agg["run_id"], agg["strategy"])]
    resolved = [sync_site_line(s) or {} for s in agg["sync_site"]]
    agg["code"] = [r.get("code") or r.get("note") or "" for r in resolved]
    return agg


def featured_points(rows: pd.DataFrame) -> list[str]:
    """Point ids to present: the point nearest to batch 8, gamma 4 of the sglang_profile workload
    (or the most recorded one) with EP > 1 (the scalar is consumed), and the same at EP 1."""
    ok = figures.ok_rows(rows)
    if ok.empty:
        return []
    wl = PREFERRED["workload"] if PREFERRED["workload"] in set(ok["workload"]) else ok["workload"].value_counts().index[0]
    ok = ok[ok["workload"] == wl]
    full = ok.groupby("point_id")["strategy"].nunique()
    ok = ok[ok["point_id"].isin(full[full == full.max()].index)]
    out = []
    for part in (ok[ok["ep_size"] > 1], ok[ok["ep_size"] == 1]):
        if not part.empty:
            ep = int(part["ep_size"].max())
            pt = figures.select_point(part, ep_size=ep, batch_size=PREFERRED["batch_size"], gamma=PREFERRED["gamma"])
            out.append(pt["point_id"].iloc[0])
    return out


def _num(v) -> str:
    """2 decimals, or "n/a" where the run did not record the value."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if f != f else f"{f:.2f}"


def _paired(g: pd.DataFrame, s: str) -> list[float]:
    return g[g["strategy"] == s].sort_values("trial")["step_ms"].astype(float).tolist()


def comparison_items(rows: pd.DataFrame, point_ids: Optional[Iterable[str]] = None, baseline: str = BASELINE) -> list[dict]:
    """Per (run, point): {"head": what the baseline costs, "lines": what each other strategy buys}."""
    ok = figures.ok_rows(rows)
    point_ids = list(point_ids) if point_ids is not None else featured_points(rows)
    out = []
    labels = figures.run_labels(ok)
    for pid in point_ids:
        pt = ok[ok["point_id"] == pid]
        for rid, g in pt.groupby(figures._run_key(pt), sort=False):
            if baseline not in set(g["strategy"]):
                continue
            b = g[g["strategy"] == baseline].iloc[0]
            base = _paired(g, baseline)
            head = (f"{labels.get(rid, rid) or figures.fingerprint_label(g)}, {figures.point_label(g.iloc[0])}: "
                    f"{baseline} takes {pd.Series(base).median():.2f} ms per step (median of {len(base)} trials) with "
                    f"{_num(b['syncs_per_step'])} host-blocking syncs per step; the host sits blocked "
                    f"{_num(b['host_blocked_ms'])} ms of each profiled step and the GPU starves "
                    f"{_num(b['gpu_idle_after_sync_ms'])} ms after the sync")
            if b.get("sync_site"):
                head += f" (sync at {b['sync_site']})"
            lines = []
            for s in figures.strategy_order(g["strategy"]):
                if s == baseline:
                    continue
                c = compare(_paired(g, s), base, s, baseline)
                r = g[g["strategy"] == s].iloc[0]
                lines.append(f"{c['verdict']}; {_num(r['syncs_per_step'])} syncs per step, "
                             f"host blocked {_num(r['host_blocked_ms'])} ms")
            out.append({"run_id": rid, "point_id": pid, "fingerprint": figures.fingerprint_label(g),
                        "head": head, "lines": lines})
    return out


def key_comparisons(rows: pd.DataFrame, point_ids: Optional[Iterable[str]] = None, baseline: str = BASELINE) -> list[str]:
    """Sentences, one per (run, point): what the baseline costs and what each strategy buys."""
    return [it["head"] + ". " + ". ".join(it["lines"]) + ("." if it["lines"] else "")
            for it in comparison_items(rows, point_ids, baseline)]


def cross_run_comparisons(rows: pd.DataFrame, baseline: str = BASELINE) -> list[str]:
    """For points recorded on several runs: the baseline's cost against the best fix on each."""
    ok = figures.ok_rows(rows)
    if ok.empty or "run_id" not in ok or ok["run_id"].nunique() < 2:
        return []
    labels = figures.run_labels(ok)
    out = []
    shared = ok.groupby("point_id")["run_id"].nunique()
    for pid in [p for p in featured_points(rows) if shared.get(p, 0) > 1]:
        pt = ok[ok["point_id"] == pid]
        bits = []
        for rid, g in pt.groupby("run_id", sort=False):
            others = [s for s in figures.strategy_order(g["strategy"]) if s != baseline]
            if baseline not in set(g["strategy"]) or not others:
                continue
            best = min(others, key=lambda s: pd.Series(_paired(g, s)).median())
            c = compare(_paired(g, baseline), _paired(g, best), baseline, best)
            bits.append(f"on {labels.get(rid, rid)}: {c['verdict']}")
        if bits:
            out.append(f"{figures.point_label(pt.iloc[0])}: " + "; ".join(bits) + ".")
    return out


def _headers_frame(headers, rows: pd.DataFrame) -> pd.DataFrame:
    if isinstance(headers, pd.DataFrame):
        recs = headers.to_dict("records")
    elif isinstance(headers, dict):
        recs = [dict(v, run_id=k) for k, v in headers.items()]
    else:
        recs = list(headers or [])
    out = []
    for h in recs:
        fp = h.get("fingerprint") or {k: h.get(k) for k in ("gpu", "driver", "cuda", "torch")}
        rid = h.get("run_id")
        sub = rows[rows["run_id"] == rid] if "run_id" in rows.columns else rows.iloc[0:0]
        sweep = h.get("sweep") or {}
        out.append({
            "run": rid, "GPU": fp.get("gpu"), "driver": fp.get("driver"), "CUDA": fp.get("cuda"),
            "torch": fp.get("torch"), "recorded": h.get("created_at") or h.get("recorded_at"),
            "points": int(sub["point_id"].nunique()) if len(sub) else 0,
            "failed points": int(figures.failed_rows(sub)["point_id"].nunique()) if len(sub) else 0,
            "model / workload": ", ".join(sorted({f"{m} / {w}" for m, w in zip(sub.get("model", []), sub.get("workload", []))})),
            "sweep": (f"EP {sweep.get('ep_size')} × batch {sweep.get('batch_size')} × gamma {sweep.get('gamma')}"
                      if sweep else ""),
        })
    return pd.DataFrame(out)


def fingerprint_table(headers, rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run: machine fingerprint, when, how many points (failed ones too), the sweep."""
    return _headers_frame(headers, rows)


# -- the document --------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1250px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em} h2{margin-top:2em;border-bottom:1px solid #ccc} table{border-collapse:collapse;font-size:.9em}
td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left} th{background:#f4f4f4}
li{margin:.4em 0} code{background:#f4f4f4;padding:0 .2em} .muted{color:#666;font-size:.9em}
"""


def _table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, escape=True, border=0, na_rep="")


def build_html(rows_df: pd.DataFrame, timelines_df: Optional[pd.DataFrame], headers, *,
               title: str = "dspark-lab: how num_token_non_padded is made, measured") -> str:
    """The standalone report as one HTML string (plotly.js inline, opens offline)."""
    rows = rows_df
    tl = figures.flatten_timelines(timelines_df)
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{esc(title)}</h1>"]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts.append(f"<p class='muted'>Generated {esc(now)} from {len(rows)} recorded rows "
                 f"({rows['point_id'].nunique() if len(rows) else 0} config points). Every number below "
                 "comes from these recorded runs; each figure names the GPU, driver, torch and date it shows.</p>")

    parts.append("<h2>Machines and runs</h2>")
    parts.append(_table(fingerprint_table(headers, rows)))

    parts.append("<h2>Strategies</h2>")
    st = pd.DataFrame([{"strategy": s.name, "what it does": s.description, "from": s.source}
                       for s in (strategies.get(n) for n in strategies.names())])
    parts.append(_table(st))

    ok = figures.ok_rows(rows)
    if ok.empty:
        parts.append("<p><b>No successful recorded points to show.</b></p>")
    featured = featured_points(rows)
    parts.append("<h2>Key comparisons</h2><ul>")
    for it in comparison_items(rows, featured):
        sub = "".join(f"<li>{esc(line)}</li>" for line in it["lines"])
        parts.append(f"<li>{esc(it['head'])}.<ul>{sub}</ul></li>")
    for line in cross_run_comparisons(rows):
        parts.append(f"<li>{esc(line)}</li>")
    parts.append("</ul><p class='muted'>Percentages: median over paired trials of the ratio of step times, "
                 "95% bootstrap confidence interval; an interval containing 0 is reported as no measurable "
                 "difference.</p>")

    first = [True]

    def fig_html(fig) -> str:
        out = fig.to_html(full_html=False, include_plotlyjs=first[0], config=figures.PLOTLY_CONFIG)
        first[0] = False
        return out

    for pid in featured:
        pt = ok[ok["point_id"] == pid]
        parts.append(f"<h2>{esc(figures.point_label(pt.iloc[0]))}</h2>")
        sites = sync_sites(pt)
        sites = sites[sites["sync_site"] != ""]
        if not sites.empty:
            parts.append("<p>Where the host blocks (first sync outside the by-design readback):</p>")
            show = sites.assign(run=sites["run_id"].map(figures.run_labels(pt)))[
                ["run", "strategy", "syncs_per_step", "host_blocked_ms", "sync_site", "code"]]
            parts.append(_table(show.round(3)))
        for make in (figures.strategy_comparison, figures.sync_counts, figures.step_breakdown):
            parts.append(fig_html(make(pt)))
        for rid in dict.fromkeys(figures._run_key(pt)):
            t = tl[tl["point_id"] == pid] if not tl.empty else tl
            if "run_id" in t.columns and rid:
                t = t[t["run_id"] == rid]
            if not t.empty:
                prow = pt[figures._run_key(pt) == rid]
                parts.append(fig_html(figures.timeline(t, prow, point_id=pid)))

    if not ok.empty:
        parts.append("<h2>Sweeps</h2>")
        for (model, wl), g in ok.groupby(["model", "workload"], sort=False):
            if g["point_id"].nunique() > 1:
                parts.append(fig_html(figures.sweep(g, workload=wl, model=model)))

    bad = figures.failed_rows(rows)
    if not bad.empty:
        parts.append("<h2>Failed points</h2>")
        cols = [c for c in ("run_id", "gpu", "ep_size", "batch_size", "gamma", "workload", "strategy", "error") if c in bad]
        parts.append(_table(bad.drop_duplicates(["point_id", "strategy"] + (["run_id"] if "run_id" in bad else []))[cols]))
    parts.append("</body></html>")
    return "\n".join(parts)


def default_out_dir() -> Path:
    """Where exports go: $DSPARK_OUT, else out/ at the repository root (git-ignored)."""
    import os

    env = os.environ.get("DSPARK_OUT")
    return Path(env).expanduser() if env else Path(__file__).resolve().parent.parent / "out"


def write_html(path, rows_df, timelines_df, headers, **kwargs) -> Path:
    """Write the report; returns its path (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build_html(rows_df, timelines_df, headers, **kwargs), encoding="utf-8")
    return path
