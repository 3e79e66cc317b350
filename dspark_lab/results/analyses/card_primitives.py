"""The card's second half, torch-free: what each way of waiting and launching costs on one machine.

A card (results.analyses.card) may hold "primitives": one record per cell (a primitive, its parameter
-- a CUDA graph's node count, a pinned tensor's bytes, else 0 -- and a queue depth) with the wall time
of one call over its repeats ("host_us"), the process CPU time over the same call ("cpu_us"), how many
calls each repeat timed ("inner": a sub-microsecond call is timed in a batch and divided), and for
the cross-stream wait the GPU time of a hand-off between two streams beside the same work on one
("gpu_us", "gpu_one_stream_us"). measure.card_primitives writes them. Everything else is derived
here (`frame`): medians, spread, the verdict by PRIMITIVE_RULE, the graph launch's per-node fit.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import pandas as pd

from dspark_lab.results.analyses import card as card_results
from dspark_lab.results.analyses import card_host
from dspark_lab.results.analyses.card import EDGE_MARGIN, label, queue_name, size_label
from dspark_lab.results.facts import launch_anchors

# name -> (group, how the call is made, what its parameter is: "nodes", "bytes" or "")
PRIMITIVES = {
    "stream_sync": ("sync", "torch.cuda.current_stream().synchronize()", ""),
    "device_sync": ("sync", "torch.cuda.synchronize()", ""),
    "event_sync_spin": ("sync", "torch.cuda.Event() recorded, then .synchronize() (spin-waits)", ""),
    "event_sync_blocking": ("sync", "torch.cuda.Event(blocking=True) recorded, then .synchronize()", ""),
    "wait_stream": ("stream", "side.wait_stream(main)", ""),
    "wait_event": ("stream", "side.wait_event(e), e recorded on main", ""),
    "event_record": ("stream", "torch.cuda.Event().record()", ""),
    "current_stream": ("stream", "torch.cuda.current_stream()", ""),
    "set_stream": ("stream", "torch.cuda.set_stream(side) then set_stream(main) (a pair)", ""),
    "kernel_launch": ("launch", "x.add_(1) on a one-element tensor", ""),
    "graph_linear": ("graph", "CUDAGraph.replay(): a chain of one tiny kernel (x.add_(1))", "nodes"),
    "graph_decode": ("graph", "CUDAGraph.replay(): decode-shaped (add, mul, sum, a device copy; a side "
                              "stream forked and joined)", "nodes"),
    "pin_fresh": ("pin", "t.pin_memory() with the caching host allocator emptied (a new pinned block)", "bytes"),
    "pin_cached": ("pin", "t.pin_memory() of a size just freed (the caching host allocator's hit)", "bytes"),
}
GRAPH_SHAPES = ("graph_linear", "graph_decode")
CHEAP, HOST_TIME, WAITS = "cheap", "costs host time", "waits"
VERDICTS = (CHEAP, HOST_TIME, WAITS)
CHEAP_US = 10.0  # a chosen bound; every cell shows its µs, so another bound can be read off
SPIN_SHARE = 0.5
PRIMITIVE_RULE = (f"verdict of a wait/launch cell, from the median wall time of one call over its repeats: '{WAITS}' "
                  f"when GPU work was queued (Q ms) and the call took more than Q/2 longer than with the queue empty; "
                  f"else '{HOST_TIME}' when the call took at least {CHEAP_US:g} µs of host time; else '{CHEAP}'. A call "
                  f"that waits 'spins' when the process burnt CPU time for at least {SPIN_SHARE:.0%} of the call's wall time.")
MOVED_RATIO = 1.5
MOVED_RULE = (f"a cell's time moved between two cards when one median is at least {MOVED_RATIO:g}x the other and "
              "the two cards' repeats do not overlap (the slowest of the faster card under the fastest of the "
              "slower); the verdict may stay the same.")
GROWS_RULE = ("a graph's launch costs per node when the largest graph's repeats run above the smallest's: its "
              "lower quartile over the smallest graph's upper quartile; otherwise the launch time does not grow "
              "measurably with the node count and no per-node cost is stated (the fitted slope is shown as measured).")
FRAME_COLUMNS = ("name", "group", "how", "param", "param_label", "queued_ms", "queue", "host_us", "host_us_min",
                 "host_us_max", "host_us_q1", "host_us_q3", "reps", "inner", "cpu_us", "cpu_share", "verdict", "spins", "edge", "gpu_us",
                 "gpu_one_stream_us", "error")


def _median(xs: Sequence[float]) -> float:
    s = sorted(float(x) for x in xs)
    n = len(s)
    return float("nan") if n == 0 else (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)


def verdict(host_us: float, queued_ms: float, empty_host_us: float = float("nan")) -> str:
    """One cell's verdict by PRIMITIVE_RULE: `host_us` the median wall time of one call, `empty_host_us`
    the same call's with the queue empty (NaN where unknown: then nothing is a wait)."""
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) for v in (host_us, queued_ms)):
        raise ValueError(f"host_us and queued_ms must be numbers; got {host_us!r}, {queued_ms!r}")
    if queued_ms > 0 and not math.isnan(empty_host_us) and host_us - empty_host_us > queued_ms * 1e3 / 2:
        return WAITS
    return HOST_TIME if host_us >= CHEAP_US else CHEAP


def spins(host_us: float, cpu_us: float, queued_ms: float, empty_host_us: float = float("nan")) -> bool:
    """PRIMITIVE_RULE's 'spins': the call waits and the process burnt CPU for SPIN_SHARE of its wall time."""
    return (verdict(host_us, queued_ms, empty_host_us) == WAITS and not math.isnan(cpu_us)
            and cpu_us >= SPIN_SHARE * host_us)


def _near(x: float, threshold: float) -> bool:
    return threshold > 0 and abs(x - threshold) < EDGE_MARGIN * threshold


def edge(host_us: Sequence[float], queued_ms: float, empty_host_us: float = float("nan")) -> str:
    """Why the verdict is at the rule's edge (as the copy cells': a repeat alone would get another
    verdict, or the quantity it turns on is within EDGE_MARGIN of its bound), or "" when it is firm."""
    xs = [float(x) for x in host_us]
    if not xs:
        return ""
    med = _median(xs)
    v = verdict(med, queued_ms, empty_host_us)
    alone = sorted({verdict(x, queued_ms, empty_host_us) for x in xs} - {v})
    if alone:
        return f"a repeat alone would be '{alone[0]}' ({min(xs):.1f}-{max(xs):.1f} µs over {len(xs)} repeats)"
    if queued_ms > 0 and not math.isnan(empty_host_us) and _near(med - empty_host_us, queued_ms * 1e3 / 2):
        return f"waited {(med - empty_host_us) / 1e3:.1f} ms over the empty queue, the bound is {queued_ms / 2:g} ms"
    if v != WAITS and _near(med, CHEAP_US):
        return f"the call took {med:.1f} µs, the bound is {CHEAP_US:g} µs"
    return ""


def param_label(name: str, param: int) -> str:
    kind = PRIMITIVES[name][2]
    return f"{param} nodes" if kind == "nodes" else size_label(param) if kind == "bytes" else ""


def _check_cell(c: dict, i: int, where: str) -> None:
    if c.get("name") not in PRIMITIVES:
        raise ValueError(f"{where}: primitives[{i}].name must be one of {', '.join(PRIMITIVES)}; got {c.get('name')!r}")
    p = c.get("param", 0)
    if isinstance(p, bool) or not isinstance(p, int) or p < 0 or (PRIMITIVES[c["name"]][2] and p <= 0):
        raise ValueError(f"{where}: primitives[{i}].param must be an integer >= 0 (> 0 for node counts and bytes); got {p!r}")
    q = c.get("queued_ms")
    if isinstance(q, bool) or not isinstance(q, (int, float)) or q < 0:
        raise ValueError(f"{where}: primitives[{i}].queued_ms must be a number >= 0; got {q!r}")
    for k in ("host_us", "cpu_us", "gpu_us", "gpu_one_stream_us"):
        v = c.get(k)
        if v is not None and (not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                                  for x in v)):
            raise ValueError(f"{where}: primitives[{i}].{k} must be a list of µs; got {v!r:.60}")
    if not c.get("error") and not c.get("host_us"):
        raise ValueError(f"{where}: primitives[{i}].host_us must be a non-empty list of µs (or the cell has an 'error')")


def validate(card: dict, where: str = "card") -> dict:
    """The card, or a ValueError naming the primitives field that is wrong (a card without primitives is valid)."""
    prims = card.get("primitives")
    if prims is None:
        return card
    if not isinstance(prims, list):
        raise ValueError(f"{where}: field 'primitives' must be a list of cells")
    for i, c in enumerate(prims):
        if not isinstance(c, dict):
            raise ValueError(f"{where}: primitives[{i}] must be an object")
        _check_cell(c, i, where)
    return card


def has_primitives(card: dict) -> bool:
    return bool(card.get("primitives"))


def _quartiles(xs: Sequence[float]) -> tuple[float, float]:
    """(lower, upper) quartile: the medians of the lower and upper halves (the middle value in neither)."""
    s = sorted(float(x) for x in xs)
    half = len(s) // 2
    return (_median(s[:half]), _median(s[-half:])) if half else (float("nan"), float("nan"))


def _row(c: dict, empty_med: float) -> dict:
    xs = [float(x) for x in c.get("host_us") or []]
    cpu = [float(x) for x in c.get("cpu_us") or []]
    med, q = _median(xs), float(c["queued_ms"])
    cpu_med, (q1, q3) = _median(cpu), _quartiles(xs)
    ok = bool(xs) and not c.get("error")
    return dict(
        name=c["name"], group=PRIMITIVES[c["name"]][0], how=PRIMITIVES[c["name"]][1], param=int(c.get("param", 0)),
        param_label=param_label(c["name"], int(c.get("param", 0))), queued_ms=q, queue=queue_name(q), host_us=med,
        host_us_min=min(xs) if xs else float("nan"), host_us_max=max(xs) if xs else float("nan"),
        host_us_q1=q1, host_us_q3=q3, reps=len(xs),
        inner=int(c.get("inner", 1)), cpu_us=cpu_med, cpu_share=cpu_med / med if ok and med > 0 else float("nan"),
        verdict=verdict(med, q, empty_med) if ok else None, spins=bool(ok and spins(med, cpu_med, q, empty_med)),
        edge=edge(xs, q, empty_med) if ok else "", gpu_us=_median(c.get("gpu_us") or []),
        gpu_one_stream_us=_median(c.get("gpu_one_stream_us") or []), error=c.get("error") or "")


def frame(card: dict) -> pd.DataFrame:
    """One row per primitive cell (FRAME_COLUMNS); empty when the card has none."""
    prims = validate(card).get("primitives") or []
    empty = {(c["name"], int(c.get("param", 0))): _median(c.get("host_us") or [])
             for c in prims if float(c["queued_ms"]) == 0}
    rows = [_row(c, empty.get((c["name"], int(c.get("param", 0))), float("nan"))) for c in prims]
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points; ValueError for fewer than two x's."""
    pts = [(float(x), float(y)) for x, y in zip(xs, ys) if not (math.isnan(float(x)) or math.isnan(float(y)))]
    if len({x for x, _ in pts}) < 2:
        raise ValueError("a line needs points at two or more distinct x; got " + repr(pts))
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return slope, my - slope * mx


def graph_fits(f: pd.DataFrame) -> pd.DataFrame:
    """Per graph shape and queue: the launch's host time fitted as intercept + slope × nodes (µs, µs per
    node), over the node counts measured."""
    rows = []
    g = f[f["name"].isin(GRAPH_SHAPES) & f["verdict"].notna()]
    for (name, queue), part in g.groupby(["name", "queue"], sort=False):
        part = part.sort_values("param")
        try:
            slope, icpt = fit_line(part["param"], part["host_us"])
        except ValueError:
            continue
        first, last = part.iloc[0], part.iloc[-1]
        rows.append(dict(name=name, queue=queue, how=PRIMITIVES[name][1], nodes=[int(n) for n in part["param"]],
                         per_node_us=slope, intercept_us=icpt, smallest_us=float(first["host_us"]),
                         largest_us=float(last["host_us"]), grows=bool(last["host_us_q1"] > first["host_us_q3"])))
    return pd.DataFrame(rows, columns=["name", "queue", "how", "nodes", "per_node_us", "intercept_us", "smallest_us",
                                       "largest_us", "grows"])


def graph_fits_in_words(f: pd.DataFrame) -> list[str]:
    """Each shape's fit (GROWS_RULE: a per-node cost only where the launch grows measurably), and which
    shape costs more per node (queue empty) where both grow."""
    fits = graph_fits(f)
    out = []
    for r in fits.itertuples():
        where = "queue empty" if r.queue == "empty" else "GPU work queued"
        measured = (f"{r.smallest_us:.1f} µs at {r.nodes[0]} nodes, {r.largest_us:.1f} µs at {r.nodes[-1]}; "
                    f"fit {r.intercept_us:.1f} µs + {r.per_node_us * 1e3:.1f} ns per node")
        said = "grows with its node count" if r.grows else "does not grow measurably with its node count (the repeats overlap)"
        out.append(f"{r.name} ({where}): {said}: {measured}")
    empty = fits[fits["queue"] == "empty"].set_index("name")
    if set(GRAPH_SHAPES) <= set(empty.index):
        growing = [s for s in GRAPH_SHAPES if empty.loc[s, "grows"]]
        if len(growing) == 2:
            a, b = (empty.loc[s, "per_node_us"] for s in GRAPH_SHAPES)
            costlier = GRAPH_SHAPES[int(b > a)]
            out.append(f"per node, the {costlier.split('_')[1]} shape costs more to launch here "
                       f"({max(a, b) * 1e3:.1f} vs {min(a, b) * 1e3:.1f} ns per node)")
        else:
            out.append("per node: " + (f"only the {growing[0].split('_')[1]} shape's launch grows measurably here"
                                       if growing else "neither shape's launch grows measurably with its node count "
                                       "here, so neither is said to cost more per node"))
    return out


_MARK = {CHEAP: "·", HOST_TIME: "h", WAITS: "w"}


def _cell_text(r) -> str:
    if r.verdict is None:
        return "err"
    spin = f" cpu {r.cpu_share:.0%}" if r.verdict == WAITS and not math.isnan(r.cpu_share) else ""
    return (f"{_MARK[r.verdict]}{'~' if r.edge else ''} {r.host_us:.2f} [{r.host_us_min:.2f}-{r.host_us_max:.2f}]"
            f"{spin}")


def table(card: dict) -> pd.DataFrame:
    """Primitive (and parameter) × queue: "verdict-letter median [fastest-slowest] µs" (· cheap, h costs
    host time, w waits, with the process CPU share of a wait; ~: at the rule's edge), for a terminal."""
    f = frame(card)
    if f.empty:
        return pd.DataFrame()
    f = f.assign(text=[_cell_text(r) for r in f.itertuples()],
                 row=[f"{n} {p}".strip() for n, p in zip(f["name"], f["param_label"])])
    t = f.pivot_table(index="row", columns="queue", values="text", aggfunc="first")
    order = list(dict.fromkeys(f["row"]))
    return t.loc[order, [q for q in ("empty", "queued") if q in t.columns]].fillna("")


def moved(med_a, med_b, min_a, max_a, min_b, max_b):
    """MOVED_RULE, elementwise (numbers or pandas Series): the medians MOVED_RATIO apart, the repeats apart."""
    ratio_apart = (med_a >= MOVED_RATIO * med_b) | (med_b >= MOVED_RATIO * med_a)
    return ratio_apart & ((min_a > max_b) | (min_b > max_a))


def compare(a: dict, b: dict) -> pd.DataFrame:
    """Two cards' primitive cells side by side (keyed by name, parameter and queue), whether the
    verdicts differ, firmly (neither at the edge), and host-side (HOST_SIDE_RULE)."""
    key = ["name", "param", "queue"]
    cols = key + ["queued_ms", "host_us", "host_us_min", "host_us_max", "verdict", "edge"]
    fa, fb = frame(a), frame(b)
    m = fa[cols + ["param_label"]].merge(fb[cols], on=key, how="outer", suffixes=("_a", "_b"), indicator=True)
    m["param_label"] = [param_label(n, int(p)) for n, p in zip(m["name"], m["param"])]
    m["only_in"] = m["_merge"].map({"left_only": "a", "right_only": "b", "both": ""})
    m["differs"] = (m["_merge"] == "both") & (m["verdict_a"] != m["verdict_b"])
    m["differs_firmly"] = m["differs"] & (m["edge_a"].fillna("") == "") & (m["edge_b"].fillna("") == "")
    m["ratio"] = m["host_us_a"] / m["host_us_b"]
    m["moved"] = (m["_merge"] == "both") & moved(m["host_us_a"], m["host_us_b"], m["host_us_min_a"], m["host_us_max_a"],
                                                 m["host_us_min_b"], m["host_us_max_b"])
    m["host_side"] = (m["differs"] | m["moved"]) & card_host.host_side(a, b)
    return m.drop(columns="_merge").sort_values(key).reset_index(drop=True)


def compare_lines(a: dict, b: dict) -> list[str]:
    """The primitives' comparison in words: how many differ (firmly, at the edge, host-side) and each that does."""
    if not (has_primitives(a) and has_primitives(b)):
        which = [n for n, c in (("a", a), ("b", b)) if not has_primitives(c)]
        return [f"wait/launch cells: not on card {' or '.join(which)}, not compared"]
    m = compare(a, b)
    both = m[m["only_in"] == ""]
    diff = both[both["differs"]]
    firm = int(diff["differs_firmly"].sum())
    hosts = card_host.host_differences(a, b)
    out = [f"wait/launch cells: {len(both)} on both cards; {len(diff)} with a different verdict: {firm} firmly, "
           f"{len(diff) - firm} at the rule's edge" + (f"; host-side ({'; '.join(hosts)})" if hosts else "")]
    for r in diff.itertuples():
        tag = " [host-side]" if r.host_side else ""
        tag += "" if r.differs_firmly else " — at the edge: " + "; ".join(
            f"{k} {e}" for k, e in (("a", r.edge_a), ("b", r.edge_b)) if isinstance(e, str) and e)
        out.append(f"  {(r.name + ' ' + r.param_label).strip()} ({r.queue}): a {r.verdict_a} ({r.host_us_a:.2f} µs) | "
                   f"b {r.verdict_b} ({r.host_us_b:.2f} µs){tag}")
    return out + _moved_lines(both[both["moved"]])


def _moved_lines(mv: pd.DataFrame, max_listed: int = 12) -> list[str]:
    """MOVED_RULE's cells in words, the largest move first."""
    if mv.empty:
        return [f"no cell's time moved ({MOVED_RULE})"]
    mv = mv.assign(by=[max(r, 1 / r) for r in mv["ratio"]]).sort_values("by", ascending=False)
    out = [f"{len(mv)} cell(s) whose time moved ({MOVED_RULE})"]
    for r in mv.head(max_listed).itertuples():
        out.append(f"  {(r.name + ' ' + r.param_label).strip()} ({r.queue}): a {r.host_us_a:.2f} µs [{r.host_us_min_a:.2f}-"
                   f"{r.host_us_max_a:.2f}] | b {r.host_us_b:.2f} µs [{r.host_us_min_b:.2f}-{r.host_us_max_b:.2f}]: "
                   f"{r.by:.1f}x{' [host-side]' if r.host_side else ''}")
    if len(mv) > max_listed:
        out.append(f"  … and {len(mv) - max_listed} more")
    return out


def cross_stream_wait_cost(card: Optional[dict]) -> Optional[dict]:
    """What one cross-stream wait costs on this card: the host time of side.wait_event(e) (GPU work
    queued, else empty) and the GPU time a hand-off between two streams adds over the same two kernels
    on one stream (0 where not slower); None when the card has no such cell."""
    if not card or not has_primitives(card):
        return None
    f = frame(card)
    w = f[(f["name"] == "wait_event") & f["verdict"].notna()]
    if w.empty:
        return None
    r = w.sort_values("queued_ms").iloc[-1]
    gpu_extra = r["gpu_us"] - r["gpu_one_stream_us"]
    gpu_extra = 0.0 if math.isnan(gpu_extra) else max(0.0, float(gpu_extra))
    return {"host_us": float(r["host_us"]), "gpu_us": gpu_extra, "queued_ms": float(r["queued_ms"]),
            "verdict": r["verdict"], "card": label(card)}


def _measured_text(card: dict, f: pd.DataFrame, cell: tuple) -> str:
    """One card cell the anchor is set beside, as "<cell> (<queue>): <µs> (<verdict>)", or "not measured"."""
    name, param, queue = cell
    if name.startswith("copy:"):
        cf = card_results.frame(card)
        hit = cf[(cf["source"] == name[5:]) & (cf["size_bytes"] == param) & (cf["queue"] == queue)]
        what = f"{card_results.SOURCES[name[5:]][1]} {size_label(param)} ({queue})"
        return f"{what}: not measured" if hit.empty else f"{what}: {hit['host_us'].iloc[0]:.2f} µs"
    hit = f[(f["name"] == name) & (f["param"] == param) & (f["queue"] == queue) & f["verdict"].notna()]
    what = f"{name} {param_label(name, param)}".strip() + f" ({queue})"
    if hit.empty:
        return f"{what}: not measured"
    r = hit.iloc[0]
    cpu = f", CPU {r['cpu_share']:.0%} of it" if not math.isnan(r["cpu_share"]) and r["verdict"] == WAITS else ""
    gpu = (f", GPU hand-off {r['gpu_us']:.1f} µs vs {r['gpu_one_stream_us']:.1f} µs on one stream"
           if not math.isnan(r["gpu_us"]) else "")
    return f"{what}: {r['host_us']:.2f} µs ({r['verdict']}{cpu}{gpu})"


def _published_text(a) -> str:
    if a.value is None:
        return "a behaviour, no per-call figure"
    unit = "µs" if a.unit == "us" else a.unit
    return f"{a.value:g} {unit}" + (f" ({a.value_us / a.per * 1e3:.0f} ns per node if divided out)" if a.per > 1 else "")


def anchors_beside(card: dict, anchors=None) -> pd.DataFrame:
    """The published anchors (results/facts/launch_anchors.ANCHORS) beside this card's cells: one row per
    anchor with its source, quantity, published figure and setting, and what this card measured for the
    cells it is set beside (a graph anchor adds the fit's value at its node count, marked as the fit's)."""
    f = frame(card)
    fits = graph_fits(f)
    rows = []
    for a in launch_anchors.ANCHORS if anchors is None else anchors:
        here = [_measured_text(card, f, c) for c in a.beside]
        for name in sorted({c[0] for c in a.beside} & set(GRAPH_SHAPES)) if a.per > 1 else ():
            fit = fits[(fits["name"] == name) & (fits["queue"] == "empty")]
            if len(fit):
                r = fit.iloc[0]
                here.append(f"{name} at {a.per} nodes, the fit's extrapolation (a model, not measured): "
                            f"{(r['intercept_us'] + r['per_node_us'] * a.per):.1f} µs")
        rows.append(dict(source=a.source, quantity=a.quantity, published=_published_text(a), setting=a.setting,
                         measured_here="; ".join(here)))
    return pd.DataFrame(rows, columns=["source", "quantity", "published", "setting", "measured_here"])
