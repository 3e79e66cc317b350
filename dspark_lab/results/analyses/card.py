"""The platform card, torch-free: what each kind of copy does on one machine, by size and source.

A card is a JSON file under data/machines/ (kind CARD_KIND) written by `dspark_lab.measure.card`:
the machine's fingerprint and one record per cell (direction, source, size, queue depth) holding
the raw host times of the call over its repeats, the copy's GPU time (CUDA events), and what sync
debug mode and the trace's blocking CUDA calls saw. Everything else is derived here, once, at load
(`frame`): the median host time, its spread and the verdict by VERDICT_RULE. Comparing two cards,
the size at which a copy starts to wait, and the seeds' claims read against the card live here too,
so that notebooks and the report can show a recorded card without a GPU.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Optional, Sequence

import pandas as pd

from dspark_lab.results.analyses import card_host
from dspark_lab.results.facts import strategy_table
from dspark_lab.results.facts.citations import cite
from dspark_lab.results.record import machine_files
from dspark_lab.results.record.paths import machine_file_name

CARD_KIND = "dspark-lab platform card"
CARD_SCHEMA = 1
DIRECTIONS = {"h2d": "host to device", "d2h": "device to host", "d2d": "device to device (control)"}
# source key -> (direction, how the copy is made, largest size in bytes measured or None for all).
# Python lists and read-backs are capped: building or parsing a 16M-element list costs the host
# seconds of Python, which says nothing about the copy.
SOURCES = {
    "pageable_to_nb": ("h2d", "pageable .to(dev, non_blocking=True)", None),
    "pinned_to_nb": ("h2d", "pinned .to(dev, non_blocking=True)", None),
    # A 4-byte "strided" source has one element and is contiguous: only from 8 B up is it strided.
    "pinned_strided_to_nb": ("h2d", "pinned, non-contiguous (from 8 B) .to(dev, non_blocking=True)", None),
    "pageable_copy": ("h2d", "pageable dev.copy_(src) (blocking)", None),
    "pinned_copy": ("h2d", "pinned dev.copy_(src) (blocking)", None),
    # From a list, the call's host time includes the Python list's conversion (at 1 MB most of it).
    "tensor_device": ("h2d", "torch.tensor(scalar | list, device=dev)", 1 << 20),
    "into_pageable_nb": ("d2h", "into pageable: host.copy_(dev, non_blocking=True)", None),
    "into_pinned_nb": ("d2h", "into pinned: host.copy_(dev, non_blocking=True)", None),
    "to_cpu_nb": ("d2h", "dev.to('cpu', non_blocking=True) (torch pins the result)", None),
    "into_pinned_strided_nb": ("d2h", "into pinned, non-contiguous (from 8 B): host[::2].copy_(dev, non_blocking=True)", None),
    "cpu": ("d2h", "dev.cpu() (blocking, pageable)", None),
    "readback": ("d2h", ".item() | .tolist()", 1 << 20),
    "d2d_copy_nb": ("d2d", "dev2.copy_(dev, non_blocking=True)", None),
    "d2d_copy": ("d2d", "dev2.copy_(dev)", None),
    "fill": ("d2d", "dev.fill_(n) (no copy: persistent_fill's form)", None),
}
SIZES = (4, 64, 1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)

AT_ONCE, FOR_COPY, WAITS = "returns at once", "blocks for the copy itself", "waits for the queued work"
VERDICTS = (AT_ONCE, FOR_COPY, WAITS)
COPY_FLOOR_US = 50.0  # below this a copy's own time is lost in the call's overhead
VERDICT_RULE = (f"verdict of a cell, from the median host time of the call over its repeats: '{WAITS}' when "
                f"GPU work was queued (Q ms) and the host time exceeds the same call's with the queue empty by "
                f"more than Q/2 (a call slow by itself is not a wait); else '{FOR_COPY}' when the copy "
                f"runs at least {COPY_FLOOR_US:.0f} µs on the GPU (CUDA events) and the call's fastest repeat "
                f"is at least half of that and exceeds the same call's fastest at its smallest size by at least "
                f"{COPY_FLOOR_US / 2:.0f} µs (it grows with the copy, every time); else '{AT_ONCE}'.")
# Why the last condition: two H200 cards taken minutes apart (2026-12-01) disagreed on 68 of 258 cells,
# all with the queue empty and small sizes: one process saw 50-90 µs calls and >= 50 µs event-timed
# 4-byte copies (an idle GPU at low clocks), the other 15-25 µs. A cost that does not grow with the
# size, or that some repeats do not pay (the idle GPU's calls are bimodal: 7 or 50 µs for a fill_),
# is not the copy.

# How each of the kit's strategies makes the scalar, as a cell of the card (4 bytes): strategy ->
# (direction, source), from each row's card_cell (strategies without one are not on the card).
STRATEGY_CELLS = strategy_table.Column(lambda row: row.card_cell)


def check_strategy_cells() -> None:
    """Every strategy's card_cell names a cell this card measures (checked at import for the built-ins)."""
    for s, (d, src) in STRATEGY_CELLS.items():
        if src not in SOURCES or SOURCES[src][0] != d:
            raise ValueError(f"strategy {s!r}: card_cell ({d!r}, {src!r}) is not a cell of the card; allowed: "
                             + ", ".join(f"({v[0]!r}, {k!r})" for k, v in SOURCES.items()))


check_strategy_cells()
SCALAR_BYTES = 4

# A verdict at the rule's edge: a repeat alone would get another verdict, or a quantity the verdict
# turns on lies within EDGE_MARGIN of its threshold. Two H200 cards taken 40 minutes apart
# (2026-12-01, after the rule above) differed on 5 of 258 cells, each at the edge on one card: copies
# of 46 vs 71 µs on the GPU at the 50 µs floor, repeats of one call from 67 to 292 µs against a
# 219 µs copy, a 64 MB copy waiting 4.0 vs 5.7 ms longer with 10 ms queued against the 5 ms bound.
EDGE_MARGIN = 0.25
EDGE_RULE = (f"a verdict is at the rule's edge when one of the cell's repeats alone would get another verdict, or when "
             f"a quantity it turns on lies within {EDGE_MARGIN:.0%} of its threshold (the wait over the empty queue "
             f"against Q/2, the copy's GPU time against {COPY_FLOOR_US:.0f} µs, the fastest repeat against half the "
             f"copy, its growth over the smallest size against {COPY_FLOOR_US / 2:.0f} µs); two cards differ firmly on "
             "a cell only where neither verdict is at the edge.")

FRAME_COLUMNS = ("direction", "source", "how", "size_bytes", "size", "queued_ms", "queue", "host_us", "host_us_min",
                 "host_us_max", "reps", "copy_gpu_us", "verdict", "edge", "debug_syncs", "trace_syncs", "gpu_copies",
                 "error")


def size_label(n: int) -> str:
    """4 B, 64 B, 1 KB, 16 KB, 1 MB, 64 MB (powers of 1024)."""
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def verdict(host_us: float, queued_ms: float, copy_gpu_us: float, empty_host_us: float = 0.0,
            smallest_host_us: float = 0.0, fastest_us: Optional[float] = None) -> str:
    """One cell's verdict by VERDICT_RULE: `host_us` the median host time, `fastest_us` the fastest
    repeat (default: the median); `empty_host_us` the same call's median with the queue empty (0
    where the card has no such cell); `smallest_host_us` the same call's fastest at the smallest
    size measured, same queue (0: unknown)."""
    if any(not isinstance(v, (int, float)) or math.isnan(v) for v in (host_us, queued_ms)):
        raise ValueError(f"host_us and queued_ms must be numbers; got {host_us!r}, {queued_ms!r}")
    base = _known_or_zero(empty_host_us)
    if queued_ms > 0 and host_us - base > queued_ms * 1e3 / 2:
        return WAITS
    small = _known_or_zero(smallest_host_us)
    fast = host_us if fastest_us is None or math.isnan(fastest_us) else fastest_us
    if (not math.isnan(copy_gpu_us) and copy_gpu_us >= COPY_FLOOR_US and fast >= copy_gpu_us / 2
            and fast - small >= COPY_FLOOR_US / 2):
        return FOR_COPY
    return AT_ONCE


def _known_or_zero(v) -> float:
    """A reference host time, 0 where the card has none (missing or NaN)."""
    return 0.0 if not isinstance(v, (int, float)) or math.isnan(v) else v


def _near(x: float, threshold: float) -> bool:
    return threshold > 0 and abs(x - threshold) < EDGE_MARGIN * threshold


def edge(host_us: Sequence[float], queued_ms: float, copy_gpu_us: float, empty_host_us: float = 0.0,
         smallest_host_us: float = 0.0) -> str:
    """Why the cell's verdict (VERDICT_RULE, from the repeats `host_us`) is at the rule's edge
    (EDGE_RULE), or "" when it is firm. The other arguments as in `verdict`."""
    xs = [float(x) for x in host_us]
    if not xs:
        return ""
    med, fast = _median(xs), min(xs)
    v = verdict(med, queued_ms, copy_gpu_us, empty_host_us, smallest_host_us, fast)
    alone = sorted({verdict(x, queued_ms, copy_gpu_us, empty_host_us, smallest_host_us, x) for x in xs} - {v})
    if alone:
        return f"a repeat alone would be '{alone[0]}' ({min(xs):.0f}-{max(xs):.0f} µs over {len(xs)} repeats)"
    base, small = _known_or_zero(empty_host_us), _known_or_zero(smallest_host_us)
    if queued_ms > 0 and _near(med - base, queued_ms * 1e3 / 2):
        return f"waited {(med - base) / 1e3:.1f} ms over the empty queue, the bound is {queued_ms / 2:g} ms"
    if v == WAITS or math.isnan(copy_gpu_us):
        return ""
    # The three conditions of FOR_COPY: (passes, near its threshold, why). A FOR_COPY verdict is at
    # the edge when any of them is near; an AT_ONCE one when every condition it fails is near.
    conds = [(copy_gpu_us >= COPY_FLOOR_US, _near(copy_gpu_us, COPY_FLOOR_US),
              f"the copy ran {copy_gpu_us:.0f} µs on the GPU, the floor is {COPY_FLOOR_US:.0f} µs"),
             (fast >= copy_gpu_us / 2, _near(fast, copy_gpu_us / 2),
              f"the fastest repeat took {fast:.0f} µs, half the copy is {copy_gpu_us / 2:.0f} µs"),
             (fast - small >= COPY_FLOOR_US / 2, _near(fast - small, COPY_FLOOR_US / 2),
              f"the call grew {fast - small:.0f} µs over the smallest size, the bound is {COPY_FLOOR_US / 2:.0f} µs")]
    if v == FOR_COPY:
        return next((why for _, near, why in conds if near), "")
    failing = [(near, why) for ok, near, why in conds if not ok]
    return "; ".join(why for _, why in failing) if failing and all(near for near, _ in failing) else ""


def queue_name(queued_ms: float) -> str:
    """"empty" or "queued": the key two cards are compared by (their depths may differ)."""
    return "queued" if queued_ms > 0 else "empty"


def validate(card: dict, where: str = "card") -> dict:
    """The card, or a ValueError naming the field that is wrong and what it may be."""
    machine_files.check_head(card, CARD_KIND, CARD_SCHEMA, where)
    cells = card.get("cells")
    if not isinstance(cells, list) or not cells:
        raise ValueError(f"{where}: field 'cells' must be a non-empty list")
    for i, c in enumerate(cells):
        if c.get("direction") not in DIRECTIONS:
            raise ValueError(f"{where}: cells[{i}].direction must be one of {', '.join(DIRECTIONS)}; got {c.get('direction')!r}")
        if c.get("source") not in SOURCES:
            raise ValueError(f"{where}: cells[{i}].source must be one of {', '.join(SOURCES)}; got {c.get('source')!r}")
        if not isinstance(c.get("size_bytes"), int) or c["size_bytes"] <= 0:
            raise ValueError(f"{where}: cells[{i}].size_bytes must be a positive integer; got {c.get('size_bytes')!r}")
        q = c.get("queued_ms")
        if not isinstance(q, (int, float)) or q < 0:
            raise ValueError(f"{where}: cells[{i}].queued_ms must be a number >= 0; got {q!r}")
        if not c.get("error") and (not isinstance(c.get("host_us"), list) or not c["host_us"]):
            raise ValueError(f"{where}: cells[{i}].host_us must be a non-empty list of µs (or the cell has an 'error')")
    return card


def load(path) -> dict:
    """A card file, validated; its path under "path"."""
    return {**validate(machine_files.read_json(path, "card"), str(path)), "path": str(path)}


def is_card_file(path: Path) -> bool:
    return machine_files.kind_of(path) == CARD_KIND


def recorded(data_dir=None) -> list[dict]:
    """Every card under <data>/machines/, by file name; a damaged card is skipped with a warning
    naming the file and the field, never stopping the views that read the others."""
    return machine_files.load_all(CARD_KIND, load, data_dir)


def label(card: dict) -> str:
    fp = card.get("fingerprint", {})
    return f"{fp.get('gpu', '?')} · driver {fp.get('driver', '?')} · torch {fp.get('torch', '?')} · {str(card.get('recorded', ''))[:10]}"


same_machine = machine_files.same_machine  # a card of this GPU and driver


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return float("nan") if n == 0 else float(s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)


def frame(card: dict) -> pd.DataFrame:
    """One row per cell with its derived columns (FRAME_COLUMNS): the median host time and its
    spread over the repeats, and the verdict by VERDICT_RULE (None for a cell that failed)."""
    rows = []
    empty = {(c["direction"], c["source"], c["size_bytes"]): _median([float(x) for x in c.get("host_us") or []])
             for c in card["cells"] if float(c["queued_ms"]) == 0}
    smallest: dict = {}  # (direction, source, queued_ms) -> (size, median host time) of the smallest size
    for c in card["cells"]:
        key, size = (c["direction"], c["source"], float(c["queued_ms"])), c["size_bytes"]
        if c.get("host_us") and (key not in smallest or size < smallest[key][0]):
            smallest[key] = (size, min(float(x) for x in c["host_us"]))
    for c in card["cells"]:
        xs = [float(x) for x in c.get("host_us") or []]
        med = _median(xs)
        gpu = float(c.get("copy_gpu_us", float("nan")))
        q = float(c["queued_ms"])
        base = empty.get((c["direction"], c["source"], c["size_bytes"]), 0.0)
        small = smallest.get((c["direction"], c["source"], q), (0, 0.0))[1]
        rows.append(dict(
            direction=c["direction"], source=c["source"], how=SOURCES[c["source"]][1], size_bytes=c["size_bytes"],
            size=size_label(c["size_bytes"]), queued_ms=q, queue=queue_name(q), host_us=med,
            host_us_min=min(xs) if xs else float("nan"), host_us_max=max(xs) if xs else float("nan"), reps=len(xs),
            copy_gpu_us=gpu, verdict=None if c.get("error") or not xs else verdict(med, q, gpu, base, small, min(xs)),
            edge="" if c.get("error") or not xs else edge(xs, q, gpu, base, small),
            debug_syncs=c.get("debug_syncs"), trace_syncs=c.get("trace_syncs"),
            gpu_copies=", ".join(c.get("gpu_copies") or []), error=c.get("error") or ""))
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


def _queued_depth(f: pd.DataFrame) -> float:
    q = f.loc[f["queued_ms"] > 0, "queued_ms"]
    if q.empty:
        raise ValueError("the card has no cell with GPU work queued (queued_ms > 0)")
    return float(q.max())


def cell(f: pd.DataFrame, direction: str, source: str, size_bytes: int, queued_ms: Optional[float] = None) -> pd.Series:
    """One cell of a card's frame (default: the deepest queue), or a KeyError naming it."""
    q = _queued_depth(f) if queued_ms is None else float(queued_ms)
    hit = f[(f["direction"] == direction) & (f["source"] == source) & (f["size_bytes"] == size_bytes) & (f["queued_ms"] == q)]
    if hit.empty:
        raise KeyError(f"the card has no cell {direction}/{source}/{size_label(size_bytes)} with {q:g} ms queued")
    return hit.iloc[0]


def wait_threshold(f: pd.DataFrame, direction: str = "h2d", source: str = "pageable_to_nb") -> dict:
    """Where a copy starts to wait for the queued work (deepest queue): the smallest size that waits
    and the largest size below it that does not; None for either when there is none."""
    q = _queued_depth(f)
    g = f[(f["direction"] == direction) & (f["source"] == source) & (f["queued_ms"] == q) & f["verdict"].notna()]
    g = g.sort_values("size_bytes")
    waits = g[g["verdict"] == WAITS]
    first = int(waits["size_bytes"].iloc[0]) if len(waits) else None
    below = g[g["size_bytes"] < first] if first is not None else g
    last_free = int(below["size_bytes"].iloc[-1]) if len(below) and (below["verdict"] != WAITS).all() else None
    return {"direction": direction, "source": source, "queued_ms": q, "first_waits": first, "last_at_once": last_free,
            "sizes": [int(s) for s in g["size_bytes"]], "waiting": [int(s) for s in waits["size_bytes"]]}


def threshold_in_words(t: dict) -> str:
    how = SOURCES[t["source"]][1]
    if t["first_waits"] is None:
        return (f"{how} never waited for {t['queued_ms']:g} ms of queued GPU work, up to "
                f"{size_label(max(t['sizes']))}" if t["sizes"] else f"{how}: not measured")
    larger = [n for n in t["sizes"] if n >= t["first_waits"]]
    gaps = "" if t.get("waiting", larger) == larger else (  # not a threshold: name the sizes that wait
        " (not at every larger size: waits at " + ", ".join(size_label(n) for n in t["waiting"]) + ")")
    if t["last_at_once"] is None:
        return (f"{how} waits for {t['queued_ms']:g} ms of queued GPU work from the smallest size measured "
                f"({size_label(t['first_waits'])}){gaps}")
    return (f"{how} returns at once up to {size_label(t['last_at_once'])} and waits for {t['queued_ms']:g} ms of "
            f"queued GPU work from {size_label(t['first_waits'])}{gaps}")


def strategy_verdicts(card: dict) -> dict:
    """strategy -> the verdict of its copy's cell (4 bytes, deepest queue) on this card."""
    f = frame(card)
    out = {}
    for s, (d, src) in STRATEGY_CELLS.items():
        try:
            out[s] = cell(f, d, src, SCALAR_BYTES)["verdict"]
        except (KeyError, ValueError):
            out[s] = None
    return out


def compare(a: dict, b: dict) -> pd.DataFrame:
    """Two cards cell by cell, keyed by direction, source, size and queue ("empty" / "queued":
    their depths may differ): both verdicts, host times and edges (EDGE_RULE), whether the verdicts
    differ, and whether they differ firmly (neither at the edge)."""
    key = ["direction", "source", "size_bytes", "queue"]
    fa, fb = frame(a), frame(b)
    cols = key + ["queued_ms", "host_us", "verdict", "edge"]
    m = fa[cols + ["how", "size"]].merge(fb[cols], on=key, how="outer", suffixes=("_a", "_b"), indicator=True)
    m["how"] = m["source"].map(lambda s: SOURCES[s][1])
    m["size"] = m["size_bytes"].map(size_label)
    m["only_in"] = m["_merge"].map({"left_only": "a", "right_only": "b", "both": ""})
    m["differs"] = (m["_merge"] == "both") & (m["verdict_a"] != m["verdict_b"])
    m["differs_firmly"] = m["differs"] & (m["edge_a"].fillna("") == "") & (m["edge_b"].fillna("") == "")
    m["host_side"] = m["differs"] & card_host.host_side(a, b)  # card_host.HOST_SIDE_RULE
    return m.drop(columns="_merge").sort_values(key).reset_index(drop=True)


def compare_lines(a: dict, b: dict, max_listed: int = 40) -> list[str]:
    """The comparison in words: the two machines, how many cells differ, and each that does."""
    m = compare(a, b)
    both = m[m["only_in"] == ""]
    diff = both[both["differs"]].sort_values("differs_firmly", ascending=False, kind="stable")
    firm = int(diff["differs_firmly"].sum())
    out = [f"a: {label(a)}", f"b: {label(b)}",
           f"{len(both)} cells on both cards; {len(diff)} with a different verdict: {firm} firmly, "
           f"{len(diff) - firm} where a verdict is at the rule's edge"
           + (f"; {int((m['only_in'] != '').sum())} on one card only" if (m["only_in"] != "").any() else "")]
    hosts = card_host.host_differences(a, b)
    if hosts:
        out.append(f"same GPU and driver, another host ({'; '.join(hosts)}): each difference is marked [host-side]")
    for r in diff.head(max_listed).itertuples():
        why = (" [host-side]" if r.host_side else "") + ("" if r.differs_firmly else " — at the edge: ") + "; ".join(
            f"{k} {e}" for k, e in (("a", r.edge_a), ("b", r.edge_b)) if isinstance(e, str) and e)
        out.append(f"  {r.direction} {r.how} {r.size} ({r.queue}): a {r.verdict_a} ({r.host_us_a:.0f} µs, "
                   f"{r.queued_ms_a:g} ms queued) | b {r.verdict_b} ({r.host_us_b:.0f} µs, {r.queued_ms_b:g} ms queued){why}")
    if len(diff) > max_listed:
        out.append(f"  … and {len(diff) - max_listed} more")
    if len(diff) > firm:
        out.append(f"  ({EDGE_RULE})")
    return out


def table(card: dict, queue: str = "queued") -> pd.DataFrame:
    """Sources × sizes for one queue: "verdict-letter host-µs" per cell (w waits, c blocks for the
    copy, · at once; ~ after the letter: at the rule's edge, EDGE_RULE), for a terminal."""
    if queue not in ("empty", "queued"):
        raise ValueError(f"queue must be 'empty' or 'queued'; got {queue!r}")
    f = frame(card)
    f = f[f["queue"] == queue]
    mark = {WAITS: "w", FOR_COPY: "c", AT_ONCE: "·"}
    f = f.assign(text=[("err" if v is None else f"{mark[v]}{'~' if e else ''} {h:.0f}")
                       for v, h, e in zip(f["verdict"], f["host_us"], f["edge"])],
                 row=f["direction"] + " " + f["source"])
    t = f.pivot_table(index="row", columns="size_bytes", values="text", aggfunc="first")
    order = [f"{d} {s}" for s, (d, _, _) in SOURCES.items() if f"{d} {s}" in t.index]
    t = t.loc[order]
    t.columns = [size_label(c) for c in t.columns]
    return t.fillna("")


def unseen_waits(f: pd.DataFrame) -> pd.DataFrame:
    """Cells that wait for the queued work although neither sync debug mode nor the trace's blocking
    CUDA calls see a sync in them: the waits a sync counter misses (a driver staging a pageable copy)."""
    w = f[(f["verdict"] == WAITS) & (f["debug_syncs"] == 0) & (f["trace_syncs"] == 0)]
    return w.sort_values(["direction", "source", "size_bytes"])


def unseen_in_words(f: pd.DataFrame) -> str:
    w = unseen_waits(f)
    if w.empty:
        return "every cell that waits is seen as a sync by sync debug mode or by the trace's blocking CUDA calls"
    by = w.groupby(["direction", "how"], sort=False)["size_bytes"].apply(lambda s: ", ".join(size_label(n) for n in sorted(set(s))))
    return ("waits that no sync counter sees (sync debug mode 0, blocking CUDA calls in the trace 0): "
            + "; ".join(f"{d} {how} at {sizes}" for (d, how), sizes in by.items()))


def claims_in_words(card: dict) -> list[str]:
    """The seeds' claims read against this card, each with the cell it rests on."""
    f = frame(card)
    q = _queued_depth(f)

    def at(d: str, s: str) -> str:
        try:
            c = cell(f, d, s, SCALAR_BYTES)
        except KeyError:
            return "not measured"
        return f"{c['verdict']} ({c['host_us']:.0f} µs with {q:g} ms queued)"

    t = wait_threshold(f)
    waits_4b = t["first_waits"] == SCALAR_BYTES
    return [
        f"On {label(card)}:",
        f"- {cite('SGLang', 34782)}'s sync: torch.tensor(n, device=) (4 B) {at('h2d', 'tensor_device')}.",
        f"- {cite('SGLang', 34782)}'s fix, a pageable non-blocking copy (4 B): {at('h2d', 'pageable_to_nb')}. "
        f"{threshold_in_words(t)}.",
        f"- {cite('SGLang', 34759)}'s 6–9% per EP-1 step: in its merged diff the unconditional form was already "
        f"{cite('SGLang', 34782)}'s pageable non-blocking copy, which its helper keeps where the predicate is true, so "
        f"it removed an unused allocation and copy per step; that copy here (4 B): {at('h2d', 'pageable_to_nb')}, "
        + ("so it waited here too." if waits_4b else "so here it costs only its call."),
        f"- {cite('SGLang', 38703)} pins num_token_non_padded: a pinned 4-byte non-blocking copy {at('h2d', 'pinned_to_nb')}.",
        f"- persistent fill_ (no host copy): {at('d2d', 'fill')}.",
        f"- {unseen_in_words(f)}.",
    ]


def latest_of(cards: Iterable[dict], fingerprint: dict) -> Optional[dict]:
    """The most recent card (by its 'recorded' time) of the machine with this GPU and driver."""
    mine = [c for c in cards if same_machine(c, fingerprint)]
    return max(mine, key=lambda c: str(c.get("recorded", ""))) if mine else None


def save(card: dict, path) -> Path:
    """Write a validated card as JSON (never over a run file: results.record.output)."""
    return machine_files.save_json(validate(card), path)


def file_name(card: dict) -> str:
    """<gpu>-card-<yyyymmdd>.json, e.g. h200-card-20261201.json."""
    return machine_file_name(card["fingerprint"], card.get("recorded", ""), "card")
