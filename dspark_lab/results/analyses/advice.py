"""Which strategy to use on a machine, from its measured rows (and its probe), with the evidence.

    from dspark_lab import advice
    print(advice.recommend(rows, probe))        # Recommendation: strategy + evidence lines
    print("\\n".join(advice.probe_in_words(probe)))

The rule (RULE): at each EP regime the run holds (EP > 1, where the MoE top-k reads the scalar, and
EP 1, where nothing reads it), a strategy is *good* when it is sync-free there (0 syncs per step
outside the readback) and not measurably slower than the fastest strategy at that point (paired
by trial round, 95% CI; results.Runs.compare). The recommendation is the fastest strategy at the
EP > 1 point among those good at every regime. A probe saying that a pageable non-blocking copy
blocks on this GPU + driver rules out the strategies that copy from pageable memory.
With platform cards (results.analyses.card, CARD_RULE): a strategy's copy that waits on this machine's card
rules it out here too, and among the kept strategies one that is sync-free on every recorded card
ranks above one that waits on some platform, however much faster it is here.
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
from dspark_lab.results.record.paths import default_data_dir
from dspark_lab.results.query.data import RunData
from dspark_lab.results.rules import summaries
from dspark_lab.results.rules.labels import point_label
from dspark_lab.results.rules.selection import ok_rows, one_process

RULE = ("rule: at each EP regime of the run (EP > 1, where the MoE top-k reads the scalar; EP 1, where nothing "
        "reads it), keep the strategies that are sync-free there and not measurably slower than the fastest "
        "(paired by trial round, 95% CI); recommend the fastest at EP > 1 among those kept at every regime; "
        "where the probe says a pageable non-blocking copy blocks, strategies copying from pageable memory are out.")

CARD_RULE = ("cards: a strategy counts as sync-free on a machine only where that machine's card says its copy (its "
             "source, 4 B, GPU work queued) returns at once; one that waits on this machine's card is out; among "
             "those kept, one sync-free on every recorded card ranks above one that waits on some platform.")


@dataclass
class Recommendation:
    strategy: Optional[str]
    evidence: list = field(default_factory=list)
    run_label: str = ""
    cards_read: bool = False

    def lines(self) -> list[str]:
        head = (f"recommended on {self.run_label}: {self.strategy}" if self.strategy
                else f"no recommendation for {self.run_label}")
        # evidence items starting with two spaces belong to the item above them
        rules = [RULE] + ([CARD_RULE] if self.cards_read else [])
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

    def good(self, s: str) -> bool:
        c = self.versus_fastest.get(s)
        close = s == self.fastest or (c is not None and not (c["measurable"] and c["pct"] > 0))
        return close and self.sync_free(s) is not False


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


def _point_evidence(v: PointVerdict, excluded: set) -> list[str]:
    out = [f"{v.label}: fastest {v.fastest} {_ms(v.medians[v.fastest])} (median of quiet trials)"]
    close, slower = [], []
    for s, c in v.versus_fastest.items():
        diff = c["difference"]
        if diff.startswith("no measurable difference ("):  # "(+1.2%, 95% CI ...)": the words are in the heading
            diff = diff[len("no measurable difference ("):-1]
        is_slower = c["measurable"] and c["pct"] > 0
        (slower if is_slower else close).append(f"{s} {_ms(v.medians[s])}" + (f": {diff}" if is_slower else f" ({diff})"))
    if close:
        out.append("  not measurably slower than the fastest: " + "; ".join(close))
    if slower:
        out.append("  measurably slower: " + "; ".join(slower))
    syncing = [f"{s} {v.syncs[s]:.2f}/step" for s in v.medians.index if v.sync_free(s) is False]
    unknown = [s for s in v.medians.index if v.sync_free(s) is None]
    if syncing:
        out.append("  syncs outside the readback: " + ", ".join(syncing))
    if unknown:
        out.append("  syncs not measured (no CUDA in these rows): " + ", ".join(unknown))
    if excluded:
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


def _card_evidence(cards: Sequence[dict], mine: Optional[dict]) -> list[str]:
    out = [f"{len(cards)} platform card(s) read; this machine's: " + (card_results.label(mine) if mine else "none recorded")]
    for c in cards:
        v = card_results.strategy_verdicts(c)
        out.append(f"  {card_results.label(c)}: " + "; ".join(f"{s} {v[s] or 'not measured'}" for s in v))
    return out


def _rank_by_cards(kept: list, waits: dict, points: list, excluded: set, main: PointVerdict) -> tuple[list, list[str]]:
    """kept (fastest first), with a strategy sync-free here and on every card put first when the
    fastest kept one waits on some card, even if it is slower here; the evidence when that reorders."""
    if not kept or not waits.get(kept[0]):
        return kept, []
    portable = [s for s in main.medians.sort_values().index if s not in excluded and not waits.get(s)
                and all(p.sync_free(s) is not False for p in points if s in p.medians.index)]
    if not portable:
        return kept, [f"{kept[0]}'s copy waits on {', '.join(waits[kept[0]])}, and no sync-free strategy here is "
                      "sync-free on every recorded card"]
    fast, chosen = kept[0], portable[0]
    c = summaries.compare(main.rows, chosen, fast) if main.rows is not None else None
    gain = f" ({chosen} against it: {c['difference']})" if c else ""
    return [chosen] + [s for s in kept if s != chosen], [
        f"{fast} is the fastest here{gain} but its copy waits on {', '.join(waits[fast])}: ranked below "
        f"{chosen}, sync-free on every recorded card"]


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


def _card_exclusions(cards: list, runs: RunData, rid: str) -> tuple[list[str], set]:
    """What the cards say, and the strategies this machine's card rules out (their copy waits here)."""
    if not cards:
        return [], set()
    first = runs.ok[runs.ok["run_id"] == rid].iloc[0]
    mine = card_results.latest_of(cards, {"gpu": first.get("gpu"), "driver": first.get("driver")})
    evidence = _card_evidence(cards, mine)
    if mine is None:
        return evidence, set()
    here = {s for s, v in card_results.strategy_verdicts(mine).items() if v == card_results.WAITS}
    if here:
        evidence.append("  ruled out by this machine's card (their copy waits here): " + ", ".join(sorted(here)))
    return evidence, here


def _fallback_choice(main, excluded: set) -> tuple[Optional[str], str]:
    """The choice where no strategy is good at every EP regime: the fastest good one at the main
    point, else the fastest sync-free one, else none; with the sentence saying which."""
    ranked = main.medians.sort_values().index
    fallback = [s for s in ranked if s not in excluded and main.good(s)]
    if fallback:
        return fallback[0], (f"no strategy is good at every EP regime; {fallback[0]} is the fastest good one at "
                             f"EP {main.ep_size}, where the scalar is read")
    free = [s for s in ranked if s not in excluded and main.sync_free(s) is not False]
    if free:
        return free[0], (f"every sync-free strategy is measurably slower than the fastest; {free[0]} is the fastest "
                         "sync-free one")
    return None, "no sync-free strategy at this point"


def recommend(rows: pd.DataFrame, probe: Optional[dict] = None, cards: Optional[Sequence[dict]] = None) -> Recommendation:
    """The strategy to use on the machine of `rows` (its most recent run measured in one process), by
    RULE (and CARD_RULE when platform cards are given), with evidence."""
    runs = measured_in_one_process(rows if isinstance(rows, RunData) else RunData(rows))
    if runs.ok.empty:
        raise ValueError("rows hold no successful trial measured in one process: record a run first (dspark-lab sweep)")
    rid = latest_run(runs)
    label = runs.labels().get(rid, rid)
    points = _latest_points(runs, rid)
    evidence, excluded = _probe_exclusions(probe, points)
    cards = list(cards or [])
    waits = card_waits(cards)
    card_evidence, by_card = _card_exclusions(cards, runs, rid)
    evidence += card_evidence
    for p in points:
        evidence += _point_evidence(p, excluded)
    evidence += _regime_evidence(points)
    excluded = excluded | by_card
    main = next((p for p in points if p.ep_size > 1), points[0])
    kept = [s for s in main.medians.sort_values().index
            if s not in excluded and all(p.good(s) for p in points if s in p.medians.index)]
    kept, reordered = _rank_by_cards(kept, waits, points, excluded, main)
    evidence += reordered
    if reordered and kept and not waits.get(kept[0]):
        evidence.append(f"{kept[0]}: the fastest sync-free strategy here that is sync-free on every recorded card")
        return Recommendation(kept[0], evidence, label, True)
    if kept:
        why = "good at every EP regime recorded" if len(points) > 1 else f"good at {main.label}"
        evidence.append(f"{kept[0]}: the fastest at EP {main.ep_size} among those {why}"
                        + (f" (also kept: {', '.join(kept[1:])})" if kept[1:] else ""))
        return Recommendation(kept[0], evidence, label, bool(cards))
    chosen, why = _fallback_choice(main, excluded)
    evidence.append(why)
    return Recommendation(chosen, evidence, label, bool(cards))


def probe_in_words(probe: Optional[dict]) -> list[str]:
    """The probe's result read out, with what it implies for the choice of strategy on this machine."""
    if not probe or not probe.get("available"):
        reason = (probe or {}).get("reason", "no probe ran")
        return [f"{reason}.",
                "Without it, whether a non-blocking copy from pageable memory blocks is read from the recorded "
                "rows' sync counts (a blocking copy is counted as a synchronous memcpy)."]
    q = float(probe["queued_ms"])
    per = probe.get("strategies", {})
    waited = [s for s, v in per.items() if v["queued_us"] > q * 1e3 / 2]
    free = [s for s in per if s not in waited]
    nb = per.get("non_blocking", {}).get("queued_us", math.nan)
    out = [f"With {q:.0f} ms of GPU work queued, one call of each strategy took on the host: "
           + ", ".join(f"{s} {v['queued_us']:.0f} µs" for s, v in per.items()) + "."]
    out.append(f"Waited for the queued work (host time over half of it): {', '.join(waited) or 'none'}; "
               f"returned at once: {', '.join(free) or 'none'}.")
    if pageable_blocks(probe):
        out.append(f"So on this GPU and driver a non-blocking copy from pageable memory waits for the queue "
                   f"(non_blocking: {nb:.0f} µs): CUDA staged it synchronously. The strategies built on it "
                   "(non_blocking, on_demand) sync here just as device_direct does: choose among those that "
                   f"returned at once ({', '.join(free) or 'none'}).")
    else:
        out.append(f"So on this GPU and driver a non-blocking copy from pageable memory does not wait for the "
                   f"queue (non_blocking: {nb:.0f} µs): the strategies built on it (non_blocking, on_demand) are "
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
