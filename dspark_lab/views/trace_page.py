"""The terminal report and page of a trace read by `dspark-lab trace` (an inspect record with its
"trace" section, measure.foreign_record): what was found and left out, then inspect's report of the
accounted steps. Every number comes from the record."""
from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from dspark_lab.results.record.output import write_text_safely
from dspark_lab.results.viewmodels import inspect_view
from dspark_lab.views import figures, inspect_page
from dspark_lab.views.report import _CSS, _FigureHtml

_f = inspect_page._f


def findings_lines(found: dict) -> list[str]:
    """What the file held: steps found and accounted, the GPU share, every abstention with its reason."""
    th = found.get("thread") or {}
    share = found.get("gpu_share")
    lines = [f"{found['file']}: {found['events_read']} events read, {found['events_kept']} kept",
             f"steps: {len(found['steps_found'])} found by {found['step_source'] or 'nothing'}; "
             f"{len(found['steps_accounted'])} accounted for"
             + (f", charged on {th.get('name') or 'thread'} (pid {th.get('pid')}, tid {th.get('tid')})" if th else ""),
             "GPU time the totals hold: " + ("n/a (the trace has no GPU records)" if share is None else f"{share:.1%}")]
    if found.get("replays_without_kernels"):
        lines.append(f"{found['replays_without_kernels']} CUDA graph replay(s) have no per-kernel records in the trace")
    if found.get("renamed"):
        lines.append("read as CUDA: " + ", ".join(f"{v} as {k}" for k, v in sorted(found["renamed"].items())))
    lines += [f"events left out: {n} ({why})" for why, n in sorted(found.get("dropped", {}).items())]
    lines += [f"left out: {a['what']} {a['step']}: {a['reason']}".replace("  ", " ") for a in found["abstained"]]
    by_reason: dict = {}
    for w in found.get("abstained_waits", []):
        by_reason.setdefault(w["reason"], []).append(w)
    lines += [f"left out: {len(ws)} wait(s) ({', '.join(sorted({w['calls'] for w in ws}))}): {why}"
              for why, ws in by_reason.items()]
    return lines


def waits_lines(found: dict, limit: int = 20) -> list[str]:
    rows = found.get("waits", [])
    out = [f"  {w['step']} {w['wait']} ({w['calls']}) at {w['site']} [thread {w['thread']}]: blocked "
           f"{_f(w['blocked_ms'])} ms, charged {_f(w['charged_ms'])} ms" + (f" ({w['why_nothing']})" if w["why_nothing"] else "")
           for w in rows[:limit]]
    if found.get("waits_total", 0) > limit:
        out.append(f"  ... {found['waits_total'] - limit} more waits in the record")
    return out


WAIT_COLUMNS = ["step", "thread", "wait", "calls", "op", "site", "blocked_ms", "cap_ms", "charged_ms", "why_nothing"]


def waits_table(found: dict) -> pd.DataFrame:
    """Each host wait of the accounted steps: step, thread, kind, calls, op, Python frame or op, its
    host time, its cap and the GPU idle charged to it (why none, where none)."""
    return pd.DataFrame(found.get("waits", []), columns=WAIT_COLUMNS)


def left_out_table(found: dict) -> pd.DataFrame:
    """Every step and wait left out of the totals, with its reason."""
    cols = ["what", "step", "thread", "calls", "site", "blocked_ms", "reason"]
    return pd.DataFrame([{c: a.get(c, "") for c in cols} for a in found["abstained"] + found.get("abstained_waits", [])],
                        columns=cols)


def report_text(found: dict, rec: dict | None) -> str:
    lines = findings_lines(found)
    if rec is None:
        return "\n".join(lines + ["nothing accounted for: no cost is stated"])
    lines.append(f"step {_f(rec['step_ms'])} ms (median, 95% CI {_f(rec['step_ms_lo'])}-{_f(rec['step_ms_hi'])}; "
                 f"{found['timing']}; first {found['skip_first']} step(s) skipped)")
    # inspect's report after its first two lines (its target and its profiler-free step time)
    lines += inspect_page.report_text(rec).split("\n")[2:]
    lines.append("waits per step:")
    return "\n".join(lines + waits_lines(found))


def build_html(found: dict, rec: dict) -> str:
    esc = html.escape
    title = f"dspark-lab trace: {found['file']}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{esc(title)}</h1>",
             "<p class='muted'>Read from a recorded trace. Every number below comes from its record.</p>",
             f"<pre>{esc(report_text(found, rec))}</pre>", "<h2>Waits</h2>"]
    waits = waits_table(found)
    parts.append(waits.to_html(index=False, float_format=lambda v: f"{v:.3f}") if len(waits) else "<p>No host wait in the accounted steps.</p>")
    left = left_out_table(found)
    parts += ["<h2>Left out of the totals</h2>",
              left.to_html(index=False, float_format=lambda v: f"{v:.3f}") if len(left) else "<p>Nothing.</p>"]
    view = inspect_view.view(rec)
    fig_html = _FigureHtml()
    for fig in (figures.timeline(view), figures.step_breakdown(view), figures.sync_counts(view)):
        parts.append(fig_html(fig))
    parts.append("</body></html>")
    return "\n".join(parts)


def write(path, found: dict, rec: dict) -> Path:
    return write_text_safely(Path(path), build_html(found, rec))
