"""The page of one headroom record (`dspark-lab inspect --headroom --html`, results.analyses.headroom's
format): for each read-back site, the measured headroom with its 95% CI beside the kit's charge, and
where they disagree, why (the split of the difference into its terms). Standalone HTML, no figure
and no script; every number on it comes from the record."""
from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from dspark_lab.results.analyses import headroom as H
from dspark_lab.results.record.output import write_text_safely
from dspark_lab.views.report import _CSS

COLUMNS = ["site", "call", "per step", "charge ms", "headroom ms [95% CI]", "verdict"]


def sites_table(rec: dict) -> pd.DataFrame:
    """One row per read-back site: the call, reads per step, the charge, the headroom [95% CI], the verdict."""
    return pd.DataFrame(H.table_rows(rec), columns=COLUMNS)


def _terms_html(rec: dict) -> str:
    """Each split disagreement: its terms (ms), the wait it moved to, where one appeared."""
    esc = html.escape
    out = []
    for r in rec["sites"]:
        why = r.get("why") or {}
        if not why.get("terms"):
            continue
        terms = ", ".join(f"{esc(k)} {v:+.3f}" for k, v in why["terms"].items())
        moved = "".join(f"<li>a wait appeared at <code>{esc(w.get('site', ''))}</code></li>" for w in why.get("new_waits") or [])
        out.append(f"<li><code>{esc(r['site'])}</code>: headroom minus charge {why.get('gap_ms', 0.0):+.3f} ms = "
                   f"{terms} ms<ul>{moved}</ul></li>")
    return f"<h2>Why they differ</h2><ul>{''.join(out)}</ul>" if out else ""


def build_html(rec: dict) -> str:
    esc = html.escape
    H.validate(rec)
    fp = rec.get("fingerprint") or {}
    title = f"dspark-lab inspect --headroom: {rec['target']}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{_CSS}</style></head><body>", f"<h1>{esc(title)}</h1>",
             f"<p class='muted'>Recorded {esc(str(rec.get('recorded_at')))} on {esc(str(fp.get('gpu')))} (driver "
             f"{esc(str(fp.get('driver')))}, CUDA {esc(str(fp.get('cuda')))}, torch {esc(str(fp.get('torch')))}). "
             "Every number below comes from this record.</p>",
             f"<pre>{esc(H.text(rec))}</pre>", "<h2>Read-back sites</h2>"]
    sites = sites_table(rec)
    parts.append(sites.to_html(index=False, float_format=lambda v: f"{v:.2f}") if len(sites) else
                 "<p>No read-back site seen" + ("" if rec.get("device") == "cuda" else
                                                 " (no CUDA: no tensor lives on a device)") + ".</p>")
    parts.append(_terms_html(rec))
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


def write(path, rec: dict) -> Path:
    return write_text_safely(Path(path), build_html(rec))
