"""How runs and points are named in every view: a point's label, a GPU's name, a run's short label."""
from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

EP_MODE_LABELS = {"real": "real ranks", "predicate_only": "one GPU, predicate only", "predicted": "predicted"}


def point_label(row) -> str:
    """'EP 2 (real ranks) · batch 8 · gamma 4 · sglang_profile' for a row (Series or dict)."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    parts = [f"EP {get('ep_size')}", f"batch {get('batch_size')}", f"gamma {get('gamma')}"]
    mode = get("ep_mode")
    if mode in EP_MODE_LABELS:  # how EP was run (schema.RANK_COLUMNS); nothing to say at EP 1
        parts[0] += f" ({EP_MODE_LABELS[mode]})"
    if get("workload") is not None:
        parts.append(str(get("workload")))
    return " · ".join(parts)


def gpu_name(gpu) -> str:
    """The GPU column as shown: a CPU-only run records gpu "none"."""
    g = "" if gpu is None or (isinstance(gpu, float) and math.isnan(gpu)) else str(gpu)
    return "CPU only (no GPU)" if g.lower() in ("", "none", "cpu") else g


def _run_facts(headers: Sequence[dict], rows: pd.DataFrame) -> dict:
    """run_id -> {name, gpu, at}: from the headers, else from the first row of a run without one."""
    info: dict[str, dict] = {}
    for h in headers:
        fp = h.get("fingerprint") or h  # a header record, or a flat {run_id, gpu, recorded_at, ...}
        info[str(h.get("run_id"))] = {"name": h.get("name"), "gpu": fp.get("gpu"),
                                      "at": h.get("created_at") or h.get("recorded_at") or ""}
    if "run_id" in rows.columns and not rows.empty:
        for r in rows.drop_duplicates("run_id").itertuples():
            given = getattr(r, "run_label", None)  # rows that already carry their label keep it
            info.setdefault(str(r.run_id), {"name": given if isinstance(given, str) else None,
                                            "gpu": getattr(r, "gpu", None), "at": getattr(r, "recorded_at", "") or ""})
    return info


def _when(at: str, n: int) -> str:
    s = str(at).replace("T", " ")
    return s[:16] if n == 16 else s[:19]


def run_labels(headers: Sequence[dict], rows: pd.DataFrame) -> dict:
    """run_id -> a short unique label: the header's `name` when given at record time, else the GPU
    with the date and time the run started (seconds, then the run id, added only to break ties)."""
    info = _run_facts(headers, rows)
    labels = {rid: (str(i["name"]) if i.get("name") else f"{gpu_name(i['gpu'])} {_when(i['at'], 16)}".strip())
              for rid, i in info.items()}
    for width in (19, None):
        counts = pd.Series(list(labels.values())).value_counts()
        for rid, lab in list(labels.items()):
            if counts.get(lab, 0) > 1:
                i = info[rid]
                labels[rid] = (f"{gpu_name(i['gpu'])} {_when(i['at'], 19)}" if width and not i.get("name")
                               else f"{lab} [{rid}]")
    return labels
