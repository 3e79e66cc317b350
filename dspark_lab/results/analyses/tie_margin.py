"""The advice's tie margin, set from recorded runs of strategies that do the same work, with its evidence.

    from dspark_lab.results.analyses import tie_margin
    m = tie_margin.recorded()   # <data>/order/ (data/ or $DSPARK_DATA), else the kit's own data/order/
    print(m.pct, m.text())      # the margin and where it comes from

EQUAL_WORK_RULE  which strategies do the same work, read from the strategy table's rows (equal_work_pairs).
MARGIN_RULE      the margin: the largest paired difference between two strategies doing the same work in
                 any recorded randomised-order run, each pair taken both ways (the advice compares a
                 strategy against the faster one), rounded up to the next 0.1% above it (margin_of).
Where no record holds such a pair the margin falls back, and its text says so (recorded).
torch-free.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from dspark_lab.results.facts import strategy_table
from dspark_lab.results.loading.packed import load_packed
from dspark_lab.results.query.data import RunData
from dspark_lab.results.record.paths import REPO_ROOT, default_data_dir
from dspark_lab.results.rules import summaries

ORDER_FOLDER, ORDER_FILES = "order", "*.jsonl.gz"  # what studies.order.randomised_reference writes
READ, UNREAD = "EP > 1", "EP 1"  # the regimes: the MoE top-k reads the scalar (EP > 1), nothing does (EP 1)
STEP_PCT = 0.1  # the margin's precision as printed
CHANCE = 0.05  # the share of pairs that do not differ a 95% CI still puts apart, on average
FALLBACK_PCT = 0.0  # with no measured spread no margin is claimed: only a difference inside its CI is a tie

EQUAL_WORK_RULE = (
    "equal work, from the strategy table: where the scalar is read (EP > 1), the sync-free reference and each "
    "strategy but the baseline whose copy is a cell of the platform card (one 4-byte copy or fill) and that adds "
    "no cross-stream wait, every two of them; where nothing reads it (EP 1), those of them that make no "
    "host-to-device copy there (those mirroring SGLang return None, a device-to-device cell fills on the "
    "device), every two of them. Equal up to that one small operation, not identical: the driver may "
    "stage a pageable source and does not stage a pinned one, a fill is a kernel launch with no host tensor, and "
    "at EP 1 a fill stands against no work; the margin holds those differences too.")
MARGIN_RULE = (
    "tie margin: the largest paired difference (% of the second, by trial round, each pair taken both ways) "
    "between two strategies doing the same work in any recorded randomised-order run (data/order/, "
    "studies.order.randomised_reference), rounded up to the next 0.1% above it, so that no recorded such pair "
    "is ranked; a new equal-work pair can fall outside it.")


@dataclass(frozen=True)
class EqualWorkPair:
    regime: str  # READ or UNREAD
    strategy: str
    against: str
    why: str


def _copies_nothing_unread(r: strategy_table.StrategyRow) -> bool:
    return r.mirrors_sglang or (r.card_cell is not None and r.card_cell[0] == "d2d")


def _pairs(regime: str, group: list, why) -> list[EqualWorkPair]:
    """Every two strategies of `group` (table order), each with why they do the same work."""
    return [EqualWorkPair(regime, a.name, b.name, why(a, b)) for i, a in enumerate(group) for b in group[:i]]


def _work(r: strategy_table.StrategyRow) -> str:
    return "returns None" if r.mirrors_sglang else f"a device {r.card_cell[1]}"


def equal_work_pairs() -> list[EqualWorkPair]:
    """EQUAL_WORK_RULE over the live strategy table."""
    same = [r for r in strategy_table.rows() if not r.baseline and r.card_cell is not None and not r.stream_waits]
    ref = strategy_table.row(strategy_table.SYNC_FREE)
    read = [ref] + [r for r in same if r.name != ref.name]
    unread = [r for r in same if _copies_nothing_unread(r)]
    return (_pairs(READ, read, lambda a, b: f"one 4-byte {a.card_cell[1]} against one {b.card_cell[1]}, "
                                            "no cross-stream wait")
            + _pairs(UNREAD, unread, lambda a, b: f"{_work(a)} against {_work(b)}: no host-to-device copy"))


def differences(rows: pd.DataFrame, headers: Sequence[dict] = ()) -> list[dict]:
    """Per run and equal-work pair present: the paired difference (% of `against`), its 95% CI, the difference
    taken the other way (`pct back`: % of `strategy`), and whether the run's trials ran in a seeded random
    order (`headers`: the run files' headers, for the runs' names)."""
    data = RunData(rows, headers=headers)
    out = []
    for rid in data.run_ids():
        ok = data.ok[data.ok["run_id"].astype(str) == str(rid)]
        randomised = "order_seed" in ok.columns and bool(ok["order_seed"].notna().any())
        for p in equal_work_pairs():
            at = ok[(ok["ep_size"] == 1) if p.regime == UNREAD else (ok["ep_size"] > 1)]
            if at.empty or not {p.strategy, p.against} <= set(at["strategy"]):
                continue
            c = summaries.compare(at, p.strategy, p.against)
            back = summaries.compare(at, p.against, p.strategy)["pct"]
            out.append({"run": data.labels().get(rid, rid), "regime": p.regime, "strategy": p.strategy,
                        "against": p.against, "pct": c["pct"], "pct back": back,
                        "ci_low": c["ci_low"], "ci_high": c["ci_high"],
                        "within CI": not c["measurable"], "rounds": c["quiet_rounds"], "gpu": str(at["gpu"].iloc[0]),
                        "randomised": randomised, "why same work": p.why})
    return out


def _shown(path) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(p)


@dataclass(frozen=True)
class TieMargin:
    """The margin (pct) and its evidence; `fallback` says why it is not this data folder's own ('' when it is)."""

    pct: float
    files: tuple = ()
    gpus: tuple = ()
    runs: int = 0
    pairs: int = 0
    apart: int = 0  # equal-work pairs measurably apart (95% CI off zero), each still inside the margin
    largest: Optional[dict] = None  # the equal-work difference the margin is set from
    fallback: str = ""
    split: int = 0  # equal-work pairs whose 95% CIs in two runs exclude each other (split_pairs)

    def text(self) -> str:
        if self.largest is None:
            return f"tie margin {self.pct:g}% ({self.fallback})"
        d = self.largest
        head = f"{self.fallback}: the kit's own record gives it; " if self.fallback else ""
        return (f"{head}tie margin {self.pct:g}% = the largest equal-work difference, {abs(d['pct']):.2f}% "
                f"({d['strategy']} against {d['against']} at {d['regime']}, {d['run']}), rounded up to the next "
                f"{STEP_PCT:g}%, over {self.runs} randomised-order runs on {', '.join(self.gpus)} "
                f"({', '.join(_shown(f) for f in self.files)}); of {self.pairs} equal-work pair differences (each pair "
                f"once a run), {self.apart} measurably apart, each by less than the margin{self._beyond_chance()} "
                "(results.analyses.tie_margin.EQUAL_WORK_RULE, MARGIN_RULE)")

    def _beyond_chance(self) -> str:
        """Said where more pairs are apart than 95% CIs put apart by chance on average and a pair's CIs in two
        runs exclude each other: a run's CIs miss the spread between runs. No p value: a run's pairs share
        strategies (one strategy off moves every pair it is in), so its pairs are not independent."""
        expected = CHANCE * self.pairs
        if not self.split or self.apart <= expected:
            return ""
        return (f": more than the {expected:.1f} that 95% CIs put apart by chance on average, and for "
                f"{self.split} pair{'s' if self.split > 1 else ''} the CIs of two runs exclude each other, so a "
                "run's CI understates the spread between runs, which the margin takes")


def split_pairs(diffs: Sequence[dict]) -> int:
    """The equal-work pairs whose 95% CIs in two runs of `diffs` exclude each other (neither holds the other's
    values): the pair's difference moved between runs by more than either run's CI allows."""
    cis: dict = {}
    for d in diffs:
        if d.get("ci_low") is not None and d.get("ci_high") is not None:
            cis.setdefault((d["regime"], d["strategy"], d["against"]), []).append((d["ci_low"], d["ci_high"]))
    return sum(any(a[1] < b[0] or b[1] < a[0] for i, a in enumerate(v) for b in v[:i]) for v in cis.values())


def given(pct) -> TieMargin:
    """A margin the caller sets (a number of percent >= 0), said as such."""
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not math.isfinite(pct) or pct < 0:
        raise ValueError(f"margin_pct must be a finite number of percent >= 0 (or None: the recorded margin); got {pct!r}")
    return TieMargin(float(pct), fallback="given by the caller, not the recorded equal-work spread")


def _larger_way(d: dict) -> dict:
    """The pair's difference the way it is larger: a 3.42% gap as % of the slower is 3.54% of the faster."""
    back = d.get("pct back")
    if back is None or abs(back) <= abs(d["pct"]):
        return d
    return dict(d, strategy=d["against"], against=d["strategy"], pct=back, **{"pct back": d["pct"]})


def margin_of(diffs: Sequence[dict], files=()) -> Optional[TieMargin]:
    """MARGIN_RULE over `differences(...)` of the runs in `files`: the margin with its evidence; None where no
    randomised-order run holds an equal-work pair (a fixed trial order's rotation bias is not the bench's spread)."""
    diffs = [d for d in diffs if d["randomised"]]
    if not diffs:
        return None
    largest = max((_larger_way(d) for d in diffs), key=lambda d: abs(d["pct"]))
    top = abs(largest["pct"])
    pct = round(math.floor(top / STEP_PCT + 1e-9) * STEP_PCT + STEP_PCT, 1)
    if pct <= top:  # a float a hair under the step: one more step keeps the pair inside
        pct = round(pct + STEP_PCT, 1)
    return TieMargin(pct, tuple(str(f) for f in files), tuple(sorted({d["gpu"] for d in diffs})),
                     len({d["run"] for d in diffs}), len(diffs), sum(not d["within CI"] for d in diffs), largest,
                     split=split_pairs(diffs))


def order_files(data_dir) -> list[Path]:
    """The randomised-order run files under <data_dir>/order/, by name."""
    return sorted((Path(data_dir) / ORDER_FOLDER).glob(ORDER_FILES))


@functools.lru_cache(maxsize=8)
def _from_files(files: tuple, _stamps: tuple) -> Optional[TieMargin]:
    loaded = load_packed(files)
    return margin_of(differences(loaded.rows, loaded.headers), files)


def from_files(files: Sequence) -> Optional[TieMargin]:
    """MARGIN_RULE over these run files (gzipped or plain); None where they hold no equal-work pair.
    Read once per state of the files."""
    files = tuple(str(f) for f in files)
    stamps = tuple((st.st_mtime_ns, st.st_size) for st in (Path(f).stat() for f in files))
    return _from_files(files, stamps) if files else None


def recorded(data_dir=None) -> TieMargin:
    """The margin from <data_dir>/order/ (default: the data folder, data/ or $DSPARK_DATA); where that holds
    no equal-work pair, from the kit's own data/order/, said so; where neither does, FALLBACK_PCT, said so."""
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    own = from_files(order_files(folder))
    if own is not None:
        return own
    missing = (f"no randomised-order run with an equal-work pair under {_shown(folder / ORDER_FOLDER)} "
               "(python -m studies.order.randomised_reference records them)")
    kit = REPO_ROOT / "data"
    if kit.resolve() != folder.resolve():
        theirs = from_files(order_files(kit))
        if theirs is not None:
            return replace(theirs, fallback=missing)
    return TieMargin(FALLBACK_PCT, fallback=f"{missing}: fallback {FALLBACK_PCT:g}%, no measured equal-work spread, "
                                            "so every measurably slower strategy is ranked")
