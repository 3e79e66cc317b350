"""Which strategy to use on a machine, from its measured rows (and its probe, cards and hazards), with the evidence.

    from dspark_lab import advice
    print(advice.recommend(rows, probe, cards=cards, hazards=hazards))  # Recommendation + evidence lines
    print("\\n".join(advice.probe_in_words(probe)))

The rule, in the order it is applied:
  GATE_RULE  a strategy may be recommended only when it is known to be correct and known to be
             sync-free here: 0 wrong values under run-ahead in this machine's hazards record
             (results.analyses.hazards) and a cell of its copy on this machine's card that returns at
             once; one that writes a persistent device buffer also 0 wrong in the record's graph form of
             that pattern (a graph reading a device buffer filled before each replay, not the strategy
             itself), recommended on the condition that the update stays outside the graph.
             A strategy without a hazards count or a card cell is unknown, never sync-free.
  RULE       at each EP regime of the run, a strategy is good when it has 0 syncs per step outside the
             readback and is not slower than the fastest by the tie margin or more, measurably (paired by
             trial round, 95% CI); the probe rules out pageable copies where they block. The margin is set
             from the recorded equal-work spread and printed with its evidence (results.analyses.tie_margin).
  TIE_RULE   among the good strategies, those not measurably slower than the fastest by the margin are a
             tie, broken by sync-freedom (syncs measured 0, not unknown), portability (waiting on no card,
             then sync-free on more distinct GPU/driver cards) and less work: first the cross-stream waits it adds,
             charged in µs by WAIT_CHARGE_RULE from this machine's card, then fewer host-to-device
             copies per step over the regimes; the median last.
torch-free: the notebooks and the report can ask it without a GPU.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from dspark_lab.results.analyses import card as card_results
from dspark_lab.results.analyses import card_primitives, tie_margin
from dspark_lab.results.facts import strategy_table
from dspark_lab.results.record.paths import default_data_dir
from dspark_lab.results.query.data import RunData
from dspark_lab.results.rules import summaries
from dspark_lab.results.rules.labels import point_label
from dspark_lab.results.rules.selection import ok_rows, one_process

# A strategy that writes a caller-owned device buffer (persistent_fill) gave right values under CUDA-graph
# replay in the hazards' graph_device_buffer form, the pattern as the kit runs it (the buffer filled on the
# replay's stream before each replay, outside the graph; the form's own graph, not the strategy, reads it);
# a fill_ captured inside the graph replays its captured value (graph_python_value).
GRAPH_SAFE_FORM, GRAPH_UNSAFE_FORM = "graph_device_buffer", "graph_python_value"
GATE_RULE = ("gate: only strategies with 0 wrong values under run-ahead in this machine's hazards record and a "
             "card cell on this machine that returns at once can be recommended; a strategy that writes a "
             f"persistent device buffer also needs 0 wrong in the record's {GRAPH_SAFE_FORM} form (a graph reading a "
             f"device buffer filled before each replay: the pattern, not the strategy itself), and is recommended "
             f"with the condition that its update stays outside the graph (the record's {GRAPH_UNSAFE_FORM} count "
             f"beside); no hazards count or no card cell is unknown, not safe "
             "or sync-free.")
RULE = ("rule: at each EP regime of the run (EP > 1, where the MoE top-k reads the scalar; EP 1, where nothing "
        f"reads it), keep the strategies with 0 syncs per step there that are not slower than the fastest by "
        "the tie margin or more, measurably (paired by trial round, 95% CI); where the probe says "
        "a pageable non-blocking copy blocks, strategies copying from pageable memory are out.")
TIE_RULE = ("ties: kept strategies not slower than the fastest kept one by the tie margin or more, "
            "measurably, are equal here; the "
            "tie is broken by sync-freedom (syncs measured 0), portability (waits on no recorded card, sync-free "
            "on more distinct GPU/driver cards), then the smaller charge for the cross-stream waits it adds "
            "(the cross-stream waits rule; waits this machine's card cannot charge come after every charged one), then "
            "fewer host-to-device copies per step, then the median.")
CARD_RULE = ("cards: a strategy counts as sync-free on a machine only where that machine's card says its copy (its "
             "source, 4 B, GPU work queued) returns at once; among those kept, one sync-free on every recorded "
             "card ranks above one that waits on some platform; the cards behind that claim are counted by "
             "distinct GPU and driver.")
WAIT_CHARGE_RULE = ("cross-stream waits: a strategy that adds a cross-stream wait is charged, per wait, this machine's "
                    "card's measured cost of one (the host time of side.wait_event(e) with GPU work queued, or with the "
                    "queue empty where the card has only that cell, plus the GPU time a hand-off between two streams "
                    "adds over one stream, none where it adds none), and the charge ranks it among tied strategies (ties); "
                    "without a card, 'no card'.")


@dataclass
class Recommendation:
    strategy: Optional[str]
    evidence: list = field(default_factory=list)
    run_label: str = ""
    cards_read: bool = False
    margin: Optional[tie_margin.TieMargin] = None  # the tie margin judged by, with its evidence

    def lines(self) -> list[str]:
        head = (f"recommended on {self.run_label}: {self.strategy}" if self.strategy
                else f"no recommendation for {self.run_label}")
        # evidence items starting with two spaces belong to the item above them
        margin = [self.margin.text()] if self.margin else []
        rules = [GATE_RULE, RULE, TIE_RULE] + margin + [WAIT_CHARGE_RULE] + ([CARD_RULE] if self.cards_read else [])
        return [head] + [f"      {e.strip()}" if e.startswith("  ") else f"  - {e}" for e in self.evidence] + rules

    def text(self) -> str:
        return "\n".join(self.lines())

    __str__ = text


def _median(rows: pd.DataFrame, col: str) -> pd.Series:
    if col not in rows.columns:
        return pd.Series(dtype=float)
    return rows.groupby("strategy", sort=False)[col].apply(lambda v: pd.to_numeric(v, errors="coerce").median())


@dataclass
class PointVerdict:
    """One point of one run: per strategy its median, syncs, and how it compares with the fastest."""

    label: str
    ep_size: int
    medians: pd.Series  # strategy -> median step ms (disturbed trials left out)
    syncs: pd.Series  # strategy -> syncs per step (NaN: not measured, e.g. no CUDA)
    pageable: pd.Series  # strategy -> pageable H2D copies per step
    copies: pd.Series  # strategy -> H2D copies per step (pageable + pinned)
    predicate: Optional[bool]
    fastest: str
    versus_fastest: dict  # strategy -> results.rules.stats.compare dict (strategy against the fastest)
    rows: Optional[pd.DataFrame] = None  # the point's successful rows, for comparisons the rule asks later

    def sync_free(self, s: str) -> Optional[bool]:
        v = self.syncs.get(s, math.nan)
        return None if pd.isna(v) else bool(v == 0)


def judge_point(rows: pd.DataFrame) -> PointVerdict:
    """The verdict at one point of one run (rows of every strategy there)."""
    ok = ok_rows(rows)
    if ok.empty:
        raise ValueError("rows hold no successful trial")
    if ok["run_id"].nunique() > 1 or ok["point_id"].nunique() > 1:
        raise ValueError("judge_point takes the rows of one point of one run")
    summ = summaries.summary(ok).set_index("strategy")
    medians = summ["median_ms"].dropna()
    if medians.empty:
        raise ValueError("rows hold no step time (column 'step_ms')")
    fastest = str(medians.idxmin())
    versus = {s: summaries.compare(ok, s, fastest) for s in medians.index if s != fastest}
    pageable = _median(ok, "h2d_pageable_per_step")
    copies = pageable.add(_median(ok, "h2d_pinned_per_step"), fill_value=0)
    pred = ok["predicate"].dropna().unique() if "predicate" in ok.columns else []
    return PointVerdict(point_label(ok.iloc[0]), int(ok["ep_size"].iloc[0]), medians, _median(ok, "syncs_per_step"),
                        pageable, copies, bool(pred[0]) if len(pred) == 1 else None, fastest, versus, ok)


def _ms(v: float) -> str:
    return f"{v:.2f} ms"


def _point_evidence(v: PointVerdict, excluded: set, margin_pct: float) -> list[str]:
    out = [f"{v.label}: fastest {v.fastest} {_ms(v.medians[v.fastest])} (median of quiet trials)"]
    close, slower = [], []
    for s, c in v.versus_fastest.items():
        diff = c["difference"]
        if diff.startswith("no measurable difference ("):  # "(+1.2%, 95% CI ...)": the words are in the heading
            diff = diff[len("no measurable difference ("):-1]
        is_slower = _slower(c, margin_pct)
        (slower if is_slower else close).append(f"{s} {_ms(v.medians[s])}" + (f": {diff}" if is_slower else f" ({diff})"))
    if close:
        out.append(f"  within {margin_pct:g}% of the fastest or not measurably slower: " + "; ".join(close))
    if slower:
        out.append(f"  measurably slower by {margin_pct:g}% or more: " + "; ".join(slower))
    syncing = [f"{s} {v.syncs[s]:.2f}/step" for s in v.medians.index if v.sync_free(s) is False]
    unknown = [s for s in v.medians.index if v.sync_free(s) is None]
    if syncing:
        out.append("  syncs outside the readback: " + ", ".join(syncing))
    if unknown:
        out.append("  syncs not measured (no CUDA in these rows): " + ", ".join(unknown))
    if excluded & set(v.medians.index):
        out.append("  ruled out by the probe (pageable copy blocks here): " + ", ".join(sorted(excluded)))
    return out


def _regime_evidence(points: list[PointVerdict]) -> list[str]:
    """What EP 1 against EP > 1 changes, from the rows (predicate and copies per step)."""
    ep1 = next((p for p in points if p.ep_size == 1), None)
    epn = next((p for p in points if p.ep_size > 1), None)
    out = []
    if ep1 is not None and not ep1.copies.empty:
        none = [s for s in ep1.medians.index if ep1.copies.get(s, math.nan) == 0]
        some = [s for s in ep1.medians.index if ep1.copies.get(s, 0) > 0]
        pred = "" if ep1.predicate is None else f" (predicate {'true' if ep1.predicate else 'false'})"
        line = f"at EP 1{pred}: no host-to-device copy per step in {', '.join(none) or 'none'}"
        if some:
            line += f"; a copy per step anyway in {', '.join(some)}"
        if epn is not None and not epn.copies.empty:
            made = [s for s in none if epn.copies.get(s, 0) > 0]
            if made:
                line += f"; at EP {epn.ep_size} {', '.join(made)} copy again (the MoE top-k reads the scalar)"
        out.append(line)
    if ep1 is None:
        out.append("no EP 1 point in this run: the EP-1 case (on_demand makes nothing there) is not judged")
    if epn is None:
        out.append("no EP > 1 point in this run: the case where the scalar is read is not judged")
    return out


def pageable_blocks(probe: Optional[dict]) -> Optional[bool]:
    """The probe's verdict: True / False, or None where no probe ran."""
    if not probe or not probe.get("available"):
        return None
    v = probe.get("pageable_nonblocking_blocks")
    return None if v is None else bool(v)


def measured_in_one_process(runs: RunData) -> RunData:
    """`runs` without the rows of real ranks and predictions (results.query.runs.SEPARATE_EP_MODES): the
    strategy comparisons here are one-process measurements; notebook 01 shows EP on real ranks apart."""
    keep = one_process(runs.rows)
    return runs if len(keep) == len(runs.rows) else runs.with_rows(keep)


def latest_run(runs: RunData) -> str:
    """The most recent run with a successful point: by its rows' recorded_at, then the headers' order."""
    if runs.ok.empty:
        raise ValueError("no successful recorded rows: record a run first (dspark-lab sweep)")
    ok = runs.ok.assign(run_id=runs.ok["run_id"].astype(str))
    at = ok.groupby("run_id")["recorded_at"].max().astype(str) if "recorded_at" in ok.columns else pd.Series(dtype=str)
    order = {r: i for i, r in enumerate(runs.run_ids())}
    return max(set(ok["run_id"]), key=lambda r: (at.get(r, ""), order.get(r, -1)))


def card_waits(cards: Sequence[dict]) -> dict:
    """strategy -> the labels of the cards on which its copy (4 B, queued) waits."""
    out: dict = {s: [] for s in card_results.STRATEGY_CELLS}
    for c in cards:
        for s, v in card_results.strategy_verdicts(c).items():
            if v == card_results.WAITS:
                out[s].append(card_results.label(c))
    return out


def _platform(c: dict) -> tuple:
    fp = c.get("fingerprint") or {}
    return str(fp.get("gpu")), str(fp.get("driver"))


def card_support(cards: Sequence[dict], strategy: str) -> dict:
    """On how many cards, and how many distinct GPU/driver pairs, `strategy`'s copy returns at once,
    waits, or has no cell: {"at_once": n, "platforms": m, "waits_on": [labels], "unknown_on": [labels]}."""
    at_once, platforms, waits, unknown = 0, set(), [], []
    for c in cards:
        v = card_results.strategy_verdicts(c).get(strategy)
        if v == card_results.AT_ONCE:
            at_once += 1
            platforms.add(_platform(c))
        elif v == card_results.WAITS:
            waits.append(card_results.label(c))
        else:
            unknown.append(card_results.label(c))
    return {"at_once": at_once, "platforms": len(platforms), "waits_on": waits, "unknown_on": unknown}


def portability_in_words(cards: Sequence[dict], strategy: str) -> str:
    """The portability claim with the cards behind it counted ("on 2 cards of 1 GPU/driver")."""
    sup = card_support(cards, strategy)
    if sup["waits_on"]:
        return f"{strategy}'s copy waits on {', '.join(sup['waits_on'])}"
    if not sup["at_once"]:
        return f"{strategy}: no recorded card has a cell of its copy (unknown, not sync-free)"
    gpus = "GPU/driver" if sup["platforms"] == 1 else "GPU/driver pairs"
    return (f"{strategy} is sync-free on every recorded card that has its cell: {sup['at_once']} card(s) of "
            f"{sup['platforms']} distinct {gpus}" + (f"; no cell on {', '.join(sup['unknown_on'])}" if sup["unknown_on"] else ""))


def _card_evidence(cards: Sequence[dict], mine: Optional[dict]) -> list[str]:
    n = len({_platform(c) for c in cards})
    out = [f"{len(cards)} platform card(s) read, of {n} distinct GPU/driver; this machine's: "
           + (card_results.label(mine) if mine else "none recorded")]
    for c in cards:
        v = card_results.strategy_verdicts(c)
        out.append(f"  {card_results.label(c)}: " + "; ".join(f"{s} {v[s] or 'no cell'}" for s in v))
    return out


def _stream_waits(s: str) -> int:
    return strategy_table.row(s).stream_waits if s in strategy_table.names() else 0


def wait_charge_us(s: str, mine: Optional[dict]) -> float:
    """WAIT_CHARGE_RULE's charge of `s` per call, in µs: 0 where it adds no cross-stream wait; infinite
    where it adds some and the card `mine` (this machine's) has no cell to charge them (unknown, so it
    ranks after every charged strategy in TIE_RULE)."""
    n = _stream_waits(s)
    if not n:
        return 0.0
    cost = card_primitives.cross_stream_wait_cost(mine)
    return math.inf if cost is None else n * (cost["host_us"] + cost["gpu_us"])


def stream_wait_charges(strategies: Sequence[str], mine: Optional[dict]) -> list[str]:
    """WAIT_CHARGE_RULE's lines: each of `strategies` that adds cross-stream waits, with its charge from
    the card `mine` (this machine's), or "no card" where there is none or it lacks the cell."""
    cost = card_primitives.cross_stream_wait_cost(mine)
    out = []
    for s in strategies:
        n = _stream_waits(s)
        if not n:
            continue
        if cost is None:
            out.append(f"{s} adds {n} cross-stream wait(s) per call: no card (no wait/launch cells for this machine; "
                       "dspark-lab doctor --card)")
            continue
        each = cost["host_us"] + cost["gpu_us"]
        out.append(f"{s} adds {n} cross-stream wait(s) per call: charged {n} x {each:.1f} µs = {n * each:.1f} µs "
                   f"(host {cost['host_us']:.1f} µs, GPU hand-off {cost['gpu_us']:.1f} µs; {cost['card']})")
    return out


def _machine_of(runs: RunData, rid: str) -> dict:
    first = runs.ok[runs.ok["run_id"] == rid].iloc[0]
    return {"gpu": first.get("gpu"), "driver": first.get("driver")}


def hazards_of(hazards, fingerprint: dict) -> Optional[dict]:
    """The most recent hazards record (by 'recorded') of the machine with this GPU and driver."""
    recs = [hazards] if isinstance(hazards, dict) else list(hazards or [])
    mine = [h for h in recs if card_results.same_machine(h, fingerprint)]
    return max(mine, key=lambda h: str(h.get("recorded", ""))) if mine else None


def _gate_reason(s: str, wrong: dict, hazards_rec: Optional[dict], verdicts: dict, mine: Optional[dict]) -> Optional[str]:
    """Why `s` fails GATE_RULE on this machine; None when it passes."""
    h = wrong.get(s)
    if hazards_rec is None:
        return "no hazards record for this machine (dspark-lab doctor --hazards)"
    if h is None:
        return "no count in this machine's hazards record (unknown, not safe)"
    if h.get("wrong"):
        return f"{h['wrong']} of {h['n']} values wrong under run-ahead in this machine's hazards record"
    graph = _form(hazards_rec, GRAPH_SAFE_FORM) if _writes_a_buffer(s) else {}
    if graph is None:
        return f"no count of its graph form ({GRAPH_SAFE_FORM}) in this machine's hazards record (unknown, not safe)"
    if graph.get("wrong"):
        return f"{graph['wrong']} of {graph['n']} values wrong in its graph form ({GRAPH_SAFE_FORM})"
    if mine is None:
        return "no platform card for this machine (dspark-lab doctor --card)"
    v = verdicts.get(s)
    if v is None:
        return "no cell of its copy on this machine's card (unknown, not sync-free)"
    return None if v == card_results.AT_ONCE else f"its copy {v} on this machine's card"


def _writes_a_buffer(s: str) -> bool:
    return s in strategy_table.names() and strategy_table.row(s).needs_persistent_buffer


def _form(hazards_rec: Optional[dict], form: str) -> Optional[dict]:
    """The hazards record's count of one form (results.analyses.hazards.FORMS), or None."""
    return next((c for c in (hazards_rec or {}).get("forms") or [] if c.get("form") == form), None)


def _graph_condition(s: str, hazards_rec: Optional[dict]) -> str:
    bad = _form(hazards_rec, GRAPH_UNSAFE_FORM)
    told = f"{bad['wrong']} of {bad['n']} wrong" if bad else "not counted here"
    return (f"  {s}: passes as the kit updates it (fill_ before each graph replay; {GRAPH_SAFE_FORM}, the "
            f"pattern, not this strategy, was counted); a fill_ captured inside "
            f"the graph replays its captured value ({GRAPH_UNSAFE_FORM}: {told})")


def gate(strategies: Sequence[str], hazards_rec: Optional[dict], mine: Optional[dict]) -> tuple[set, list[str]]:
    """GATE_RULE: the strategies known correct and sync-free on this machine, and the evidence."""
    wrong = {h.get("strategy"): h for h in (hazards_rec or {}).get("strategies", []) or []}
    verdicts = card_results.strategy_verdicts(mine) if mine else {}
    passed, out = set(), []
    for s in strategies:
        why = _gate_reason(s, wrong, hazards_rec, verdicts, mine)
        if why is None:
            passed.add(s)
            if _writes_a_buffer(s):
                out.append(_graph_condition(s, hazards_rec))
        else:
            out.append(f"  {s}: {why}")
    where = f"hazards record of {hazards_rec.get('recorded', '?')}" if hazards_rec else "no hazards record"
    head = f"gate ({where}; this machine's card): passed " + (", ".join(sorted(passed)) or "none")
    return passed, [head] + out


def _latest_points(runs: RunData, rid: str) -> list:
    """The judged reference points of run `rid`: real EP first (when recorded), then EP 1."""
    ep_sizes = set(runs.ok.loc[runs.ok["run_id"] == rid, "ep_size"].astype(int))
    eps = ([None] if any(e > 1 for e in ep_sizes) else []) + ([1] if 1 in ep_sizes else [])
    return [judge_point(runs.reference(run_id=rid, ep_size=ep)) for ep in eps]


def _probe_exclusions(probe: Optional[dict], points: list) -> tuple[list[str], set]:
    """What the probe says, and the strategies it rules out (pageable copies, where they block)."""
    blocks = pageable_blocks(probe)
    if blocks is None:
        return ["no probe for this machine: the sync counts in the rows stand for it"], set()
    evidence = ["probe: a non-blocking copy from pageable memory "
                + ("BLOCKS the host here" if blocks else "does not block the host here")]
    excluded = set()
    if blocks:
        for p in points:
            excluded |= {s for s in p.medians.index if p.pageable.get(s, 0) > 0}
    return evidence, excluded


def _versus(p: PointVerdict, s: str, ref: str) -> Optional[dict]:
    return None if s == ref or p.rows is None else summaries.compare(p.rows, s, ref)


def _slower(c: Optional[dict], margin_pct: float) -> bool:
    """Slower beyond the equivalence margin, measurably (the CI's lower end past zero)."""
    return c is not None and bool(c["measurable"]) and c["pct"] >= margin_pct


def _good_everywhere(candidates: set, points: list, margin_pct: float) -> list:
    """The candidates with 0 syncs (or unmeasured) and not slower than the fastest candidate by the margin
    at every judged point, fastest first at the main point."""
    kept = set(candidates)
    for p in points:
        here = [s for s in p.medians.sort_values().index if s in kept and p.sync_free(s) is not False]
        if not here:
            return []
        ref = here[0]
        kept &= {s for s in here if not _slower(_versus(p, s, ref), margin_pct)} | (kept - set(p.medians.index))
    main = points[0]
    return [s for s in main.medians.sort_values().index if s in kept]


def _tie_key(s: str, points: list, cards: Sequence[dict], main: PointVerdict, mine: Optional[dict]) -> tuple:
    """TIE_RULE's order: measured sync-free, waits on no card, more platforms, the smaller cross-stream
    wait charge (WAIT_CHARGE_RULE, from this machine's card `mine`), fewer copies, median."""
    sup = card_support(cards, s)
    measured = all(p.sync_free(s) is True for p in points if s in p.medians.index)
    copies = sum(float(p.copies.get(s, 0) or 0) for p in points)
    return (not measured, bool(sup["waits_on"]), -sup["platforms"], wait_charge_us(s, mine), copies,
            float(main.medians[s]))


def _portable_first(pool: set, cards: Sequence[dict], main: PointVerdict) -> tuple[set, list[str]]:
    """CARD_RULE: where some candidate waits on no recorded card, those that wait on one are set aside,
    however much faster they are here."""
    portable = {s for s in pool if not card_support(cards, s)["waits_on"]}
    if not portable or portable == pool:
        return pool, []
    out = []
    for s in sorted(pool - portable, key=lambda s: main.medians.get(s, math.inf)):
        best = min(portable, key=lambda p: main.medians.get(p, math.inf))
        c = _versus(main, best, s) if s in main.medians.index and best in main.medians.index else None
        gain = f" ({best} against it: {c['difference']})" if c else ""
        out.append(f"{s}'s copy waits on {', '.join(card_support(cards, s)['waits_on'])}: set aside for "
                   f"{', '.join(sorted(portable))}, sync-free on every recorded card that has their cells{gain}")
    return portable, out


def _charges_in_words(tie: list, mine: Optional[dict]) -> str:
    """The tie's cross-stream wait charges ("a 0 µs, b 10.6 µs, c no card"), or "" where none adds a wait."""
    if not any(_stream_waits(s) for s in tie):
        return ""
    each = {s: wait_charge_us(s, mine) for s in tie}
    return ", ".join(f"{s} {'no card' if math.isinf(v) else f'{v:.1f} µs'}" for s, v in each.items())


def _choose(kept: list, points: list, cards: Sequence[dict], margin_pct: float,
            mine: Optional[dict] = None) -> tuple[str, list[str]]:
    """TIE_RULE over the kept strategies (fastest first at the main point), with the evidence."""
    main, ref, out = points[0], kept[0], []
    tie = [ref] + [s for s in kept[1:] if not _slower(_versus(main, s, ref), margin_pct)]
    chosen = min(tie, key=lambda s: _tie_key(s, points, cards, main, mine))
    if len(tie) > 1:
        diffs = "; ".join(f"{s} {_versus(main, s, ref)['difference']}" for s in tie if s != ref)
        copies = ", ".join(f"{s} {sum(float(p.copies.get(s, 0) or 0) for p in points):g}" for s in tie)
        charges = _charges_in_words(tie, mine)
        waits = f", cross-stream wait charges per call ({charges})" if charges else ""
        out.append(f"a tie at {main.label} (within {margin_pct:g}% of {ref} or not measurably slower): {diffs}; "
                   f"broken by sync-freedom, portability{waits} and copies per step over the regimes ({copies}): {chosen}")
    if cards:
        out.append(portability_in_words(cards, chosen))
    return chosen, out


def _check_arguments(rows, probe, cards, hazards) -> None:
    """Clear errors naming the argument and what it takes (a wrong type fails here, not deep inside)."""
    if not isinstance(rows, (pd.DataFrame, RunData)):
        raise TypeError(f"rows must be a pandas DataFrame of recorded rows or a RunData; got {type(rows).__name__}")
    frame = rows.rows if isinstance(rows, RunData) else rows
    missing = [c for c in ("run_id", "point_id", "strategy", "status", "step_ms", "ep_size") if c not in frame.columns]
    if missing:
        raise ValueError(f"rows must hold the recorded row columns; missing {', '.join(missing)}")
    if probe is not None and not isinstance(probe, dict):
        raise TypeError(f"probe must be None or a probe dict (measure.probe, advice.recorded_probe); got {type(probe).__name__}")
    _check_probe(probe)
    for name, v in (("cards", cards), ("hazards", hazards)):
        if v is None or (name == "hazards" and isinstance(v, dict)):
            continue
        if isinstance(v, (str, bytes, dict)) or not all(isinstance(x, dict) for x in _iterable(v, name)):
            raise TypeError(f"{name} must be None or a list of {name} records (dicts, "
                            f"results.analyses.{'card' if name == 'cards' else 'hazards'}.recorded()); got {v!r:.60}")


def _iterable(v, name: str) -> list:
    try:
        return list(v)
    except TypeError:
        raise TypeError(f"{name} must be None or a list of records; got {type(v).__name__}") from None


def recommend(rows: pd.DataFrame, probe: Optional[dict] = None, cards: Optional[Sequence[dict]] = None,
              hazards=None, margin_pct=None) -> Recommendation:
    """The strategy to use on the machine of `rows` (its most recent run measured in one process), by
    GATE_RULE (`hazards`: this machine's hazards record, or a list of records; `cards`: platform cards),
    RULE and TIE_RULE, with evidence. Without a hazards record and a card for this machine nothing
    passes the gate: the recommendation is None and the evidence says what to record. `margin_pct`: None
    (the margin recorded under the data folder, tie_margin.recorded), a tie_margin.TieMargin, or a number."""
    _check_arguments(rows, probe, cards, hazards)
    margin = _margin(margin_pct)
    margin_pct = margin.pct
    runs = measured_in_one_process(rows if isinstance(rows, RunData) else RunData(rows))
    if runs.ok.empty:
        raise ValueError("rows hold no successful trial measured in one process: record a run first (dspark-lab sweep)")
    rid = latest_run(runs)
    label, machine = runs.labels().get(rid, rid), _machine_of(runs, rid)
    points = _latest_points(runs, rid)
    points = sorted(points, key=lambda p: p.ep_size == 1)  # the EP > 1 point first: the scalar is read there
    cards = list(cards or [])
    mine = card_results.latest_of(cards, machine)
    evidence, excluded = _probe_exclusions(probe, points)
    evidence += _card_evidence(cards, mine) if cards else ["no platform card given"]
    passed, gate_lines = gate(list(points[0].medians.index), hazards_of(hazards, machine), mine)
    evidence += gate_lines
    evidence += stream_wait_charges(list(points[0].medians.index), mine)
    for p in points:
        evidence += _point_evidence(p, excluded, margin_pct)
    evidence += _regime_evidence(points)
    pool, set_aside = _portable_first(passed - excluded, cards, points[0])
    evidence += set_aside
    kept = _good_everywhere(pool, points, margin_pct)
    if not kept:
        evidence.append("no strategy passes the gate and is good at every EP regime recorded")
        return Recommendation(None, evidence, label, bool(cards), margin)
    chosen, why = _choose(kept, points, cards, margin_pct, mine)
    evidence += why
    evidence.append(f"{chosen}: passes the gate and is good at every EP regime recorded"
                    + (f" (also kept: {', '.join(s for s in kept if s != chosen)})" if len(kept) > 1 else ""))
    return Recommendation(chosen, evidence, label, bool(cards), margin)


def _margin(margin_pct) -> tie_margin.TieMargin:
    """The tie margin judged by: the recorded one (None), a TieMargin as it is, or a number the caller sets."""
    if margin_pct is None:
        return tie_margin.recorded()
    return margin_pct if isinstance(margin_pct, tie_margin.TieMargin) else tie_margin.given(margin_pct)


def _check_probe(probe) -> None:
    """A probe is None or a dict whose 'available' is a bool; an available one holds 'queued_ms' (a number)
    and 'strategies' (strategy -> {'queued_us': number})."""
    if probe is None:
        return
    if not isinstance(probe, dict):
        raise TypeError(f"probe must be None or a probe dict (measure.probe, advice.recorded_probe); got {type(probe).__name__}")
    if not isinstance(probe.get("available", False), bool):
        raise ValueError(f"probe['available'] must be True or False; got {probe.get('available')!r}")
    if not probe.get("available"):
        return
    q = probe.get("queued_ms")
    if isinstance(q, bool) or not isinstance(q, (int, float)):
        raise ValueError(f"probe['queued_ms'] must be a number of milliseconds; got {q!r}")
    per = probe.get("strategies", {})
    if not isinstance(per, dict) or not all(isinstance(v, dict) and isinstance(v.get("queued_us"), (int, float))
                                           for v in per.values()):
        raise ValueError("probe['strategies'] must map each strategy to {'queued_us': number, ...}")


def probe_in_words(probe: Optional[dict]) -> list[str]:
    """The probe's result read out, with what it implies for the choice of strategy on this machine."""
    _check_probe(probe)
    if not probe or not probe.get("available"):
        reason = (probe or {}).get("reason", "no probe ran")
        return [f"{reason}.",
                "Without it, whether a non-blocking copy from pageable memory blocks is read from the recorded "
                "rows' sync counts (a pageable non-blocking copy that waits is counted as a copy that waits inside "
                "the copy call, copy_waits_per_step)."]
    q = float(probe["queued_ms"])
    per = probe.get("strategies", {})
    waited = [s for s, v in per.items() if v["queued_us"] > q * 1e3 / 2]
    free = [s for s in per if s not in waited]
    ref, baseline = strategy_table.SYNC_FREE, strategy_table.BASELINE  # the sync-free reference's copy, probed
    nb = per.get(ref, {}).get("queued_us", math.nan)
    built_on = ", ".join(r.name for r in strategy_table.rows() if r.card_cell == strategy_table.row(ref).card_cell)
    out = [f"With {q:.0f} ms of GPU work queued, one call of each strategy took on the host: "
           + ", ".join(f"{s} {v['queued_us']:.0f} µs" for s, v in per.items()) + "."]
    out.append(f"Waited for the queued work (host time over half of it): {', '.join(waited) or 'none'}; "
               f"returned at once: {', '.join(free) or 'none'}.")
    if pageable_blocks(probe):
        out.append(f"So on this GPU and driver a non-blocking copy from pageable memory waits for the queue "
                   f"({ref}: {nb:.0f} µs), which CUDA allows for an asynchronous copy from pageable memory (the "
                   "driver may synchronize with the stream and stage it). The strategies built on it "
                   f"({built_on}) sync here just as {baseline} does: choose among those that "
                   f"returned at once ({', '.join(free) or 'none'}).")
    else:
        out.append(f"So on this GPU and driver a non-blocking copy from pageable memory does not wait for the "
                   f"queue ({ref}: {nb:.0f} µs): the strategies built on it ({built_on}) are "
                   f"sync-free here, as PR #34782 intends; avoid those that waited ({', '.join(waited) or 'none'}).")
    out[-1] += (" That is one 4-byte copy, one cell of the platform card: whether larger copies, other sources "
                "or device-to-host copies wait here is the card's answer (dspark-lab doctor --card).")
    return out


def recorded_probe(fingerprint: dict, data_dir=None) -> Optional[dict]:
    """The probe recorded for a machine with this GPU and driver under <data>/machines/*.json, with
    the file it came from ("source") and its date ("recorded"); None if there is none."""

    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    want = {k: str(fingerprint.get(k)) for k in ("gpu", "driver")}
    for path in sorted((folder / "machines").glob("*.json"), reverse=True):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        fp = rec.get("fingerprint") or {}
        if all(str(fp.get(k)) == v for k, v in want.items()) and isinstance(rec.get("probe"), dict):
            return {**rec["probe"], "source": str(path), "recorded": rec.get("recorded")}
    return None
