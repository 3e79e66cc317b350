"""What each recorded run is (its kind, from results.facts.run_kinds), and which runs are parts of
one EP recording. Views pick runs by kind so each lesson draws data that can show it.

A run says its kind in its header (`run_kind`: the code that starts it states it and the writer checks
it, results/record/header.py); only a file older than the field has its kind guessed from its recorded
shape (derive_kind): the header's grid, its EP mode, its stage.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional, Sequence

import pandas as pd

from dspark_lab.results.facts.run_kinds import EP_KINDS, KINDS, USED_BY

# The grids of the CLI's sweep presets (run.sweep.PRESETS; tests/test_recorded_lessons.py checks they agree), to
# name the kind of files recorded before headers carried `run_kind`.
PRESET_GRIDS = {
    "default_sweep": ((1, 8), (1, 8, 32, 128), (2, 4, 8)),
    "quick_sweep": ((1, 8), (1, 32), (4,)),
}
# EP files of one machine started within this many seconds of the previous one are one recording
# (studies/ep/real_ranks.py wrote one file per dispatch mode, then the one-GPU twin and the prediction).
RECORDING_GAP_S = 180


def _grid(sweep: dict) -> Optional[tuple]:
    try:
        g = tuple(tuple(int(v) for v in sweep[k]) for k in ("ep_size", "batch_size", "gamma"))
    except (KeyError, TypeError, ValueError):
        return None
    return g


def derive_kind(header: dict, run_rows: Optional[pd.DataFrame] = None) -> str:
    """The kind of one run: its header's `run_kind`, else (a file older than the field) what its shape says."""
    given = header.get("run_kind")
    if isinstance(given, str) and given in KINDS:
        return given
    rows = run_rows if run_rows is not None else pd.DataFrame()
    modes = set(rows["ep_mode"].dropna().astype(str)) if "ep_mode" in rows.columns else set()
    mode = header.get("ep_mode")
    if mode == "predicted" or "predicted" in modes:
        return "ep_predicted"
    if mode == "real" or "real" in modes:
        return "ep_real"
    sweep = header.get("sweep") if isinstance(header.get("sweep"), dict) else {}
    if mode == "predicate_only" and "world_size" in header:
        return "ep_one_gpu"
    stage = str(header.get("stage") or sweep.get("stage") or "")
    if "sync_cost" in stage or isinstance(sweep.get("points"), list):
        return "sync_cost"
    if "preset" in sweep:
        return "preset_check"
    if "live" in stage:
        return "live"
    grid = _grid(sweep)
    for kind, g in PRESET_GRIDS.items():
        if grid == g:
            return kind
    n_points = prod(len(a) for a in grid) if grid else (
        rows.drop_duplicates(["ep_size", "batch_size", "gamma"]).shape[0] if len(rows) else 0)
    if n_points == 1 and ("adaptive" in header or "reference" in stage):
        return "reference"
    return "sweep" if n_points >= 2 else "single_point"


@dataclass(frozen=True)
class RunKinds:
    """Per run: its kind key, what its file holds of an EP recording (`part`), and its recording."""

    kind: dict
    part: dict
    recording: dict

    def names(self) -> dict:
        """run_id -> the kind as views say it."""
        return {r: KINDS[k] for r, k in self.kind.items()}


def describe_runs(headers: Sequence[dict], rows: pd.DataFrame) -> RunKinds:
    """Every run's kind, part and recording, from the headers and one pass over the rows."""
    by_run = dict(tuple(rows.groupby(rows["run_id"].astype(str), sort=False))) if len(rows) else {}
    kind = {str(h.get("run_id")): derive_kind(h, by_run.get(str(h.get("run_id")))) for h in headers}
    for rid, g in by_run.items():
        kind.setdefault(rid, derive_kind({}, g))
    part = {str(h.get("run_id")): part_name(h, kind[str(h.get("run_id"))], by_run.get(str(h.get("run_id"))))
            for h in headers}
    return RunKinds(kind, part, recordings(headers, kind))


def part_name(header: dict, kind: str, run_rows: Optional[pd.DataFrame] = None) -> str:
    """What an EP recording's file holds: its dispatch mode(s), "prediction", "one-GPU twin"."""
    if kind == "ep_predicted":
        return "prediction"
    if kind == "ep_one_gpu":
        return "one-GPU twin"
    if kind != "ep_real":
        return ""
    d = header.get("dispatch")
    if not d and run_rows is not None and "dispatch" in run_rows.columns:
        d = sorted(v for v in run_rows["dispatch"].dropna().astype(str).unique() if v)
    d = [d] if isinstance(d, str) else list(d or [])
    via = " (torchrun)" if header.get("launcher") == "torchrun" else ""
    return ", ".join(str(x) for x in d) + via


def recordings(headers: Sequence[dict], kinds: dict) -> dict:
    """run_id -> recording id for EP runs: files of one machine (GPU) started within
    RECORDING_GAP_S of the previous one are one recording (its id: the first file's run id), or the
    header's own `recording_id` when it has one."""
    eps = []
    for h in headers:
        rid = str(h.get("run_id"))
        if kinds.get(rid) not in EP_KINDS:
            continue
        fp = h.get("fingerprint") if isinstance(h.get("fingerprint"), dict) else {}
        when = pd.to_datetime(h.get("created_at"), errors="coerce", utc=True)
        eps.append((str(fp.get("gpu")), when, rid, h.get("recording_id")))
    never = pd.Timestamp.min.tz_localize("UTC")
    eps.sort(key=lambda e: (e[0], e[1] if pd.notna(e[1]) else never, e[2]))
    out, prev = {}, None
    for gpu, when, rid, given in eps:
        if isinstance(given, str) and given:
            out[rid] = given
            continue
        same = (prev is not None and prev[0] == gpu and pd.notna(when) and pd.notna(prev[1])
                and (when - prev[1]).total_seconds() <= RECORDING_GAP_S)
        out[rid] = out[prev[2]] if same else rid
        prev = (gpu, when, rid)
    return out


def kind_table(runs) -> "pd.DataFrame":
    """One row per kind recorded (a results.Runs): how many runs, the latest's label, what uses it."""
    rows = []
    for key, name in KINDS.items():
        ids = runs.runs_of_kind(key)
        if ids:
            rows.append({"kind": name, "runs": len(ids), "latest": runs.label_of(ids[0]), "used by": USED_BY[key]})
    return pd.DataFrame(rows, columns=["kind", "runs", "latest", "used by"])


def kind_table_markdown(runs) -> str:
    t = kind_table(runs)
    lines = ["| kind | runs | latest | used by |", "|---|---|---|---|"]
    lines += [f"| {r.kind} | {r.runs} | {r.latest} | {r._4} |" for r in t.itertuples()]
    return "\n".join(lines)
