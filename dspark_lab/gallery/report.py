"""Measure the gallery (each case and its fix), write or read a recorded gallery, and show it.

A recorded gallery is one JSON file (data/gallery/*.json, or $DSPARK_GALLERY_DATA):
    {"kind": "dspark_gallery", "schema": 1, "fingerprint": {...}, "recorded_at", "scale", "device",
     "steps", "rounds", "step_change_rule", "launched_work_rule",
     "cases": [{"name", "shape", "pr", "why", "documented_sites": [...],
                "variants": {"case": VARIANT, "fix": VARIANT}, "change": CHANGE}]}
Each case is measured on one state: both variants' profiled passes first, then paired rounds
(gallery/step_change.py) that give both step times and CHANGE (fix - case: ms and % with 95% CIs,
the per-round trial times, `same_rounds`). VARIANT holds the function, the documented counts, the
measured counts per step, the sites each witness named, the step-time parts, the GPU work the step
launches and the profiler-free step time with its CI (see `VARIANT_KEYS`). Galleries recorded
before the change came from the variants' own rounds lack `same_rounds`, `ms` and `launched_gpu_ms`.
Nothing here imports plotly or ipywidgets at module level: the GPU machines have neither.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Callable, Optional, Union

import pandas as pd
import torch

from dspark_lab import guard
from dspark_lab.measure import breakdown, probe, syncs, trace
from dspark_lab.measure.step import measure_step
from dspark_lab.gallery import cases as C
from dspark_lab.gallery import launched_work, step_change
from dspark_lab.config import choose_mode
from dspark_lab.gallery.registry import CASES, Case, get
from dspark_lab.results.facts import wait_kinds

KIND, SCHEMA = "dspark_gallery", 1
DATA_ENV = "DSPARK_GALLERY_DATA"
DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "gallery"
VARIANTS = ("case", "fix")
VARIANT_KEYS = (
    "function", "status", "error", "expected_syncs", "expected_d2h",
    "host_syncs_per_step",  # every host wait per step, the copy calls that blocked included: what the gallery documents
    "syncs_per_step", "blocking_copies_per_step", "readback_syncs_per_step",
    "d2h_per_step", "d2h_pageable_per_step", "h2d_pageable_per_step",
    "debug_sites",  # sync debug mode: "file:line function" -> per step
    "guard_sites",  # the guard in counting mode over one step: [[site, kind, witness, allowed], ...]
    "host_blocked_ms", "host_copy_ms", "gpu_idle_ms", "gpu_idle_after_sync_ms", "profiled_step_ms",
    "gpu_idle_sync_caused_ms",  # the sync's cost by notebook 01's rule (measure.breakdown.SYNC_COST_RULE)
    "gpu_idle_readback_caused_ms",  # the by-design readback's, by the same rule, apart (breakdown.readback_caused_per_step)
    "charge_ci_half_width_ms",  # half the 95% CI of the mean charge (the readback's included) over the profiled steps
    "wait_charges", "wait_note",  # per kind of wait: count, blocked and charged ms; the waits charged nothing and why
    "gpu_busy_ms", "host_launch_ms", "host_prep_ms", "host_other_ms",  # what else the fix may change
    "launched_gpu_ms",  # the GPU work the step launches (gallery/launched_work.py), wherever it ran
    "step_ms", "step_ms_lo", "step_ms_hi",  # profiler-free median over the case's paired rounds and its 95% CI
    "matches",  # measured == documented (host syncs and D2H copies); None where nothing can sync
)


def analyse(tr: dict) -> dict:
    """Counts and step-time parts of a `measure_step` trace. Every host wait is a sync and charged by
    one rule (measure.syncs.host_waits): a copy call that blocked by itself counts as one, its time as
    blocked time (`blocking_copies_per_step` counts those), with the charges by kind of wait."""
    ev = trace.events(tr)
    calls = syncs.sync_calls(ev)
    counts = syncs.counts_per_step(ev, calls)
    parts = breakdown.summary(ev, calls=calls)
    out = {k: counts[k] for k in ("syncs_per_step", "readback_syncs_per_step", "d2h_per_step",
                                  "d2h_pageable_per_step", "h2d_pageable_per_step")}
    out["blocking_copies_per_step"] = counts[syncs.SYNC_KIND_COLUMNS[syncs.COPY_WAIT]]
    out["host_syncs_per_step"] = out["syncs_per_step"]
    out.update({k: parts.get(k) for k in PART_KEYS})
    out["launched_gpu_ms"] = launched_work.mean_ms(ev)
    return out


PART_KEYS = ("host_blocked_ms", "host_copy_ms", "gpu_idle_ms", "gpu_idle_after_sync_ms", "profiled_step_ms",
             "gpu_idle_sync_caused_ms", "gpu_idle_readback_caused_ms", "charge_ci_half_width_ms", "gpu_busy_ms",
             "host_launch_ms", "host_prep_ms", "host_other_ms", "wait_charges", "wait_note")
SPLIT_RULE = ("the step-time change (fix - case) split in four (profiled steps): the GPU idle "
              "the case's waits caused, which the fix removes (notebook 01's rule); the GPU idle the fix's own waits "
              "still cause in its step; the change in GPU idle charged to no wait (host-bound and other idle: the gaps "
              "after a by-design read-back, which the rule charges nothing, and GPU waits for a slow host launch); "
              "and the rest, the change not seen as GPU idle (the profiled GPU busy change plus the difference "
              "between the profiled and the profiler-free change; launch and host-work changes, shown beside, act "
              "only through GPU idle). Where a step runs ahead, its profiled window is the host's and holds less "
              "than the GPU's step. The change is the paired one (gallery/step_change.py), from the same rounds as "
              "the step times; in a gallery recorded before those were one measurement, the medians' difference")


def split(a: dict, b: dict, change_ms: Optional[float] = None) -> dict:
    """SPLIT_RULE for a case's variant `a` and its fix `b` (ms per step; negative: the fix is faster).
    `change_ms`: the paired change (the case's `change`), else the step times' difference. None where
    a part was not recorded (galleries recorded before the caused idle was)."""
    def d(k):
        return None if a.get(k) is None or b.get(k) is None else b[k] - a[k]

    def uncharged(r):
        return None if r.get("gpu_idle_ms") is None else r["gpu_idle_ms"] - r["gpu_idle_sync_caused_ms"]
    change, caused = d("step_ms") if change_ms is None else change_ms, d("gpu_idle_sync_caused_ms")
    known = caused is not None
    no_wait = None if not known or uncharged(a) is None or uncharged(b) is None else uncharged(b) - uncharged(a)
    return {"step_change_ms": change, "sync_cost_ms": caused,
            "case_waits_ms": -a["gpu_idle_sync_caused_ms"] if known else None,
            "fix_waits_ms": b["gpu_idle_sync_caused_ms"] if known else None, "no_wait_idle_ms": no_wait,
            "other_changes_ms": None if change is None or not known else change - caused - (no_wait or 0.0),
            "launch_change_ms": d("host_launch_ms"), "host_work_change_ms": d("host_other_ms"),
            "prep_change_ms": d("host_prep_ms")}


def change_ms(c: dict) -> Optional[float]:
    """The case's paired change in ms where recorded from the variants' own rounds, else None."""
    ch = c.get("change") or {}
    return ch.get("ms") if ch.get("same_rounds") else None


def measure_variant(case: Case, variant: str, state: C.State, *, profile_steps: int = 10) -> dict:
    """The profiled pass of one variant: counts, sites, charges, launched work and the guard's sites.
    Its step time comes from the paired rounds after it (`record`)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
    fn = case.step if variant == "case" else case.fix
    rec = {k: None for k in VARIANT_KEYS}
    rec.update(function=fn.__name__, status="ok", error="",
               expected_syncs=case.expected_syncs if variant == "case" else case.fix_expected_syncs,
               expected_d2h=case.expected_d2h if variant == "case" else case.fix_expected_d2h)
    try:
        # One short profiler-free trial warms the step up; the step times are the rounds'.
        r = measure_step(lambda: fn(state), steps=2, trials=1, warmup=3, profile_steps=profile_steps)
        rec.update(analyse(r.trace))
        rec["debug_sites"] = r.debug_sites
        rec["guard_sites"] = []
        if state.device.type == "cuda":  # without CUDA the guard can only say it checked nothing
            with guard.no_host_syncs(count=True, allow=case.allow) as g:
                fn(state)
            rec["guard_sites"] = [[s.site, s.kind, s.seen_by, s.allowed] for s in g.syncs]
            rec["matches"] = bool(rec["host_syncs_per_step"] == rec["expected_syncs"]
                                  and rec["d2h_per_step"] == rec["expected_d2h"])
    except Exception as e:  # noqa: BLE001 -- one failing case must not lose the others' records
        rec.update(status="failed", error=f"{type(e).__name__}: {e}")
    return rec


def measure_case(case: Case, state: C.State, *, steps: int, rounds: int) -> dict:
    """One case on one state: both variants' profiled passes, then the paired rounds that give their
    step times and the change (gallery/step_change.py)."""
    variants = {v: measure_variant(case, v, state) for v in VARIANTS}
    out = {"name": case.name, "shape": case.shape, "pr": case.pr, "why": case.why,
           "documented_sites": case.sites(), "allow": list(case.allow), "variants": variants, "change": None}
    if any(r["status"] != "ok" for r in variants.values()):
        return out
    sync = torch.cuda.synchronize if state.device.type == "cuda" else None
    try:
        pr = step_change.paired_rounds(lambda: case.step(state), lambda: case.fix(state), rounds=rounds,
                                       steps=steps, sync=sync)
    except Exception as e:  # noqa: BLE001 -- the profiled passes are kept; the step times are not
        for r in variants.values():
            r.update(status="failed", error=f"paired rounds: {type(e).__name__}: {e}")
        return out
    for v in VARIANTS:
        variants[v].update(pr[v])
    out["change"] = pr["change"]
    return out


def record(names=None, *, device=None, scale: Optional[str] = None, steps: int = step_change.STEPS,
           rounds: int = step_change.ROUNDS, progress: Optional[Callable[[dict], None]] = None) -> dict:
    """Measure each case and its fix (measure_case, a fresh state per case); the dict written to a
    recorded gallery file. `scale`: by default the gallery's scale for the device (cases.default_scale:
    enough queued GPU work that a sync waits). `progress(case_record)` after each case."""
    names = list(names or CASES)
    scale = scale or C.default_scale(device)
    out = {"kind": KIND, "schema": SCHEMA, "fingerprint": probe.fingerprint(),
           "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "scale": scale, "steps": steps, "rounds": rounds, "step_change_rule": step_change.STEP_CHANGE_RULE,
           "launched_work_rule": launched_work.LAUNCHED_WORK_RULE, "cases": []}
    for name in names:
        case = get(name)
        state = C.make_state(device, scale)
        out["device"] = state.device.type
        out["cases"].append(measure_case(case, state, steps=steps, rounds=rounds))
        if progress is not None:
            progress(out["cases"][-1])
    out.setdefault("device", "cuda" if torch.cuda.is_available() else "cpu")
    return out


def save(rec: dict, path: Union[str, Path]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(rec, indent=1, default=float))
    return p


def _recorded_order(p: Path) -> tuple:
    """A gallery file's place among the recorded ones: by the stamp its name ends with, a name with the
    day only (<gpu>-gallery-<yyyymmdd>.json) counting as that day's start, before one with a time."""
    parts = p.stem.split("-")
    timed = len(parts) >= 2 and len(parts[-1]) == 4 and parts[-1].isdigit() and len(parts[-2]) == 8
    return (parts[-2], parts[-1]) if timed else (parts[-1], "") if parts else ("", "")


def find_recorded(path: Union[str, Path, None] = None) -> Path:
    """`path`, else $DSPARK_GALLERY_DATA, else the newest data/gallery/*.json (a file or a folder)."""
    src = Path(path or os.environ.get(DATA_ENV) or DATA_DIR)
    if src.is_dir():
        files = sorted(src.glob("*.json"), key=_recorded_order)
        if not files:
            raise ValueError(f"no recorded gallery (*.json) in {src}: record one with scripts/gpu_gallery.py "
                             f"or point {DATA_ENV} at one")
        return files[-1]
    if not src.is_file():
        raise ValueError(f"{DATA_ENV} / path: {src} is neither a gallery JSON file nor a folder of them")
    return src


def load(path: Union[str, Path, None] = None) -> dict:
    p = find_recorded(path)
    rec = json.loads(p.read_text())
    if rec.get("kind") != KIND:
        raise ValueError(f"{p}: kind must be {KIND!r}; got {rec.get('kind')!r}")
    rec["source"] = str(p)
    return rec


def check(rec: dict) -> list[str]:
    """Mismatches between measured and documented counts (empty when all match or nothing could sync)."""
    bad = []
    for c in rec["cases"]:
        for v, r in c["variants"].items():
            if r["status"] != "ok":
                bad.append(f"{c['name']}/{v}: {r['error']}")
            elif r["matches"] is False:
                bad.append(f"{c['name']}/{v}: host syncs {r['host_syncs_per_step']:g} (documented {r['expected_syncs']}), "
                           f"D2H {r['d2h_per_step']:g} (documented {r['expected_d2h']})")
    return bad


def table(rec: dict) -> pd.DataFrame:
    """One row per case: documented and measured host syncs, host blocked, the GPU idle the syncs caused
    (notebook 01's rule; None in galleries recorded before it was), step time, and SPLIT_RULE's parts."""
    rows = []
    for c in rec["cases"]:
        a, b = c["variants"]["case"], c["variants"]["fix"]
        row = {"case": c["name"], "from": texts(c)[0].split(" (")[0]}
        for tag, r in (("case", a), ("fix", b)):
            row[f"syncs {tag} (doc)"] = r["expected_syncs"]
            row[f"syncs {tag}"] = r["host_syncs_per_step"]
        sp = split(a, b, change_ms(c))
        row.update({"blocked ms case": a["host_blocked_ms"], "blocked ms fix": b["host_blocked_ms"],
                    "idle the sync caused ms case": a.get("gpu_idle_sync_caused_ms"),
                    "idle the sync caused ms fix": b.get("gpu_idle_sync_caused_ms"),
                    "step ms case": a["step_ms"], "step ms fix": b["step_ms"],
                    "change ms": sp["step_change_ms"], "of it the case's waits ms": sp["case_waits_ms"],
                    "of it the fix's own waits ms": sp["fix_waits_ms"],
                    "of it idle charged to no wait ms": sp["no_wait_idle_ms"],
                    "of it the rest ms": sp["other_changes_ms"],  # not seen as GPU idle (SPLIT_RULE)
                    "speed-up": (a["step_ms"] / b["step_ms"]) if a["step_ms"] and b["step_ms"] else None,
                    "matches": None if a["matches"] is None else bool(a["matches"] and b["matches"]),
                    "waits case": wait_kinds.charges_text(a.get("wait_charges")),
                    "waits charged nothing case": a.get("wait_note") or ""})
        rows.append(row)
    return pd.DataFrame(rows)


def texts(c: dict) -> tuple[str, str]:
    """A recorded case's source and explanation as the registry states them now (a recording keeps
    the texts of its day, which may since have been corrected); the recorded ones for a case the
    registry no longer has."""
    case = CASES.get(c["name"])
    return (case.pr, case.why) if case is not None else (c["pr"], c["why"])


def _fmt(x, unit="") -> str:
    return "n/a" if x is None else f"{x:.3f}{unit}" if isinstance(x, float) else f"{x}{unit}"


def case_text(rec: dict, name: str) -> str:
    """Plain-text view of one case: why, sync lines, costs, and the fix's effect."""
    c = next((c for c in rec["cases"] if c["name"] == name), None)
    if c is None:
        raise ValueError(f"case must be one of {', '.join(x['name'] for x in rec['cases'])}; got {name!r}")
    pr, why = texts(c)
    lines = [f"{c['name']}: {c['shape']}", f"from: {pr}", "", why, "",
             "documented sync lines: " + ", ".join(c["documented_sites"])]
    for tag in VARIANTS:
        r = c["variants"][tag]
        lines.append(f"\n[{tag}] {r['function']}" + ("" if r["status"] == "ok" else f"  FAILED: {r['error']}"))
        if r["status"] != "ok":
            continue
        lines.append(f"  host syncs/step {_fmt(r['host_syncs_per_step'])} (documented {r['expected_syncs']}; "
                     f"sync calls {_fmt(r['syncs_per_step'])}, blocking pageable copies {_fmt(r['blocking_copies_per_step'])}, "
                     f"by-design readback {_fmt(r['readback_syncs_per_step'])})")
        lines.append(f"  D2H copies/step {_fmt(r['d2h_per_step'])} (documented {r['expected_d2h']}), of them pageable {_fmt(r['d2h_pageable_per_step'])}")
        for site, n in (r["debug_sites"] or {}).items():
            lines.append(f"  sync debug mode: {site}  ({n:g} per step)")
        for site, kind, witness, allowed in r["guard_sites"] or []:
            lines.append(f"  guard: {site}  [{kind}, {witness}{', allowed' if allowed else ''}]")
        lines.append(f"  host blocked {_fmt(r['host_blocked_ms'], ' ms')}, GPU idle the syncs caused "
                     f"{_fmt(r.get('gpu_idle_sync_caused_ms'), ' ms')} (from each sync until the host is ahead again), "
                     f"GPU idle {_fmt(r['gpu_idle_ms'], ' ms')}, GPU busy {_fmt(r.get('gpu_busy_ms'), ' ms')} per profiled step")
        lines.append(f"  step {_fmt(r['step_ms'], ' ms')} (95% CI {_fmt(r['step_ms_lo'])}-{_fmt(r['step_ms_hi'])}, no profiler)")
    a, b = c["variants"]["case"], c["variants"]["fix"]
    if a["step_ms"] and b["step_ms"]:
        lines.append(f"\nfix: {a['step_ms'] / b['step_ms']:.2f}x step time, host syncs {_fmt(a['host_syncs_per_step'])} -> {_fmt(b['host_syncs_per_step'])}")
        lines += split_lines(split(a, b, change_ms(c)))
    if rec.get("device") != "cuda":
        lines.append("recorded without CUDA: nothing can synchronize, so every count is zero by construction")
    return "\n".join(lines)


def split_lines(sp: dict) -> list[str]:
    """SPLIT_RULE's parts in words (ms per step, negative: the fix is faster)."""
    if sp["sync_cost_ms"] is None:
        return ["  the split of the change needs the idle the syncs caused, which this recording lacks: record it again"]
    no_wait = "n/a" if sp["no_wait_idle_ms"] is None else f"{sp['no_wait_idle_ms']:+.3f} ms"
    return [f"  step time {sp['step_change_ms']:+.3f} ms: the case's waits' caused idle {sp['case_waits_ms']:+.3f} ms, "
            f"the fix's own waits' caused idle {sp['fix_waits_ms']:+.3f} ms (still in its step), GPU idle charged to no "
            f"wait {no_wait}, the fix's other changes {sp['other_changes_ms']:+.3f} ms (launches "
            f"{_fmt(sp['launch_change_ms'], ' ms')}, other host work {_fmt(sp['host_work_change_ms'], ' ms')}, host prep "
            f"{_fmt(sp['prep_change_ms'], ' ms')}, profiled)"]


class GalleryBackend:
    """Recorded (a gallery file) or live (measure a case on this machine's GPU when asked)."""

    def __init__(self, mode: str = "recorded", path=None, scale: Optional[str] = None):
        if mode not in ("recorded", "live"):
            raise ValueError(f"mode must be one of recorded, live; got {mode!r}")
        self.mode, self.scale = mode, scale or C.default_scale()
        if mode == "recorded":
            self.rec = load(path)
        else:
            self.rec = {"kind": KIND, "schema": SCHEMA, "fingerprint": probe.fingerprint(), "scale": scale,
                        "device": "cuda" if torch.cuda.is_available() else "cpu", "cases": [], "source": "live"}

    def names(self) -> list[str]:
        return [c["name"] for c in self.rec["cases"]] if self.mode == "recorded" else list(CASES)

    def ensure(self, name: str) -> dict:
        """The record (one case); measured now in live mode, once."""
        have = {c["name"] for c in self.rec["cases"]}
        if name not in have:
            if self.mode == "recorded":
                raise ValueError(f"case must be one of {', '.join(sorted(have))}; got {name!r}")
            self.rec["cases"] += record([name], scale=self.scale)["cases"]
        return self.rec

    def describe(self) -> str:
        fp = self.rec["fingerprint"]
        where = f"recorded {self.rec.get('recorded_at', '')} from {self.rec['source']}" if self.mode == "recorded" else "live"
        return f"{self.mode} gallery ({where}); GPU {fp.get('gpu')}, torch {fp.get('torch')}, CUDA {fp.get('cuda')}; scale {self.rec['scale']}"

    def text(self, name: str) -> str:
        return case_text(self.ensure(name), name)

    def table(self) -> pd.DataFrame:
        """All cases; in live mode the ones not yet measured are measured first."""
        for name in self.names():
            self.ensure(name)
        return table(self.rec)

    def widget(self):
        """A dropdown to pick the case and its view (needs ipywidgets)."""
        import ipywidgets as w

        pick = w.Dropdown(options=self.names(), description="case")
        out = w.Output()

        def show(_=None):
            out.clear_output()
            with out:
                print(self.text(pick.value))

        pick.observe(show, names="value")
        show()
        return w.VBox([pick, out])


def backend(path=None) -> GalleryBackend:
    """Live on a CUDA machine unless DSPARK_LAB_MODE=recorded; else recorded."""
    return GalleryBackend(choose_mode(), path)
