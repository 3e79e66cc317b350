"""What each fix can break, torch-free: the hazard forms, and the recorded counts of wrong values.

Each fix of the case removes a host sync by letting the host run ahead of the GPU; each has a form
that then delivers a wrong value. `dspark_lab.measure.hazards` runs every form below N times with
GPU work queued before each step (so the host really is ahead) and counts the wrong values; the
record (kind HAZARDS_KIND, under data/machines/) is read here for notebook 04 and the report.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from dspark_lab.results.record import machine_files

HAZARDS_KIND = "dspark-lab hazards"
HAZARDS_SCHEMA = 1
# form -> (case, what the step does, safe?, why)
FORMS = {
    "pinned_reused": ("pinned source", "one pinned host scalar reused: buf.fill_(i); dev.copy_(buf, non_blocking=True)",
                      False, "the copy reads buf when the GPU reaches it, after the host has overwritten it"),
    "pinned_fresh": ("pinned source", "a fresh pinned tensor per step: torch.tensor(i, pin_memory=True) copied non-blocking",
                     True, "PyTorch's caching host allocator records the copy's stream and reuses the block only after it"),
    "pinned_double_buffer": ("pinned source", "two pinned buffers, each reused only after the event of its last copy",
                             True, "event.synchronize() before the refill: the host waits only when two steps ahead"),
    "graph_python_value": ("CUDA graph", "a Python value captured in the graph: out.fill_(n) captured, n changed, replayed",
                           False, "capture records the value as a kernel argument; replay repeats it forever"),
    "graph_device_buffer": ("CUDA graph", "the graph reads a device buffer updated before each replay: buf.fill_(n); replay",
                            True, "the graph holds the buffer's address; its contents are this step's"),
    "d2h_before_event": ("device-to-host read", "a non-blocking D2H into pinned memory read at once",
                         False, "the copy has not run yet: the host reads what was there before"),
    "d2h_after_event": ("device-to-host read", "the same copy read after its event's synchronize()",
                        True, "the event completes only after the copy"),
}


def validate(rec: dict, where: str = "hazards") -> dict:
    if not isinstance(rec, dict) or rec.get("kind") != HAZARDS_KIND:
        raise ValueError(f"{where}: field 'kind' must be {HAZARDS_KIND!r}")
    if rec.get("schema") != HAZARDS_SCHEMA:
        raise ValueError(f"{where}: field 'schema' must be {HAZARDS_SCHEMA}; got {rec.get('schema')!r}")
    for i, c in enumerate(rec.get("forms") or []):
        if c.get("form") not in FORMS:
            raise ValueError(f"{where}: forms[{i}].form must be one of {', '.join(FORMS)}; got {c.get('form')!r}")
        if not isinstance(c.get("wrong"), int) or not isinstance(c.get("n"), int) or not 0 <= c["wrong"] <= c["n"]:
            raise ValueError(f"{where}: forms[{i}] needs integers 0 <= wrong <= n; got {c.get('wrong')!r} of {c.get('n')!r}")
    return rec


def load(path) -> dict:
    return {**validate(machine_files.read_json(path, "hazards record"), str(path)), "path": str(path)}


def recorded(data_dir=None) -> list[dict]:
    """Every hazards record under <data>/machines/, by file name (a damaged one skipped with a warning)."""
    return machine_files.load_all(HAZARDS_KIND, load, data_dir)


def save(rec: dict, path) -> Path:
    return machine_files.save_json(validate(rec), path)


def table(rec: dict) -> pd.DataFrame:
    """One row per form: case, the form, safe or not, wrong values out of n, and why."""
    rows = [{"case": FORMS[c["form"]][0], "form": FORMS[c["form"]][1], "safe": "safe" if FORMS[c["form"]][2] else "PITFALL",
             "wrong": f"{c['wrong']} of {c['n']}", "why": FORMS[c["form"]][3]} for c in rec.get("forms", [])]
    rows += [{"case": "the kit's strategies", "form": s["strategy"], "safe": "strategy", "wrong": f"{s['wrong']} of {s['n']}",
              "why": "the scalar each step, consumed on the GPU in stream order"} for s in rec.get("strategies", [])]
    return pd.DataFrame(rows, columns=["case", "form", "safe", "wrong", "why"])


def surprises(rec: dict) -> list[str]:
    """Forms whose count contradicts what they teach: a pitfall with no wrong value (the host did
    not get ahead: queue more work) or a safe form or a strategy with any."""
    out = []
    for c in rec.get("forms", []):
        safe = FORMS[c["form"]][2]
        if safe and c["wrong"]:
            out.append(f"{c['form']}: {c['wrong']} wrong of {c['n']} in a safe form")
        if not safe and not c["wrong"]:
            out.append(f"{c['form']}: no wrong value: the host did not run ahead of the GPU")
    out += [f"strategy {s['strategy']}: {s['wrong']} wrong of {s['n']}" for s in rec.get("strategies", []) if s["wrong"]]
    return out
