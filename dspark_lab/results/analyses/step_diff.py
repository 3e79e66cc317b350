"""Two inspected steps compared (`dspark-lab diff`): sync sites added, removed and changed, with
their per-step counts and the GPU idle each caused, and the step-time change with its 95% CI, as
tables and as Markdown to paste into a PR description. Torch-free: it reads two inspect records.

A site of BEFORE and one of AFTER are the same site when they are in the same file and function
and their source line reads the same (an edit above it moves its line number, not the site); a
site whose code was not read is matched on its file, line and function.
The step-time change is paired per round only when both steps were measured together, their
trials interleaved (`pair` of the records, set by `diff` of two targets); two steps recorded
apart are resampled independently, and the note says so.

Whether a wait went or moved (`wait_moves`): the host wait the sites lost (their blocked time
before minus after, where it fell) against the host wait sites gained (new sites, and sites
whose blocked time grew). At least MOVED_SHARE of the lost wait gained elsewhere is "moved"
(a fix that moves a read into another call's wait), at least PARTLY_SHARE "partly moved", less "went".
"""
from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from dspark_lab.results.rules.noise import MIN_QUIET_ROUNDS
from dspark_lab.results.rules.stats import compare, median_ci
from dspark_lab.results.analyses import run_ahead_idle
from dspark_lab.results.record import inspect_record
from dspark_lab.results.record.sync_sites import parse_site

STATUSES = ("added", "removed", "changed", "same")
SUMMARY_ROWS = (  # (label, where, key): where is "counts" or "parts"
    ("host syncs per step", "counts", "syncs_per_step"),
    ("of them, waits inside a copy call per step", "counts", "blocking_copies_per_step"),
    ("device-to-host copies per step", "counts", "d2h_per_step"),
    ("host blocked, ms per step", "parts", "host_blocked_ms"),
    ("GPU idle the syncs caused, ms per step", "parts", "gpu_idle_sync_caused_ms"),
) + run_ahead_idle.SUMMARY_ROWS


def _match_key(site: dict) -> tuple:
    try:
        s = parse_site(site["site"])
    except ValueError:
        return ("", site["site"], "")
    return (s.path, s.function, site["code"]) if site.get("code") else (s.path, s.function, f"line {s.line}")


def _val(v) -> Optional[float]:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


MOVED_SHARE = 0.5  # of the host wait the sites lost, the share gained elsewhere that makes it "moved"
PARTLY_SHARE = 0.1  # ... and "partly moved"
GAIN_FLOOR_MS = 0.005  # a site's blocked time must grow by more than this to count as a new or longer wait


def wait_moves(before: dict, after: dict, sites: pd.DataFrame) -> dict:
    """Total host wait and charged GPU idle before and after, the wait the sites lost and gained, the
    sites where a new (or longer) wait appeared, and the verdict: "moved", "partly moved", "went", "none removed"."""
    def blocked(v):
        return _val(v) or 0.0
    lost, gained, new = 0.0, 0.0, []
    for r in sites.itertuples():
        d = blocked(r.after_blocked_ms) - blocked(r.before_blocked_ms)
        if d < 0:
            lost -= d
        elif d > GAIN_FLOOR_MS:
            gained += d
            new.append({"site": r.site, "status": r.status, "before_ms": _val(r.before_blocked_ms),
                        "after_ms": _val(r.after_blocked_ms), "wait": r.wait})
    verdict = ("none removed" if lost <= 0 else "moved" if gained >= MOVED_SHARE * lost
               else "partly moved" if gained >= PARTLY_SHARE * lost else "went")
    return {"host_wait_ms": (_val(before["parts"].get("host_blocked_ms")), _val(after["parts"].get("host_blocked_ms"))),
            "charged_idle_ms": (_val(before["parts"].get("gpu_idle_sync_caused_ms")),
                                _val(after["parts"].get("gpu_idle_sync_caused_ms"))),
            "lost_ms": lost, "gained_ms": gained, "new_waits": new, "verdict": verdict}


def moves_text(m: dict) -> str:
    """One line: whether the wait went or moved, the totals, and where a new wait appeared."""
    hb, ha = m["host_wait_ms"]
    cb, ca = m["charged_idle_ms"]
    head = {"moved": "the wait moved rather than went", "partly moved": "part of the wait moved",
            "went": "the wait went", "none removed": "no site waits less"}[m["verdict"]]
    where = ("; new or longer waits at " + ", ".join(f"{w['site']} (+{(w['after_ms'] or 0) - (w['before_ms'] or 0):.3f} ms)"
                                                     for w in m["new_waits"])) if m["new_waits"] else ""
    return (f"waits: {head}: host wait {_f(hb, 3)} → {_f(ha, 3)} ms/step, charged GPU idle {_f(cb, 3)} → {_f(ca, 3)} "
            f"ms/step; the sites lost {m['lost_ms']:.3f} ms of wait and gained {m['gained_ms']:.3f} ms{where}")


def paired(before: dict, after: dict) -> bool:
    """Trials run in shared rounds: the two records carry the same pair id and as many trials."""
    a, b = before.get("pair") or {}, after.get("pair") or {}
    return bool(a.get("id")) and a.get("id") == b.get("id") and len(before["trials"]) == len(after["trials"])


def site_changes(before: dict, after: dict) -> pd.DataFrame:
    """One row per site of either step: status, per-step counts, host blocked and GPU idle it
    caused (ms per step) before and after (None where the step has no such site)."""
    b = {_match_key(s): s for s in before["sites"]}
    a = {_match_key(s): s for s in after["sites"]}
    rows = []
    for key in list(b) + [k for k in a if k not in b]:
        sb, sa = b.get(key), a.get(key)
        status = "removed" if sa is None else "added" if sb is None else \
            "same" if abs(sb["per_step"] - sa["per_step"]) < 1e-9 else "changed"
        rows.append({"status": status, "site": (sa or sb)["site"], "code": (sa or sb).get("code") or "",
                     "allowed": bool((sa or sb).get("allowed")),  # by design: the allow-list names it
                     "before_per_step": sb and sb["per_step"], "after_per_step": sa and sa["per_step"],
                     "before_idle_ms": sb and _val(sb["gpu_idle_ms"]), "after_idle_ms": sa and _val(sa["gpu_idle_ms"]),
                     "before_blocked_ms": sb and _val(sb["host_blocked_ms"]), "after_blocked_ms": sa and _val(sa["host_blocked_ms"]),
                     "wait": (sa or sb).get("wait", ""),  # the kind of wait (records before the kinds: "")
                     "why_no_idle": (sa or sb).get("why_nothing", "")})
    order = {s: i for i, s in enumerate(STATUSES)}
    df = pd.DataFrame(rows, columns=["status", "site", "code", "allowed", "before_per_step", "after_per_step", "before_idle_ms",
                                     "after_idle_ms", "before_blocked_ms", "after_blocked_ms", "wait", "why_no_idle"])
    return df.sort_values("status", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def summary(before: dict, after: dict) -> pd.DataFrame:
    """The steps' totals side by side: counts and costs per step, and the step time."""
    rows = []
    for label, where, key in SUMMARY_ROWS:
        vb, va = _val(before[where].get(key)), _val(after[where].get(key))
        rows.append({"what": label, "before": vb, "after": va,
                     "change": None if vb is None or va is None else va - vb})
    return pd.DataFrame(rows, columns=["what", "before", "after", "change"])


def step_time_change(before: dict, after: dict) -> dict:
    """AFTER against BEFORE: compare()'s result (pct > 0: AFTER is slower) plus each median and CI."""
    c = compare(after["trials"], before["trials"], "after", "before", paired=paired(before, after))
    c["before"], c["after"] = median_ci(before["trials"]), median_ci(after["trials"])
    return c


def diff(before: dict, after: dict) -> dict:
    """The change from one inspect record to another (each checked: RecordError, a ValueError,
    naming the argument and the field)."""
    inspect_record.validate(before, "before")
    inspect_record.validate(after, "after")
    sites = site_changes(before, after)
    return {"before": before["target"], "after": after["target"], "sites": sites,
            "summary": summary(before, after), "step_time": step_time_change(before, after),
            "waits": wait_moves(before, after, sites),
            "machine": _machine(before, after), "cuda": before["device"] == "cuda" and after["device"] == "cuda"}


def _machine(before: dict, after: dict) -> str:
    fps = [r["fingerprint"] for r in (before, after)]
    words = [f"{f.get('gpu')} · driver {f.get('driver')} · CUDA {f.get('cuda')} · torch {f.get('torch')}" for f in fps]
    return words[0] if words[0] == words[1] else f"before on {words[0]}; after on {words[1]}"


# --- text -------------------------------------------------------------------------------------
def _f(v, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _signed(v) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.3f}".replace("-", "\u2212")


def _ms_ci(t: tuple) -> str:
    return f"{t[0]:.3f} ({t[1]:.3f}–{t[2]:.3f})"


def _how_paired(d: dict) -> str:
    st = d["step_time"]
    return (f"paired per round over {st['n_a']} interleaved trials" if st["paired"]
            else f"recorded apart ({st['n_b']} and {st['n_a']} trials), resampled independently")


def _no_sites(d: dict) -> str:
    """What an empty site table means: no sync, or (without CUDA) none could be seen."""
    return ("none in either step" if d["cuda"] else
            "none seen: without CUDA no sync can be seen, so none could be counted in either step")


def _few_trials(d: dict) -> str:
    st = d["step_time"]
    n = min(st["n_a"], st["n_b"])
    return (f" CIs from {n} trials, under the {MIN_QUIET_ROUNDS} quiet rounds a headline needs: rough "
            f"(--trials {MIN_QUIET_ROUNDS} or more)." if n < MIN_QUIET_ROUNDS else "")


def _sites_md(sites: pd.DataFrame, d: dict) -> list[str]:
    if sites.empty:
        return [f"Sync sites: {_no_sites(d)}."]
    out = ["| site | | syncs per step before → after | GPU idle caused, ms/step before → after |",
           "|---|---|---|---|"]
    for r in sites.itertuples():
        code = f"<br>`{r.code}`" if r.code else ""
        status = f"{r.status} (allowed)" if r.allowed else r.status
        out.append(f"| `{r.site}`{code} | {status} | {_f(r.before_per_step)} → {_f(r.after_per_step)} "
                   f"| {_f(r.before_idle_ms, 3)} → {_f(r.after_idle_ms, 3)} |")
    return out


def markdown(d: dict) -> str:
    """The diff as Markdown for a PR description: totals, step time, and every site by status."""
    st = d["step_time"]
    lines = [f"#### Host syncs: `{d['before']}` → `{d['after']}`", "",
             "| per step | before | after | change |", "|---|---|---|---|"]
    for r in d["summary"].itertuples():
        digits = 3 if "ms" in r.what else 2
        lines.append(f"| {r.what} | {_f(r.before, digits)} | {_f(r.after, digits)} | {_signed(r.change)} |")
    lines.append(f"| step time, ms (median, 95% CI; no profiler) | {_ms_ci(st['before'])} | {_ms_ci(st['after'])} "
                 f"| {st['difference']} |")
    counted = d["sites"]["status"].value_counts()
    lines += ["", "Sync sites: " + ", ".join(f"{counted.get(s, 0)} {s}" for s in STATUSES) + ".", ""]
    lines += _sites_md(d["sites"], d)
    lines += ["", moves_text(d["waits"]).replace("waits: ", "Waits: ", 1)]
    lines += ["", f"Measured with dspark-lab on {d['machine']}; step time {_how_paired(d)}.{_few_trials(d)}"]
    if not d["cuda"]:
        lines.append("Measured without CUDA: nothing can block the host on a GPU there, so sync counts and "
                     "their costs are not measurable (–), and the step times are CPU times.")
    return "\n".join(lines)


def text(d: dict) -> str:
    """The diff as a plain table for the terminal."""
    st = d["step_time"]
    s = d["summary"].assign(before=lambda x: x.before.map(_f), after=lambda x: x.after.map(_f),
                            change=lambda x: x.change.map(_signed))
    sites = d["sites"][["status", "allowed", "site", "before_per_step", "after_per_step", "before_idle_ms", "after_idle_ms"]]
    out = [f"diff {d['before']} -> {d['after']}", s.to_string(index=False),
           f"step time: before {_ms_ci(st['before'])} ms, after {_ms_ci(st['after'])} ms: {st['verdict']} "
           f"({_how_paired(d)}).{_few_trials(d)}", "", "sync sites:",
           sites.to_string(index=False, na_rep="–") if len(sites) else f"  {_no_sites(d)}", moves_text(d["waits"])]
    return "\n".join(out)
