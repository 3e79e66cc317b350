"""An inspected step (results.record.inspect_record) as the kit's figures draw a point: its trials
as rows, and the PointView of one or more steps side by side. Torch-free."""
from __future__ import annotations

import pandas as pd

from dspark_lab.results.record import schema
from dspark_lab.results.record.inspect_record import POINT_ID
from dspark_lab.results.viewmodels.frames import fingerprint_label
from dspark_lab.results.viewmodels.point_view import PointView, judged_trials


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def rows(rec: dict) -> pd.DataFrame:
    """One row per trial in the run-row columns the figures read: the step's label as the
    strategy, its counts and parts (per profiled step) on every row, the fingerprint, and the waits by
    kind and why a wait is charged nothing (the record's "waits") as the run rows' text columns."""
    fp = rec["fingerprint"]
    base = {"run_id": rec.get("recorded_at") or rec["label"], "point_id": POINT_ID, "strategy": rec["label"],
            "status": "ok", "recorded_at": rec.get("recorded_at"),
            "disturbed": False,  # inspect shows every trial: it has no strategies' medians to judge against
            **{k: fp.get(k) for k in schema.MACHINE_KEYS if k in fp}}
    base.update({k: _num(v) for k, v in rec["counts"].items() if isinstance(v, (int, float)) or v is None})
    base["sync_count_mismatch"] = rec["counts"].get("sync_count_mismatch")
    base.update({k: _num(v) for k, v in rec["parts"].items()})
    waits = rec.get("waits") or {}  # absent in records from before the kinds of wait were named
    base.update(wait_charges=waits.get("charges"), wait_note=waits.get("note"))
    return pd.DataFrame([{**base, "trial": i, "step_ms": float(t)} for i, t in enumerate(rec["trials"])])


def view(*recs: dict) -> PointView:
    """The PointView of one or more inspected steps (each drawn as a "strategy"), for the kit's
    per-point figures: figures.step_breakdown(view), figures.sync_counts(view), figures.timeline(view)."""
    if not recs:
        raise ValueError("view needs at least one inspect record")
    labels = [r["label"] for r in recs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"each step drawn together needs its own label; got {labels}")
    all_rows = pd.concat([rows(r) for r in recs], ignore_index=True)
    all_rows["run_id"] = "inspect"  # one "run": the steps are set side by side as strategies
    ok = judged_trials(all_rows)
    segs = pd.DataFrame([{"run_id": "inspect", "point_id": POINT_ID, "strategy": r["label"], "lane": s[0], "part": s[1],
                          "start_ms": float(s[2]), "end_ms": float(s[3]), "label": s[4]}
                         for r in recs for s in r["timeline"]],
                        columns=["run_id", "point_id", "strategy", "lane", "part", "start_ms", "end_ms", "label"])
    return PointView(rows=all_rows, ok=ok, kept=ok[~ok["disturbed"]], failed=all_rows.iloc[0:0], note="",
                     labels={"inspect": "inspect"}, run_ids=("inspect",), fingerprint=fingerprint_label(all_rows),
                     point=" vs ".join(r["target"] for r in recs), segments=segs)
