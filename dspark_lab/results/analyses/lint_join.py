"""One answer from the witnesses: the static finder's findings (`dspark-lab lint`) beside the runtime
sites a measurement recorded (sync debug mode, CUDA sync events, the trace's copies) with their
measured cost. Each line is marked found by static, runtime or both; where only one saw it, the row
says why the other could not. Findings come as dicts (lint's Finding.to_dict), sites as an inspect
record's `sites`; nothing here reads source or traces. A site recorded on code that has moved since
(its quoted `code` is on another line of today's file) is joined at the line that holds that code
today, and its row says so."""
from __future__ import annotations

from pathlib import PurePath
from typing import Callable, Iterable, Optional, Sequence

from dspark_lab.results.record.recorded_lines import Relocation, relocate
from dspark_lab.results.record.sync_sites import try_parse

STATIC, RUNTIME, BOTH = "static", "runtime", "both"
NOT_RUN = ("no sync was seen on this line while the step ran: it did not run in the measured steps (a branch "
           "the step did not take, a function it does not call) or made no sync call there")


def short(path: str) -> str:
    """The last two parts of a path, as sites record them."""
    return "/".join(PurePath(str(path)).parts[-2:])


def join(findings: Iterable[dict], sites: Iterable[dict], *,
         explain: Optional[Callable[[str, int], str]] = None,
         today_lines: Optional[Callable[[str], Optional[Sequence[str]]]] = None) -> list[dict]:
    """One row per line either witness named. `explain(short_path, line)`: why lint found nothing on
    a runtime site's line (None: the file was not linted). `today_lines(short_path)`: today's lines
    of a site's file (None: not at hand), to check that the recorded line still holds its code."""
    findings = [f for f in findings if f.get("rule") != "sync_ok_without_reason"]
    rows, matched = [], set()
    for s in sites:
        p = try_parse(s["site"])
        moved = _relocation(s, p, today_lines)
        line = moved.today if moved else (p.line if p else None)
        hits = [i for i, f in enumerate(findings) if p is not None and short(f["path"]) == p.path
                and (f["line"] == line if s.get("exact", True) else f["function"] == p.function)]
        matched.update(hits)
        f = findings[hits[0]] if hits else None
        why = "" if f else (moved.note() if moved and moved.today is None else None) or \
            (explain(p.path, line) if (explain and p) else None) or \
            "the file was not linted (its source is outside the linted paths)"
        rows.append(_row(f, s, BOTH if f else RUNTIME, why, moved.note() if moved else ""))
    for i, f in enumerate(findings):
        if i not in matched:
            rows.append(_row(f, None, STATIC, NOT_RUN + (f"; where it runs it makes {f['runtime']}" if f.get("runtime") else "")))
    return rows


def _relocation(site: dict, parsed, today_lines) -> Optional[Relocation]:
    """Where a site's recorded code is today, where it moved (None: it did not, or it cannot be checked:
    no quoted code, an unparseable site, or the file not at hand)."""
    if not (today_lines and parsed and site.get("code")):
        return None
    lines = today_lines(parsed.path)
    found = relocate(site["code"], parsed.line, lines) if lines is not None else None
    return found if found is not None and found.moved else None


def _row(f: Optional[dict], s: Optional[dict], found_by: str, why: str, moved: str = "") -> dict:
    site = s["site"] if s else f"{short(f['path'])}:{f['line']} {f['function']}"
    return {"site": site, "found_by": found_by, "rule": f["rule"] if f else "", "fix": f.get("fix", "") if f else "",
            "by_design": (f.get("exempt_reason") or "") if f else "", "code": (f or {}).get("code") or (s or {}).get("code") or "",
            "per_step": s["per_step"] if s else 0.0, "host_blocked_ms": s.get("host_blocked_ms") if s else None,
            "gpu_idle_ms": s.get("gpu_idle_ms") if s else None, "why_only_one": why, "moved": moved}


def text_lines(rows: list[dict]) -> list[str]:
    """The joined table for the terminal: one line per site, found by, cost, and why where one witness missed."""
    if not rows:
        return ["lint beside the runtime: no sync found by either witness"]
    out = ["lint beside the runtime (found by: static = dspark-lab lint, runtime = the measured steps, both):"]
    for r in rows:
        cost = (f", {r['per_step']:.2f}/step, blocked {r['host_blocked_ms']:.3f} ms, GPU idle {r['gpu_idle_ms']:.3f} ms"
                if r["found_by"] != STATIC and r["host_blocked_ms"] is not None else "")
        rule = f" [{r['rule']}]" if r["rule"] else ""
        design = f" by design: {r['by_design']}" if r["by_design"] else ""
        out.append(f"  {r['found_by']:<7} {r['site']}{rule}{cost}{design}")
        if r.get("moved"):
            out.append(f"          {r['moved']}")
        if r["why_only_one"]:
            out.append(f"          why only {r['found_by']}: {r['why_only_one']}")
    return out
