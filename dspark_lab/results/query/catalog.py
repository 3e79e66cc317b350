"""The recorded runs as a list: their order, one row of facts per run, the per-run table, the
machines, and the filters that choose runs (`Runs.select`)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Sequence

import pandas as pd

from dspark_lab.results.rules.labels import gpu_name
from dspark_lab.results.record.schema import MACHINE_KEYS
from dspark_lab.printable import one_line
from dspark_lab.results.rules.selection import failed_rows

MAX_COMPARED = 4  # runs drawn side by side by default (report, panel "all selected"); the rest in tables
INFO_COLUMNS = ["run_id", "label", "kind", "part", "name", "file", *MACHINE_KEYS, "created"]


def started(headers: Sequence[dict]) -> dict:
    """run_id -> when the run started, as its header says ("" when it says nothing)."""
    return {str(h.get("run_id")): str(h.get("created_at") or h.get("recorded_at") or "") for h in headers}


def run_order(headers: Sequence[dict], rows: pd.DataFrame) -> list[str]:
    """Every run (of the rows, then of headers without rows), oldest start first, then by id."""
    when = started(headers)
    ids = list(pd.unique(rows["run_id"].astype(str))) if len(rows) else []
    seen = set(ids)
    ids += [r for r in when if r not in seen]
    return sorted(ids, key=lambda r: (when.get(r, ""), r))


def newest_started(headers: Sequence[dict], run_ids: Iterable[str]) -> list[str]:
    """These runs, the most recently started first (the headline's "most recent run")."""
    when = started(headers)
    return sorted(run_ids, key=lambda r: (when.get(r, ""), r), reverse=True)


def run_info(rows: pd.DataFrame, headers: Sequence[dict], labels: dict, run_ids: Sequence[str],
             kinds: Optional[dict] = None, parts: Optional[dict] = None) -> pd.DataFrame:
    """One row per run (in `run_ids` order): run_id, label, kind, part (of an EP recording), name,
    file (its stem), gpu, driver, cuda, torch, created; from the header, else from the run's first row."""
    kinds, parts = kinds or {}, parts or {}
    by_id = {str(h.get("run_id")): h for h in headers}
    firsts = rows.drop_duplicates("run_id")
    first = firsts.set_index(firsts["run_id"].astype(str)) if len(rows) else pd.DataFrame()
    out = []
    for rid in run_ids:
        h = by_id.get(rid)
        if h is not None:
            fp = h.get("fingerprint") or h
            vals = {k: fp.get(k) for k in MACHINE_KEYS}
            created, name = h.get("created_at") or h.get("recorded_at") or "", h.get("name")
            # one_line: a name that is not valid UTF-8 (surrogates), which pyarrow's strings refuse
            file = one_line(Path(str(h["path"])).stem) if h.get("path") else ""
        else:
            file = ""
            r = first.loc[rid] if rid in first.index else {}
            vals = {k: r.get(k) for k in MACHINE_KEYS}
            created, name = (r.get("recorded_at") if len(r) else "") or "", None
        out.append({"run_id": rid, "label": labels.get(rid, rid), "kind": kinds.get(rid, ""),
                    "part": parts.get(rid, ""), "name": one_line(name) if name else "", "file": file,
                    **{k: "unknown" if v is None or v != v else str(v) for k, v in vals.items()},
                    "created": str(created).replace(" ", "T")})
    return pd.DataFrame(out, columns=INFO_COLUMNS)


def ranked_run_ids(info: pd.DataFrame) -> list[str]:
    """Runs in the order views offer them: the latest run of each machine (GPU, driver, CUDA,
    torch), newest machine first; then every other run, newest first."""
    info = info.iloc[::-1]  # newest first (run_info is oldest first)
    latest = info.drop_duplicates(list(MACHINE_KEYS))["run_id"].tolist()
    first = set(latest)
    return latest + [r for r in info["run_id"] if r not in first]


def machines(info: pd.DataFrame) -> pd.DataFrame:
    """One row per machine (GPU, driver, CUDA, torch): how many runs, first and last, the latest run."""
    out = []
    for key, g in info.groupby(list(MACHINE_KEYS), sort=False):
        out.append({"GPU": gpu_name(key[0]), "driver": key[1], "CUDA": key[2], "torch": key[3], "runs": len(g),
                    "first": g["created"].min()[:16].replace("T", " "),
                    "last": g["created"].max()[:16].replace("T", " "), "latest run": g["label"].iloc[-1]})
    df = pd.DataFrame(out, columns=["GPU", "driver", "CUDA", "torch", "runs", "first", "last", "latest run"])
    return df.sort_values("last", ascending=False, kind="stable").reset_index(drop=True)


def _per_run_counts(rows: pd.DataFrame) -> tuple[dict, dict, dict]:
    """Per run: points recorded, failed points, and its "model / workload" pairs."""
    rid = rows["run_id"].astype(str)
    points = rows.groupby(rid, sort=False)["point_id"].nunique().to_dict() if len(rows) else {}
    bad = failed_rows(rows)
    failed = bad.groupby(bad["run_id"].astype(str), sort=False)["point_id"].nunique().to_dict() if len(bad) else {}
    mw: dict = {}
    if len(rows) and "model" in rows.columns and "workload" in rows.columns:
        pairs = pd.DataFrame({"r": rid, "m": rows["model"], "w": rows["workload"]}).drop_duplicates()
        for r, m, w in zip(pairs["r"], pairs["m"], pairs["w"]):
            mw.setdefault(r, set()).add(f"{m} / {w}")
    return points, failed, mw


def _grid_text(sweep: dict, run_rows: pd.DataFrame) -> str:
    """The points a run recorded: its header's grid, else the EP sizes, batches and gammas of its rows."""
    if all(isinstance(sweep.get(k), (list, tuple)) for k in ("ep_size", "batch_size", "gamma")):
        return f"EP {sweep['ep_size']} × batch {sweep['batch_size']} × gamma {sweep['gamma']}"
    if run_rows is None or run_rows.empty:
        return ""
    vals = {k: sorted({int(v) for v in run_rows[k].dropna()}) for k in ("ep_size", "batch_size", "gamma")}
    text = f"EP {vals['ep_size']} × batch {vals['batch_size']} × gamma {vals['gamma']}"
    if "dispatch" in run_rows.columns:
        d = sorted(v for v in run_rows["dispatch"].dropna().astype(str).unique() if v)
        text += f" · dispatch {', '.join(d)}" if d else ""
    return text


def run_table(rows: pd.DataFrame, headers: Sequence[dict], labels: dict, run_ids: Sequence[str],
              disturbance: pd.DataFrame, kinds: Optional[dict] = None) -> pd.DataFrame:
    """One row per run: label, machine, when, points (failed too), model / workload, sweep, and at
    how many points the whole run is disturbed (`disturbance`: noise.run_disturbance's table)."""
    by_id = {str(h.get("run_id")): h for h in headers}
    kinds = kinds or {}
    by_run = dict(tuple(rows.groupby(rows["run_id"].astype(str), sort=False))) if len(rows) else {}
    points, failed, mw = _per_run_counts(rows)
    rd = disturbance
    disturbed_at = rd[rd["run_disturbed"]].groupby("run_id")["point_id"].nunique().to_dict() if len(rd) else {}
    judged = rd[rd["reference_run_id"].notna()].groupby("run_id")["point_id"].nunique().to_dict() if len(rd) else {}
    out = []
    for rid in run_ids:
        h = by_id.get(rid, {})
        fp = h.get("fingerprint") or h
        sweep = h.get("sweep") or {}
        out.append({
            "run": labels.get(rid, rid), "kind": kinds.get(rid, ""), "run id": rid, "GPU": gpu_name(fp.get("gpu")),
            "driver": fp.get("driver"), "CUDA": fp.get("cuda"), "torch": fp.get("torch"),
            "recorded": h.get("created_at") or h.get("recorded_at"), "points": int(points.get(rid, 0)),
            "failed points": int(failed.get(rid, 0)),
            "model / workload": ", ".join(sorted(mw.get(rid, ()))),
            "sweep": _grid_text(sweep if isinstance(sweep, dict) else {}, by_run.get(rid)),
            # results.rules.noise.RUN_RULE: points where this whole run is disturbed, of those with a peer run to judge by
            "disturbed run at": (f"{int(disturbed_at.get(rid, 0))} of {int(judged[rid])} points"
                                 if rid in judged else "not judged"),
        })
    return pd.DataFrame(out)
