"""The page and the terminal report of one inspected step (a results.record.inspect_record record).

The page is standalone HTML (plotly.js inline once, opens offline) with the kit's own per-point
figures drawn for the step (timeline, step-time breakdown, syncs per step), the sync sites with
their source lines (quoted only from files under the target's folder, read when it was measured),
the guard's verdict and the machine. Every number on it comes from the record.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from dspark_lab.results.analyses import by_design, run_ahead_idle
from dspark_lab.results.facts import wait_kinds
from dspark_lab.results.record import inspect_record
from dspark_lab.results.rules import profiler_stretch
from dspark_lab.results.rules.noise import MIN_QUIET_ROUNDS
from dspark_lab.results.viewmodels import inspect_view
from dspark_lab.results.record.output import write_text_safely
from dspark_lab.views import figures
from dspark_lab.views.report import _CSS, _FigureHtml

NO_CUDA_TEXT = ("recorded without CUDA: nothing can block the host on a GPU here, so sync counts and their "
                "costs are not measurable (shown as n/a), and the step times are CPU times")


def few_trials_note(trials: int) -> str:
    """Beside a CI from fewer trials than a headline's floor: how rough it is (empty at the floor)."""
    if trials >= MIN_QUIET_ROUNDS:
        return ""
    return f"; a rough CI: {trials} trials, under the {MIN_QUIET_ROUNDS} quiet rounds a headline needs (--trials {MIN_QUIET_ROUNDS})"


def _f(v, digits: int = 3, unit: str = "") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}{unit}"


def sites_table(rec: dict) -> pd.DataFrame:
    """One row per sync site (one line each): per step, the kind of wait, host blocked and GPU idle it
    caused (and why none, where none), whether the allow-list names it (by design), code. Records
    from before the kinds of wait were named show them empty."""
    return pd.DataFrame([{"site": s["site"], "syncs per step": s["per_step"], "wait": s.get("wait", ""),
                          "host blocked ms/step": s["host_blocked_ms"], "GPU idle caused ms/step": s["gpu_idle_ms"],
                          "why no idle": s.get("why_nothing", ""),
                          "seen by": "sync debug mode (exact line)" if s["exact"] else "trace (function's def line)",
                          "allowed": bool(s.get("allowed")), "code": s["code"] or ""} for s in rec["sites"]],
                        columns=["site", "syncs per step", "wait", "host blocked ms/step", "GPU idle caused ms/step",
                                 "why no idle", "seen by", "allowed", "code"])


def report_text(rec: dict) -> str:
    """The step's report for the terminal and notebooks."""
    c, p, fp = rec["counts"], rec["parts"], rec["fingerprint"]
    o = rec["options"]
    lines = [f"{rec['target']} on {fp.get('gpu')} (driver {fp.get('driver')}, CUDA {fp.get('cuda')}, torch {fp.get('torch')})",
             f"step {_f(rec['step_ms'])} ms (95% CI {_f(rec['step_ms_lo'])}-{_f(rec['step_ms_hi'])}, no profiler; "
             f"{o['trials']} trials x {o['steps']} steps{few_trials_note(len(rec['trials']))})",
             f"host syncs per step {_f(c.get('syncs_per_step'), 2)} (every host wait; sync debug mode {_f(c.get('debug_syncs_per_step'), 2)}; "
             f"of them, waits inside a copy call {_f(c.get('blocking_copies_per_step'), 2)}; by-design readback "
             f"{_f(c.get('readback_syncs_per_step'), 2)})",
             f"device-to-host copies per step {_f(c.get('d2h_per_step'), 2)} (into pageable memory "
             f"{_f(c.get('d2h_pageable_per_step'), 2)}); host-to-device pageable {_f(c.get('h2d_pageable_per_step'), 2)}",
             f"host blocked {_f(p.get('host_blocked_ms'))} ms per step; GPU idle the syncs caused "
             f"{_f(p.get('gpu_idle_sync_caused_ms'))} ms per step (profiled steps{_less_stretch(rec)})"]
    waits = rec.get("waits") or {}  # records from before the kinds of wait were named have none
    if wait_kinds.charges_text(waits.get("charges")):
        lines.append(f"by kind of wait: {wait_kinds.charges_text(waits.get('charges'))}")
    if waits.get("note"):
        lines.append(f"charged nothing: {waits['note']}")
    lines += run_ahead_idle.text_lines(p)
    lines += by_design.lines(rec.get("guard"))
    for s in rec["sites"]:
        code = f"   {s['code']}" if s["code"] else ""
        kind = f" ({s['wait']})" if s.get("wait") else ""
        why = f" ({s['why_nothing']})" if s.get("why_nothing") else ""
        lines.append(f"  {s['site']}{kind}: {s['per_step']:.2f} per step, blocked {_f(s['host_blocked_ms'])} ms, "
                     f"GPU idle caused {_f(s['gpu_idle_ms'])} ms{why}{code}")
    if rec["device"] != "cuda":
        lines.append(NO_CUDA_TEXT)
    if c.get("sync_count_mismatch"):
        lines.append(f"WARNING: the two sync counts disagree ({c.get('sync_note')}): one of them missed a sync")
    return "\n".join(lines)


def _guard_html(rec: dict) -> str:
    g = rec.get("guard") or {}
    esc = html.escape
    if not g.get("checked"):
        return f"<p>Guard: {esc(g.get('note', 'not run'))}</p>"
    allow = ", ".join(g.get("allow") or []) or "nothing"
    if not g["violations"]:
        return f"<p>Guard ({esc(', '.join(g['checked']))}; allowed: {esc(allow)}): no host sync outside the allow-list.</p>"
    items = "".join(f"<li><code>{esc(v)}</code></li>" for v in g["violations"])
    return f"<p>Guard ({esc(', '.join(g['checked']))}; allowed: {esc(allow)}): host sync lines not allowed:</p><ul>{items}</ul>"


def build_html(rec: dict) -> str:
    esc = html.escape
    view = inspect_view.view(rec)
    fig_html = _FigureHtml()
    title = f"dspark-lab inspect: {rec['target']}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{esc(title)}</h1>",
             f"<p class='muted'>Recorded {esc(str(rec.get('recorded_at')))} on {esc(view.fingerprint)}. "
             "Every number below comes from this record.</p>",
             f"<pre>{esc(report_text(rec))}</pre>", "<h2>Sync sites</h2>"]
    sites = sites_table(rec)
    parts.append(sites.to_html(index=False, na_rep="n/a", float_format=lambda v: f"{v:.3f}") if len(sites)
                 else "<p>No host sync in the step" + (" (none can be seen without CUDA)" if rec["device"] != "cuda" else "") + ".</p>")
    if rec.get("cost_scope") == "function":
        parts.append("<p class='muted'>A site's host blocked time and GPU idle are its function's, from the profiled "
                     "steps; a function with several sync lines has them split among its lines by count.</p>")
    parts.append(_guard_html(rec))
    for fig in (figures.timeline(view), figures.step_breakdown(view), figures.sync_counts(view)):
        parts.append(fig_html(fig))
    parts.append("</body></html>")
    return "\n".join(parts)


def write(path, rec: dict) -> Path:
    return write_text_safely(Path(path), build_html(rec))


def _less_stretch(rec: dict) -> str:
    """The charge less the profiler's stretch of the step (results/rules/profiler_stretch.py), where the
    record has both the profiled and the profiler-free step time."""
    p = rec.get("parts") or {}
    stretch = profiler_stretch.stretch_ms(p.get("profiled_step_ms"), rec.get("step_ms"))
    free = profiler_stretch.less_stretch(p.get("gpu_idle_sync_caused_ms"), p.get("gpu_idle_sync_caused_ms"), stretch)
    if free is None:
        return ""
    return f"; {free:.3f} ms less the profiler's stretch of the step, {stretch:.3f} ms"

