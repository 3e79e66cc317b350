"""How runs and points are named in every view: a point's label, a GPU's name, a run's short label."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import pandas as pd

from dspark_lab.printable import one_line

EP_MODE_LABELS = {"real": "real ranks", "predicate_only": "one GPU, predicate only", "predicted": "predicted"}


def point_label(row) -> str:
    """'EP 2 (real ranks) · batch 8 · gamma 4 · sglang_profile' for a row (Series or dict)."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    parts = [f"EP {get('ep_size')}", f"batch {get('batch_size')}", f"gamma {get('gamma')}"]
    mode = get("ep_mode")
    try:
        many = int(get("ep_size")) > 1
    except (TypeError, ValueError):
        many = False
    if many and mode not in EP_MODE_LABELS:  # one process at EP > 1 flips the predicate (older rows say nothing)
        mode = "predicate_only"
    if mode in EP_MODE_LABELS:  # how EP was run (schema.RANK_COLUMNS); nothing to say at EP 1
        parts[0] += f" ({EP_MODE_LABELS[mode]})"
    if get("workload") is not None:
        parts.append(str(get("workload")))
    return " · ".join(parts)


def rank_case_name(case: str) -> str:
    """A rank case named the same at every world size: 'all on_demand' (every rank alike), 'rank 0
    device_direct, the others non_blocking', else each rank's strategy in order; a host delay
    'delay=1,0' adds '; +1 ms on rank 0'."""
    strategies, _, delay = str(case).partition(" delay=")
    per = strategies.split(",")
    if len(set(per)) == 1:
        name = f"all {per[0]}"
    elif len(per) > 2 and len(set(per[1:])) == 1:
        name = f"rank 0 {per[0]}, the others {per[1]}"
    else:
        name = ", ".join(f"rank {i} {s}" for i, s in enumerate(per))
    late = [f"+{d} ms on rank {i}" for i, d in enumerate(delay.split(",")) if delay and float(d) != 0]
    return "; ".join([name, *late])


CPU_ONLY = "CPU only (no GPU)"


def gpu_name(gpu) -> str:
    """The GPU column as shown: a CPU-only run records gpu "none"."""
    g = "" if gpu is None or (isinstance(gpu, float) and math.isnan(gpu)) else str(gpu)
    return CPU_ONLY if g.lower() in ("", "none", "cpu") else g


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


def short_gpu(gpu) -> str:
    """'NVIDIA H200' -> 'H200' (labels stay short; tables keep the full name)."""
    g = gpu_name(gpu)
    return g[len("NVIDIA "):] if g.startswith("NVIDIA ") else g


def _when(at: str, n: int) -> str:
    """'2026-11-30T17:12:06+00:00' -> '11-30 17:12' (n=16) or '11-30 17:12:06' (n=19)."""
    s = str(at).replace("T", " ")
    return s[5:n] if len(s) >= n else s


def run_labels(headers: Sequence[dict], rows: pd.DataFrame, kinds: Optional[dict] = None,
               parts: Optional[dict] = None) -> dict:
    """run_id -> a short unique label naming the machine, the run's kind and when it started:
    "H200 · default sweep · 11-30 17:12", "H200 ×2 · EP real a2a_fixed · 11-30 17:47" (`kinds`:
    run_id -> kind name; `parts`: run_id -> what an EP recording's file holds: real ranks' dispatch).
    The header's `name`, when given at record time, is the label. Seconds, then an ordinal, are added
    only where labels would repeat (the run id never needs to be shown)."""
    info = _run_facts(headers, rows)
    kinds, parts = kinds or {}, parts or {}
    world = {str(h.get("run_id")): h.get("world_size") for h in headers}

    def label(rid: str, width: int) -> str:
        return one_line(_label(rid, width))  # every part comes from a run file: shown as one line

    def _label(rid: str, width: int) -> str:
        i = info[rid]
        if i.get("name"):  # the name given at record time (the time added only to break ties)
            return str(i["name"]) if width == 16 else f"{i['name']} · {_when(i['at'], width)}"
        who = short_gpu(i["gpu"])
        w = world.get(rid)
        if isinstance(w, int) and w > 1:
            who += f" ×{w}"
        part = parts.get(rid, "") if kinds.get(rid) == "EP real" else ""
        what = " ".join(p for p in (kinds.get(rid, ""), part) if p)
        return " · ".join(p for p in (who, what, _when(i["at"], width)) if p)

    labels = {rid: label(rid, 16) for rid in info}
    for width in (19, None):
        counts = pd.Series(list(labels.values())).value_counts()
        for rid in list(labels):
            if counts.get(labels[rid], 0) > 1:
                labels[rid] = label(rid, width) if width else labels[rid]
        if width is None:
            seen: dict = {}
            for rid in sorted(labels, key=lambda r: (str(info[r]["at"]), r)):
                lab = labels[rid]
                if counts.get(lab, 0) > 1:
                    seen[lab] = seen.get(lab, 0) + 1
                    labels[rid] = f"{lab} #{seen[lab]}"
    return labels
