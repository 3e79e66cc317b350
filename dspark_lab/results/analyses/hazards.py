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
    "pinned_freed_in_flight": ("pinned source", "a pinned source freed while its copy is queued, a new pinned tensor made at once",
                               True, "the caching host allocator holds a freed block until the copies that read it have run"),
    "graph_staging_reused": ("CUDA graph", "a graph captured from a pooled staging buffer that the pool then gives to another inference",
                             False, "capture records the staging buffer's host address; replay copies whatever is there now"),
    "graph_staging_owned": ("CUDA graph", "the graph owns its staging buffer, refilled each step after the last replay's event",
                            True, "the captured address is this step's buffer, and no copy still reads it when it is refilled"),
}


# form or curve -> (where it happened, what happened): the real-world story each measurement stands for.
STORIES = {
    "pinned_reused": ("vllm-ascend #16428", "DSpark on Ascend reused host staging arrays that already held the next "
                      "batch: one prefill step had 6,640 wrong token IDs, 454 wrong request indices and 6,669 wrong "
                      "query offsets, then NaNs"),
    "window": ("1bit-MONSTER #2344", "a pinned source overwritten in flight: corruption fell from about 100% at once "
               "to 99.97% at 1 us, 0.45% at 5 us and 0.03% at 100 us of refill delay; a race with a window of "
               "microseconds is flaky by nature"),
    "pageable_race": ("ashalliants/ninfer-3090 #44", "a synchronous cudaMemcpy from pageable memory returns once its "
                      "source is staged, before the DMA to the destination ends; a kernel on a cudaStreamNonBlocking "
                      "stream then read the destination early: 146 of 200 raced on an idle RTX 3090, none at or "
                      "below about 256 KiB (the form measured here differs: the source overwritten after a "
                      "non-blocking copy returns)"),
    "graph_staging_reused": ("onnxruntime #32121", "a staging buffer captured in a CUDA graph records its host "
                             "address; another inference reuses the block and the replay copies the wrong bytes"),
    "pinned_freed_in_flight": ("pytorch #130785", "`A = rand(pin_memory=True); B = A.cuda(non_blocking=True); "
                               "return B` returns the pinned block before the copy ends (\"at least 94 instances\" "
                               "in open source); PyTorch's caching host allocator records the copy's event and "
                               "reuses the block only after it"),
}


def validate(rec: dict, where: str = "hazards") -> dict:
    machine_files.check_head(rec, HAZARDS_KIND, HAZARDS_SCHEMA, where, fingerprint=False)
    for i, c in enumerate(rec.get("forms") or []):
        if c.get("form") not in FORMS:
            raise ValueError(f"{where}: forms[{i}].form must be one of {', '.join(FORMS)}; got {c.get('form')!r}")
        if c.get("error") and c.get("wrong") is None and isinstance(c.get("n"), int):
            continue  # a form that could not run here, recorded with its error
        if not isinstance(c.get("wrong"), int) or not isinstance(c.get("n"), int) or not 0 <= c["wrong"] <= c["n"]:
            raise ValueError(f"{where}: forms[{i}] needs integers 0 <= wrong <= n; got {c.get('wrong')!r} of {c.get('n')!r}")
    for key, x, bad_of in (("window", "delay_us", "wrong"), ("pageable_race", "bytes", "raced")):
        for i, p in enumerate(rec.get(key) or []):
            if key == "window" and not isinstance(p.get("queued_us", 0.0), (int, float)):
                raise ValueError(f"{where}: window[{i}] needs a number 'queued_us'; got {p!r}")
            if not isinstance(p.get(x), (int, float)) or not isinstance(p.get(bad_of), int) or not 0 <= p[bad_of] <= p.get("n", -1):
                raise ValueError(f"{where}: {key}[{i}] needs a number {x!r} and integers 0 <= {bad_of} <= n; got {p!r}")
    return rec


def load(path) -> dict:
    return {**validate(machine_files.read_json(path, "hazards record"), str(path)), "path": str(path)}


def recorded(data_dir=None) -> list[dict]:
    """Every hazards record under <data>/machines/, by file name (a damaged one skipped with a warning)."""
    return machine_files.load_all(HAZARDS_KIND, load, data_dir)


def save(rec: dict, path) -> Path:
    return machine_files.save_json(validate(rec), path)


def _count(c: dict) -> str:
    return f"failed here: {c['error']}" if c.get("error") else f"{c['wrong']} of {c['n']}"


def table(rec: dict) -> pd.DataFrame:
    """One row per form: case, the form, safe or not, wrong values out of n, and why."""
    rows = [{"case": FORMS[c["form"]][0], "form": FORMS[c["form"]][1], "safe": "safe" if FORMS[c["form"]][2] else "PITFALL",
             "wrong": _count(c), "why": FORMS[c["form"]][3]} for c in rec.get("forms", [])]
    rows += [{"case": "the kit's strategies", "form": s["strategy"], "safe": "strategy", "wrong": f"{s['wrong']} of {s['n']}",
              "why": "the scalar each step, consumed on the GPU in stream order"} for s in rec.get("strategies", [])]
    return pd.DataFrame(rows, columns=["case", "form", "safe", "wrong", "why"])


def surprises(rec: dict) -> list[str]:
    """Forms whose count contradicts what they teach: a pitfall with no wrong value (the host did
    not get ahead: queue more work) or a safe form or a strategy with any."""
    out = []
    for c in rec.get("forms", []):
        if c.get("error"):
            out.append(f"{c['form']}: could not run here ({c['error']})")
            continue
        safe = FORMS[c["form"]][2]
        if safe and c["wrong"]:
            out.append(f"{c['form']}: {c['wrong']} wrong of {c['n']} in a safe form")
        if not safe and not c["wrong"]:
            out.append(f"{c['form']}: no wrong value: the host did not run ahead of the GPU")
    out += [f"strategy {s['strategy']}: {s['wrong']} wrong of {s['n']}" for s in rec.get("strategies", []) if s["wrong"]]
    return out


# --- the curves and the stories ----------------------------------------------------------------------
def window_frame(rec: dict) -> pd.DataFrame:
    """The race's window: GPU work queued ahead of the copy (us; 0 where a record predates it), delay
    between copy and refill (us), wrong values, n, and the share wrong."""
    f = pd.DataFrame([{"queued_us": 0.0, **p} for p in rec.get("window") or []],
                     columns=["queued_us", "delay_us", "wrong", "n"])
    return f.assign(share=f["wrong"] / f["n"])


def window_closes_us(w: pd.DataFrame):
    """The smallest measured delay from which no refill was wrong (None: wrong at every delay)."""
    closed = None
    for r in w.sort_values("delay_us", ascending=False).itertuples():
        if r.wrong:
            break
        closed = float(r.delay_us)
    return closed


def race_frame(rec: dict) -> pd.DataFrame:
    """Pageable non-blocking copies by size: raced of n."""
    f = pd.DataFrame(rec.get("pageable_race") or [], columns=["bytes", "raced", "n"])
    return f.assign(share=f["raced"] / f["n"])


def never_raced_below(rec: dict):
    """The largest size at and below which no pageable copy raced (None: the smallest raced or none measured)."""
    best = None
    for r in race_frame(rec).sort_values("bytes").itertuples():
        if r.raced:
            break
        best = int(r.bytes)
    return best


def _size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def curves_in_words(rec: dict) -> list[str]:
    """The window and the pageable threshold, measured, in a sentence each ([] when not in the record)."""
    out = []
    w = window_frame(rec)
    parts = []
    for q, g in w.groupby("queued_us", sort=True):
        pts = ", ".join(f"{r.share:.1%} at {r.delay_us:g} us" for r in g.itertuples())
        closes = window_closes_us(g)
        shut = f"; none wrong from {closes:g} us on" if closes is not None else "; wrong at every delay measured"
        ahead = f"{q:g} us of GPU work queued ahead" if q else "nothing queued ahead"
        parts.append(f"{ahead}: wrong {pts}{shut}")
    if parts:
        out.append(f"refill after the copy is issued ({int(w['n'].iloc[0])} copies per point); " + "; ".join(parts))
    r = race_frame(rec)
    if len(r):
        limit = never_raced_below(rec)
        raced = r[r["raced"] > 0]
        above = r[r["bytes"] >= raced["bytes"].min()] if len(raced) else raced
        first = f"; from {_size(int(above['bytes'].min()))} up, {int(above['raced'].sum())} of {int(above['n'].sum())} raced" if len(raced) else ""
        out.append("pageable non-blocking copies overwritten at once: " + (
            f"none raced at or below {_size(limit)}" if limit else "the smallest size already raced") + first
            + (" (none raced at any size measured)" if not len(raced) else ""))
    return out


def stories(rec: dict) -> pd.DataFrame:
    """Each real-world story beside what this machine measured for its form or curve."""
    by_form = {c["form"]: _count(c) if c.get("error") else f"{c['wrong']} of {c['n']} wrong" for c in rec.get("forms", [])}
    words = curves_in_words(rec)
    measured = {**by_form, "window": words[0] if rec.get("window") else "not in this record",
                "pageable_race": words[-1] if rec.get("pageable_race") else "not in this record"}
    rows = [{"where": src, "what happened": what, "measured here": measured.get(key, "not in this record")}
            for key, (src, what) in STORIES.items()]
    return pd.DataFrame(rows, columns=["where", "what happened", "measured here"])
