"""What each teaching view draws from the recorded runs, chosen by run kind and point so that the
view can show its lesson, and a sentence that says what was picked (`Pick.note`).

  ep1_point        notebook 01 "At EP 1 nothing reads the scalar": an EP-1 point of a grid run
  real_ep          notebook 01 "One rank's sync costs every rank": one EP recording's real-rank
                   rows, every dispatch mode it holds, a2a_fixed preferred (no sync of its own)
  predicted_ep     notebook 01, below it: the newest EP-predicted run as a table, a case a row
                   (named the same at every EP size) and an EP size a column
  stand_in_sweep   notebook 02 without a GPU: the machine's latest grid run stands in
  compared_at_point notebook 02 "every machine side by side": at most MAX_COMPARED runs of one point
  card_beside      notebook 02: the recorded card to set beside this machine's
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pandas as pd

from dspark_lab.results.facts.run_kinds import GRID_KINDS
from dspark_lab.results.record.schema import MACHINE_KEYS
from dspark_lab.results.rules.labels import point_label, rank_case_name
from dspark_lab.results.query.runs import MAX_COMPARED, REFERENCE, Runs, one_process

# Fixed-capacity all-to-all moves no count to the host, so its rank cases show the scalar's sync alone;
# a2a_dynamic adds syncs of its own (its split sizes go to the host), allreduce has none either.
PREFERRED_DISPATCH = ("a2a_fixed", "allreduce", "a2a_dynamic")


@dataclass
class Pick:
    rows: pd.DataFrame
    run_ids: list = field(default_factory=list)
    kind: str = ""  # results.query.kinds key of the picked run(s)
    note: str = ""  # what was picked and why, one sentence
    dispatch: str = ""  # real_ep only: the dispatch mode to draw first

    @property
    def empty(self) -> bool:
        return self.rows.empty


def ep1_point(runs: Runs, batch_size: int = REFERENCE.batch_size, gamma: int = REFERENCE.gamma) -> Pick:
    """An EP-1 point (the reference batch and gamma, else the nearest recorded) of the newest grid
    run that holds EP 1; any run holding EP 1 when no grid run does."""
    ok = one_process(runs.ok)
    ep1 = ok[ok["ep_size"] == 1]
    if ep1.empty:
        return Pick(ok.iloc[0:0], note="no EP-1 point recorded: record one with `dspark-lab sweep` (EP 1 is in the default grid)")
    with_ep1 = set(ep1["run_id"].astype(str))
    grid = [r for r in runs.runs_of_kind(*GRID_KINDS) if r in with_ep1]
    run = grid[0] if grid else runs.newest_started(with_ep1)[0]
    wl = REFERENCE.workload if REFERENCE.workload in set(ep1["workload"]) else None
    rows = runs.nearest(ep_size=1, batch_size=batch_size, gamma=gamma, workload=wl, run_id=run, ok_only=False,
                        one_process_only=True)
    return Pick(rows, [run], runs.kind_of(run),
                f"EP-1 point from {runs.label_of(run)} ({runs.kind_name(run)}): {point_label(rows.iloc[0])}")


def real_ep(runs: Runs) -> Pick:
    """The real-rank rows of the newest EP recording holding the preferred dispatch mode (all its
    parts: every dispatch mode it recorded), and which mode to draw first."""
    ok = runs.ok
    real = ok[ok["ep_mode"] == "real"] if "ep_mode" in ok.columns else ok.iloc[0:0]
    if real.empty:
        return Pick(real, note="no real-EP run recorded: record one with `dspark-lab ep --world 2` on a machine "
                               "with 2 GPUs")
    real = real.assign(run_id=real["run_id"].astype(str))
    by_rec: dict = {}
    for rid in runs.newest_started(set(real["run_id"])):
        by_rec.setdefault(runs.recording_of(rid), []).append(rid)
    for want in PREFERRED_DISPATCH:
        for rec, ids in by_rec.items():  # newest recording first
            rows = real[real["run_id"].isin(ids)]
            if want in set(rows["dispatch"].astype(str)):
                modes = [d for d in PREFERRED_DISPATCH if d in set(rows["dispatch"].astype(str))]
                first = runs.label_of(sorted(ids, key=lambda r: runs.run_ids().index(r))[0])
                return Pick(rows, ids, "ep_real",
                            f"real ranks: the EP recording that starts with {first} ({len(ids)} file(s); "
                            f"dispatch modes {', '.join(modes)}); drawn first: {want}", dispatch=want)
    raise AssertionError("unreachable: every real row has a dispatch mode")  # pragma: no cover


def predicted_ep(runs: Runs) -> Pick:
    """The newest EP-predicted run's median step time per case and EP size. A rank case spells out
    every rank's strategy, so the same case reads differently at EP 4 and EP 8: rows are keyed by
    rank_case_name, which does not depend on the world size (and one run, not runs pooled)."""
    ids = runs.runs_of_kind("ep_predicted")
    ok = runs.ok
    rows = ok[(ok["run_id"].astype(str) == ids[0]) & (ok["ep_mode"] == "predicted")] if ids else ok.iloc[0:0]
    if rows.empty:
        return Pick(rows, note="no predicted EP sizes recorded (studies/ep/real_ranks.py records them next to the "
                               "real runs)")
    table = rows.assign(case=rows["rank_case"].map(rank_case_name)).pivot_table(
        index="case", columns="ep_size", values="step_ms", aggfunc="median", sort=False)
    table = table.rename(columns=lambda e: f"EP {e} (predicted), ms").rename_axis(index=None, columns=None)
    return Pick(table.round(2), ids[:1], "ep_predicted",
                f"predicted EP sizes: {runs.label_of(ids[0])} (median step time per case, ms; a model's numbers)")


def stand_in_sweep(runs: Runs) -> Pick:
    """The run that stands in for "this machine" where nothing can be measured: the newest
    machine's latest grid run (Runs.richest_grid_run)."""
    run = runs.richest_grid_run()
    if run is None:
        return Pick(runs.ok.iloc[0:0], note="no recorded run to stand in for this machine")
    rows = runs.rows[runs.rows["run_id"].astype(str) == run]
    return Pick(rows, [run], runs.kind_of(run),
                f"{runs.label_of(run)} ({runs.kind_name(run)}, {runs.grid_size(run)} points) stands in for this machine")


def compared_at_point(shared: pd.DataFrame, runs: Runs, first: str, limit: int = MAX_COMPARED) -> Pick:
    """At most `limit` runs of `shared` (the rows of every run holding one point) to draw side by
    side: `first` (this machine's run), then the newest run of each other machine (GPU, driver,
    CUDA, torch), then this point's best-measured runs (most quiet trials), newest first. The note
    says how many runs held the point and how many were left out."""
    shared = shared.assign(run_id=shared["run_id"].astype(str))
    held = runs.newest_started(set(shared["run_id"]))
    quiet = shared[~shared["disturbed"].astype(bool)].groupby("run_id").size() if "disturbed" in shared else \
        shared.groupby("run_id").size()
    info = runs.run_info().set_index("run_id")
    machine = {r: tuple(info.loc[r, list(MACHINE_KEYS)]) for r in held if r in info.index}
    chosen = [first] if first in held else []
    for r in held:  # each other machine's newest
        if len(chosen) < limit and r not in chosen and machine.get(r) not in {machine.get(c) for c in chosen}:
            chosen.append(r)
    for r in sorted(held, key=lambda r: -int(quiet.get(r, 0))):  # stable: newest first among equals
        if len(chosen) < limit and r not in chosen:
            chosen.append(r)
    left = len(held) - len(chosen)
    note = (f"{len(chosen)} of the {len(held)} runs holding {point_label(shared.iloc[0])} drawn side by side"
            + (f"; {left} left out (another run of the same machine, with fewer quiet trials or older; "
               "all are in the table above)" if left else ""))
    rows = pd.concat([shared[shared["run_id"] == r] for r in chosen]) if chosen else shared.iloc[0:0]
    return Pick(rows, chosen, note=note)


def card_beside(cards: list, mine: dict, same_machine) -> tuple[Optional[dict], str]:
    """The card to set beside `mine`: the newest of another machine; else (every card is this
    machine's) its newest other recording, to see whether the verdicts repeat; and a sentence
    saying which. `same_machine(card, fingerprint)`: results.analyses.card.same_machine."""
    others = [c for c in cards if c is not mine and not same_machine(c, mine["fingerprint"])]
    if others:
        return max(others, key=lambda c: str(c.get("recorded", ""))), "another machine's card"
    again = [c for c in cards if c is not mine and c.get("recorded") != mine.get("recorded")]
    if again:
        other = max(again, key=lambda c: str(c.get("recorded", "")))
        return other, (f"all {len(cards)} recorded cards are of this machine: its card of {other.get('recorded')} "
                       "beside this one (do the verdicts repeat?)")
    return None, f"{len(cards)} card(s) recorded, none but this one: no other card to set beside it"
