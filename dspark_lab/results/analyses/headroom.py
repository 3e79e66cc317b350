"""Headroom against charge, torch-free: the record `inspect --headroom` writes (run/headroom.py measures
it), each site's charge found in the step's inspect record, the split of a disagreement, and the table.

A record: {"kind": KIND, "schema": SCHEMA, "target", "label", "recorded_at", "device", "fingerprint",
"options", "step_ms", "step_ms_lo", "step_ms_hi", "trials", "sites": [ROW], "inspect": {parts, counts,
sites}}. A ROW: site, kind (the call), per_step, varies, stubbed, why_not, headroom_ms / _lo / _hi
(the real step's time minus the stubbed one's, median over paired rounds and its 95% CI), charge_ms
(the GPU idle the kit charges the site's wait, ms per step), blocked_ms, charged_site (the inspect
record's site it was matched to), agree (the charge inside the headroom's CI; None where either is
missing) and, where they disagree and the stubbed step was inspected, why (explain's split).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

from dspark_lab.results.record.paths import default_data_dir
from dspark_lab.results.rules import profiler_stretch
from dspark_lab.results.record.sync_sites import same_file, try_parse

KIND, SCHEMA = "dspark_headroom", 1
STUDY_KIND, STUDY_FOLDER = "dspark_headroom_study", "headroom"  # studies/headroom's file, under data/headroom/
NO_STUDY = (f"no recorded headroom study: none under data/{STUDY_FOLDER}/ (python -m studies.headroom.gallery_and_draft "
            "records one on a GPU)")
UNSEEN = ("no Python call at this line reads a value back or waits (the read is inside a torch operation, "
          "e.g. a tensor passed where a number is expected, or the wait is not a read-back): nothing to serve")
TERMS = (  # key -> what it says, in the split of headroom minus charge
    ("moved", "the wait moved: GPU idle now charged to other waits"),
    ("gpu_work", "the GPU's own work changed"),
    ("host_after", "GPU idle charged to no wait changed (the host's work after the read)"),
    ("profiler", "the profiler's own host time, taken as the real step's profiled time over its profiler-free "
                 "time; the charge (taken from the profiled step) holds it where it lies in the charged gap"),
    ("rest", "the rest: profiled against profiler-free time"),
    ("window", "GPU busy change and the rest of opposite signs, each larger than the gap: read as the profiled "
               "windows differing (a stubbed step that runs ahead has the host's window); they say nothing apart"),
)


def _num(v) -> Optional[float]:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def match(site: str, inspect_sites: list) -> Optional[dict]:
    """The inspect record's site for a read's site: the same file and line, else (a site the trace named
    by its function) the same file and function."""
    s = try_parse(site)
    if s is None:
        return next((x for x in inspect_sites if x["site"] == site), None)
    parsed = [(x, try_parse(x["site"])) for x in inspect_sites]
    exact = [x for x, p in parsed if p and same_file(p.path, s.path) and p.line == s.line]
    if exact:
        return exact[0]
    return next((x for x, p in parsed if p and not p.exact and same_file(p.path, s.path) and p.function == s.function), None)


def _inside(row: dict, v: Optional[float]) -> Optional[bool]:
    return None if v is None or row.get("headroom_ms") is None else row["headroom_lo"] <= v <= row["headroom_hi"]


def with_charges(rows: list, base: dict) -> list:
    """Each row with its charge (from `base`, the real step's inspect record) and whether the two agree."""
    out = []
    for r in rows:
        hit = match(r["site"], base.get("sites") or [])
        charge = _num(hit["gpu_idle_ms"]) if hit else None
        out.append({**r, "charge_ms": charge, "blocked_ms": _num(hit["host_blocked_ms"]) if hit else None,
                    "charged_site": hit["site"] if hit else None, "agree": _inside(r, charge)})
    return out


def with_profiler_stretch(rec: dict) -> dict:
    """The record with each site's charge less the profiler's stretch of the step
    (results/rules/profiler_stretch.py: the real step's profiled time over `rec`'s profiler-free median)
    and whether the headroom's CI holds it."""
    parts = (rec.get("inspect") or {}).get("parts") or {}
    stretch = profiler_stretch.stretch_ms(parts.get("profiled_step_ms"), rec.get("step_ms"))
    sites = []
    for r in rec.get("sites") or []:
        free = profiler_stretch.less_stretch(r.get("charge_ms"), parts.get("gpu_idle_sync_caused_ms"), stretch)
        sites.append({**r, "charge_less_profiler_ms": free, "agree_less_profiler": _inside(r, free)})
    return {**rec, "sites": sites, "profiler_stretch_ms": stretch}


def with_unseen(rows: list, base: dict) -> list:
    """The rows, then a row for each of `base`'s sites no read matched (it cannot be stubbed: UNSEEN)."""
    taken = {r["charged_site"] for r in rows if r.get("charged_site")}
    extra = [{"site": x["site"], "kind": x.get("wait") or "", "per_step": x["per_step"], "varies": None,
              "stubbed": False, "why_not": UNSEEN, "charge_ms": _num(x["gpu_idle_ms"]),
              "blocked_ms": _num(x["host_blocked_ms"]), "charged_site": x["site"], "agree": None}
             for x in base.get("sites") or [] if x["site"] not in taken]
    return list(rows) + extra


def _reason(terms: dict, gap: float) -> str:
    """The largest term pulling the same way as the gap (any term where none does); the windows'
    artefact only where no other term does."""
    same_sign = {k: v for k, v in terms.items() if v * gap > 0 and k != "window"}
    same_sign = same_sign or {k: v for k, v in terms.items() if v * gap > 0} or terms
    return max(same_sign, key=lambda k: abs(same_sign[k]))


def _windows_apart(terms: dict, gap: float) -> dict:
    """GPU busy and the rest of opposite signs, each larger than the gap itself: the stubbed step ran
    ahead and its profiled window held less of the GPU's work; the two are read as one term, `window`."""
    g, r = terms.get("gpu_work", 0.0), terms.get("rest", 0.0)
    if g * r < 0 and min(abs(g), abs(r)) > abs(gap):
        terms = {k: v for k, v in terms.items() if k not in ("gpu_work", "rest")}
        terms["window"] = g + r
    return terms


def profiler_term(profiled_step_ms: Optional[float], step_ms: Optional[float]) -> float:
    """Minus the profiler's host time per step: the real step's profiled time over its profiler-free
    median (0 where it is not over, or either is missing)."""
    if _num(profiled_step_ms) is None or _num(step_ms) is None:
        return 0.0
    return -max(0.0, profiled_step_ms - step_ms)


def with_profiler_term(why: dict, profiled_step_ms: Optional[float], step_ms: Optional[float]) -> dict:
    """A split recorded without the profiler term, with it: taken out of the rest, the reason chosen again."""
    if "profiler" in why["terms"]:
        return why
    terms = dict(why["terms"])
    terms["profiler"] = profiler_term(profiled_step_ms, step_ms)
    terms["rest"] -= terms["profiler"]
    terms = _windows_apart(terms, why["gap_ms"])
    reason = _reason(terms, why["gap_ms"])
    return {**why, "terms": terms, "reason": reason, "reason_text": dict(TERMS)[reason]}


def explain(base: dict, stubbed: dict, row: dict, step_ms: Optional[float] = None) -> dict:
    """Headroom minus charge split in TERMS (ms per step; each term's share of the difference), from the
    real step's and the stubbed step's inspect records and the real step's profiler-free median
    `step_ms`, and the largest term as the reason.

    With the profiled step = GPU busy + GPU idle, and the idle split into charged and charged to no wait:
    -(change in profiled step) = charge - moved - change in GPU busy - change in uncharged idle, where
    moved = charged idle of the stubbed step minus the real step's other than this site's. The charge is
    taken from the profiled step, so it holds the profiler's own host time where that time lies in the
    charged gap: on the H200's gallery, in six one-wait cases (tensor_bool, list_to_device, host_split_sizes,
    blocks_to_device, max_item_mirror, decode_output_ids) the real step's profiled-over-profiler-free time
    was 53-97% of the charge's excess over the headroom (not in redundant_stream_sync, the seventh one-wait
    case charged above its CI). The rest is what none of these accounts for."""
    pb, ps = base["parts"], stubbed["parts"]
    charge = row["charge_ms"] or 0.0
    moved = ps["gpu_idle_sync_caused_ms"] - (pb["gpu_idle_sync_caused_ms"] - charge)
    uncharged = lambda p: p["gpu_idle_ms"] - p["gpu_idle_sync_caused_ms"]  # noqa: E731
    terms = {"moved": -moved, "gpu_work": -(ps["gpu_busy_ms"] - pb["gpu_busy_ms"]),
             "host_after": -(uncharged(ps) - uncharged(pb)),
             "profiler": profiler_term(pb.get("profiled_step_ms"), step_ms)}
    terms["rest"] = row["headroom_ms"] - charge - sum(terms.values())
    gap = row["headroom_ms"] - charge
    terms = _windows_apart(terms, gap)
    reason = _reason(terms, gap)
    before = {x["site"]: x["host_blocked_ms"] for x in base["sites"]}
    new_waits = [{"site": x["site"], "blocked_ms": x["host_blocked_ms"], "before_ms": before.get(x["site"])}
                 for x in stubbed["sites"] if x["site"] != row.get("charged_site")
                 and (_num(x["host_blocked_ms"]) or 0.0) > (_num(before.get(x["site"])) or 0.0) + 0.01]
    return {"gap_ms": gap, "terms": terms, "reason": reason, "reason_text": dict(TERMS)[reason],
            "new_waits": new_waits,
            "host_wait_ms": {"before": pb["host_blocked_ms"], "after": ps["host_blocked_ms"]}}


def validate(rec: dict, where: str = "headroom") -> dict:
    if not isinstance(rec, dict) or rec.get("kind") != KIND or rec.get("schema") != SCHEMA:
        raise ValueError(f"{where}: kind must be {KIND!r} with schema {SCHEMA}; got {rec.get('kind')!r}"
                         if isinstance(rec, dict) else f"{where}: a headroom record must be an object")
    for i, r in enumerate(rec.get("sites") or []):
        if not isinstance(r.get("site"), str) or not isinstance(r.get("stubbed"), bool):
            raise ValueError(f"{where}: sites[{i}] needs a string 'site' and a boolean 'stubbed'; got {r!r:.120}")
    return rec


# --- text ------------------------------------------------------------------------------------------------
def _ms(v) -> str:
    return "–" if _num(v) is None else f"{v:.3f}"


def verdict(r: dict) -> str:
    """agree / disagree and why, or why it was not stubbed; then the charge less the profiler's stretch
    against the same CI, where the record has it."""
    v = _verdict(r)
    free = r.get("charge_less_profiler_ms")
    if free is None or not r.get("stubbed") or r.get("headroom_ms") is None:
        return v
    return f"{v}; less the profiler's stretch of the step {free:.3f} ms, {'inside' if r['agree_less_profiler'] else 'outside'} the CI"


def _verdict(r: dict) -> str:
    if not r["stubbed"]:
        return "not stubbed: " + r["why_not"]
    if r.get("agree") is None:
        return "no charge to compare" if r.get("charge_ms") is None else "–"
    if r["agree"]:
        return "agree (the charge is inside the CI)"
    why = r.get("why")
    side = "above" if r["headroom_ms"] > (r["charge_ms"] or 0.0) else "below"
    if not why:
        return f"disagree: headroom {side} the charge"
    moved = "; new or longer waits at " + ", ".join(w["site"] for w in why["new_waits"]) if why["new_waits"] else ""
    return f"disagree: headroom {side} the charge by {abs(why['gap_ms']):.3f} ms, mostly {why['reason_text']} " \
           f"({why['terms'][why['reason']]:+.3f} ms){moved}"


def table_rows(rec: dict) -> list[dict]:
    rec = with_profiler_stretch(rec) if "profiler_stretch_ms" not in rec else rec
    return [{"site": r["site"], "call": r["kind"], "per step": r["per_step"], "charge ms": _ms(r.get("charge_ms")),
             "headroom ms [95% CI]": (f"{r['headroom_ms']:.3f} [{r['headroom_lo']:.3f}, {r['headroom_hi']:.3f}]"
                                      if r["stubbed"] else "–"), "verdict": verdict(r)} for r in rec["sites"]]


def text(rec: dict) -> str:
    lines = [f"headroom of {rec['label']} ({rec['target']}) on {rec['fingerprint'].get('gpu')}: step "
             f"{rec['step_ms']:.3f} ms ({rec['step_ms_lo']:.3f}–{rec['step_ms_hi']:.3f}), "
             f"{rec['options']['trials']} paired rounds"]
    for r in table_rows(rec):
        lines.append(f"  {r['site']}  [{r['call']}, {r['per step']:.2f}/step]  charge {r['charge ms']} ms  "
                     f"headroom {r['headroom ms [95% CI]']} ms  {r['verdict']}")
    if not rec["sites"]:
        lines.append("  no read-back site seen" + ("" if rec["device"] == "cuda" else " (no CUDA: no tensor lives on a device)"))
    return "\n".join(lines)


# --- the recorded study (studies/headroom/gallery_and_draft.py) ----------------------------------------------
def find_study(data_dir=None) -> Optional[Path]:
    """The newest <data>/headroom/*-headroom-*.json, else None."""
    folder = Path(data_dir if data_dir is not None else default_data_dir()) / STUDY_FOLDER
    files = sorted(folder.glob("*-headroom-*.json")) if folder.is_dir() else []
    return files[-1] if files else None


def load_study(path) -> dict:
    p = Path(path)
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: not a readable headroom study ({e})") from None
    if not isinstance(rec, dict) or rec.get("kind") != STUDY_KIND:
        raise ValueError(f"{p}: kind must be {STUDY_KIND!r}; got {rec.get('kind') if isinstance(rec, dict) else rec!r}")
    for r in rec.get("headroom") or []:
        if "error" not in r:
            validate(r, f"{p}: headroom[{r.get('case')!r}]")
            _split_with_the_profiler(r)
    rec["headroom"] = [r if "error" in r else with_profiler_stretch(r) for r in rec.get("headroom") or []]
    return {**rec, "path": str(p)}


def _split_with_the_profiler(r: dict) -> None:
    """A record made before the split had its profiler term gets it, from its own numbers."""
    profiled = ((r.get("inspect") or {}).get("parts") or {}).get("profiled_step_ms")
    for site in r.get("sites") or []:
        if site.get("why"):
            site["why"] = with_profiler_term(site["why"], profiled, r.get("step_ms"))


def recorded_study(data_dir=None) -> Optional[dict]:
    path = find_study(data_dir)
    return load_study(path) if path else None


def case_record(study: Optional[dict], case: str) -> Optional[dict]:
    """The headroom record of one measured case of the study (None when it is not there)."""
    return next((r for r in (study or {}).get("headroom") or [] if r.get("case") == case and "error" not in r), None)


def races_text(rep: Optional[dict]) -> str:
    """A race check's report (measure.races.check's dict) in words."""
    if not rep:
        return NO_STUDY
    if not rep.get("checked", True):
        return rep["note"]
    if rep["clean"]:
        return f"races: none in {rep['steps']} steps (outputs equal to the synchronized reference)"
    lines = [f"races: {len(rep['races'])} output(s) differ from the synchronized reference over {rep['steps']} steps"]
    return "\n".join(lines + [f"  step {x['step']}, output {x['output']}: {x['wrong']} of {x['of']} wrong; copy: {x['copy']}"
                              for x in rep["races"][:5]])


def study_races(study: Optional[dict], name: str, variant: str = "fix") -> Optional[dict]:
    """The race check's report of one race case of the study (the ones recorded with their report)."""
    return next((c.get("report") for c in (study or {}).get("race_cases") or []
                 if c.get("name") == name and c.get("variant") == variant), None)
