"""The headline: the reference point's numbers per machine, by one explicit rule (`HEADLINE_RULE`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from dspark_lab.results.rules import noise
from dspark_lab.results.rules import summaries
from dspark_lab.results.rules import sync_penalty
from dspark_lab.results.rules.labels import CPU_ONLY, gpu_name, point_label
from dspark_lab.results.record.schema import MACHINE_KEYS
from dspark_lab.results.rules.selection import REFERENCE, one_process
from dspark_lab.results.facts import strategy_table
from dspark_lab.results.facts.strategy_table import BASELINE, SYNC_FREE

if TYPE_CHECKING:
    import pandas as pd

    from dspark_lab.results.query.data import RunData

NOISE = noise.__name__.removeprefix("dspark_lab.")  # where the rules it cites live, named as they move

HEADLINE_RULE = (
    "rule: per machine (GPU, driver, CUDA, torch), the most recent run holding the reference point "
    f"({REFERENCE.describe()}); that run's trials only, not pooled across runs; trials marked disturbed "
    f"left out ({NOISE}.RULE). Median step time over trials with a 95% bootstrap CI; {BASELINE} "
    f"against the fastest other strategy, paired by trial round; the headline ratio {BASELINE} / "
    f"{SYNC_FREE} per trial round, over rounds where neither trial is disturbed, with its 95% CI "
    f"(no CI from fewer than {noise.MIN_QUIET_ROUNDS} quiet rounds: the count is printed instead). "
    f"A run whose headline pair has fewer than {noise.MIN_QUIET_ROUNDS} quiet rounds there (no CI) is passed over "
    "in favour of the most recent run of the machine that has them, and the line names each run passed over; "
    "where no run has them the most recent stands, without a CI. "
    f"A run disturbed as a whole at the point ({NOISE}.RUN_RULE) is skipped in favour of the most "
    "recent undisturbed run of the machine holding it, and the line says which run was skipped and why; "
    "a machine with no undisturbed run gets no headline, and a run that has neither another run of its "
    "machine nor a baseline in its header to be judged by is marked as not judged."
)
FIRST_LINE_MAX = 160  # a machine's first headline line fits a terminal and a PR comment
DETAIL = "  "  # the indent of the lines below it


@dataclass
class Headline:
    """The reference point's numbers per machine, chosen by `rule`."""

    rule: str
    entries: list = field(default_factory=list)  # per machine: dict(run_id, label, point, strategies, comparison, ...)
    # machines whose every run holding the point is disturbed as a whole: dict(label, skipped_runs)
    withheld: list = field(default_factory=list)
    cpu_only: list = field(default_factory=list)  # labels of CPU-only runs left out (headline(cpu_runs=False))

    def lines(self) -> list[str]:
        """Every machine's block (`blocks`), one after another."""
        return [line for block in self.blocks() for line in block]

    def blocks(self) -> list[list[str]]:
        """Per machine: its first line, "headline: " with the pair's ratio, its CI and quiet rounds and
        the run (at most FIRST_LINE_MAX characters), then the rest, each line indented by DETAIL."""
        out = [_entry_block(e) for e in self.entries]
        for w in self.withheld:
            first = (f"headline: {w['label']}: no headline, every run of this machine holding the reference point "
                     "is disturbed as a whole")
            out.append([first] + [f"{DETAIL}skipped {sk['label']}: {sk['reason']}" for sk in w["skipped_runs"]])
        if self.cpu_only:
            out.append([f"headline: {len(self.cpu_only)} CPU-only run(s) not headlined: a CPU's step times say "
                         "nothing of a GPU's syncs (dspark-lab report --cpu-runs, or Runs.headline(cpu_runs=True), "
                         "headlines each such machine by the rule)"]
                        + [f"{DETAIL}left out: {label}" for label in self.cpu_only])
        if not self.entries and not self.withheld and not self.cpu_only:
            out.append(["headline: no recorded run holds a successful point of the reference workload"])
        return out

    def text(self) -> str:
        return "\n".join(self.lines() + [self.rule])

    def __str__(self) -> str:
        return self.text()


def _first_line(e: dict) -> str:
    """The pair's ratio with its CI and quiet rounds, then the run; a label too long for the line is cut."""
    ratio = e.get("ratio")
    said = noise.ratio_words(ratio) if ratio else f"no headline ratio (needs {BASELINE} and another strategy)"
    line = f"headline: {said} · {e['label']}"
    if len(line) > FIRST_LINE_MAX:
        line = line[:FIRST_LINE_MAX - 1] + "…"
    return line


def _entry_block(e: dict) -> list[str]:
    """One machine's headline: the first line, then the point's medians, the best fix against the
    baseline, what was left out, the sync's cost and which runs were passed over, one a line."""
    parts = [f"{s['strategy']} {s['median_ms']:.2f} ms" for s in e["strategies"]]
    rest = [f"at {e['point']}: median step " + ", ".join(parts)]
    if e.get("comparison"):
        rest.append(e["comparison"]["verdict"])
    left_out = noise.left_out_words(e["ratio"]) if e.get("ratio") else ""
    if e.get("disturbed_left_out"):
        left_out += f" ({e['disturbed_left_out']} disturbed trials left out)"
    if left_out:
        rest.append(left_out.strip())
    if e.get("penalty_parts"):
        rest.append(sync_penalty.in_words(e["penalty_parts"]))
    rest += [f"skipped {sk['label']} (disturbed run: {sk['reason']})" for sk in e.get("skipped_runs", [])]
    rest += [f"passed over {po['label']} (newer, {po['quiet_rounds']} quiet rounds: no CI)"
             for po in e.get("passed_over", [])]
    if e.get("not_judged"):
        rest.append(f"this run {e['not_judged']}")
    return [_first_line(e)] + [DETAIL + line for line in rest]


def _entry(runs: "RunData", rid: str, rows: "pd.DataFrame", skipped: list, baseline: str) -> dict:
    """One machine's headline entry from one run's rows of the reference point."""
    label = runs.label_of(rid)
    summ = summaries.summary(rows)
    entry = {"skipped_runs": skipped, "run_id": rid, "label": label, "point": point_label(rows.iloc[0]),
             "point_id": rows["point_id"].iloc[0], "strategies": summ.to_dict("records"),
             "disturbed_left_out": int(summ["disturbed_left_out"].sum()), "comparison": None}
    best = summaries.best_in_summary(summ, baseline)
    if best and baseline in set(rows["strategy"]):
        entry["comparison"] = {"best": best, **summaries.compare(rows, best, baseline, noise.MIN_QUIET_ROUNDS)}
    try:
        entry["ratio"] = noise.headline(rows)
    except ValueError:  # one strategy only: no ratio to form
        entry["ratio"] = None
    entry["penalty_parts"] = sync_penalty.penalty_parts(rows)
    return entry


def _reference_rows(runs: "RunData", rid: str, ref_ep: int) -> Optional["pd.DataFrame"]:
    """The run's rows of exactly the reference point at `ref_ep`, or None when it did not record it."""
    try:
        rows = runs.reference(run_id=rid, ep_size=ref_ep)
    except ValueError:
        return None
    if rows.empty:
        return None
    point = rows[["ep_size", "batch_size", "gamma"]].iloc[0].tolist()
    if (rows["workload"] != REFERENCE.workload).any() or point != [ref_ep, REFERENCE.batch_size, REFERENCE.gamma]:
        return None
    return rows


def _check_baseline(runs: "RunData", baseline) -> None:
    """ValueError unless `baseline` is a strategy the kit knows or the runs recorded."""
    known = set(strategy_table.names()) | {str(s) for s in runs.rows["strategy"].dropna().unique()}
    if not isinstance(baseline, str) or baseline not in known:
        raise ValueError(f"baseline must be a strategy name, got {baseline!r:.60}; allowed: {', '.join(sorted(known))}")


def headline(runs: "RunData", baseline: str = BASELINE, cpu_runs: bool = False) -> Headline:
    """The reference point's numbers by HEADLINE_RULE (printed with them): per machine, its newest
    run holding the point that is not disturbed as a whole there (noise.RUN_RULE). A machine whose runs
    record no GPU (gpu "none", "cpu" or empty: labels.gpu_name) is left out and its runs named unless
    `cpu_runs`."""
    _check_baseline(runs, baseline)
    head = Headline(HEADLINE_RULE)
    ok = one_process(runs.ok)
    if ok.empty:
        return head
    try:  # the reference EP size is the largest recorded over all runs of the machine's kind
        ref = runs.reference()
    except ValueError:
        return head
    if ref.empty:  # no point near it (rows without a batch size or gamma place none)
        return head
    ref_ep = int(ref["ep_size"].iloc[0])
    machines = ok.drop_duplicates("run_id")[["run_id", *MACHINE_KEYS]].astype(str)
    rd = runs.run_disturbance()
    why_run = {(str(r), p): why for r, p, bad, why in zip(rd["run_id"], rd["point_id"], rd["run_disturbed"],
                                                           rd["run_disturbed_reason"]) if bad}
    alone = {(str(r), p) for r, p, why in zip(rd["run_id"], rd["point_id"], rd["run_disturbed_reason"])
             if why == noise.CANNOT_JUDGE_ALONE}
    for _, m in machines.groupby(list(MACHINE_KEYS), sort=True):
        if not cpu_runs and gpu_name(m["gpu"].iloc[0]) == CPU_ONLY:
            head.cpu_only += [runs.label_of(rid) for rid in runs.newest_started(m["run_id"])]
            continue
        skipped, candidates = [], []
        for rid in runs.newest_started(m["run_id"]):
            rows = _reference_rows(runs, rid, ref_ep)
            if rows is None:
                continue
            why = why_run.get((rid, rows["point_id"].iloc[0]))
            if why:
                skipped.append({"run_id": rid, "label": runs.label_of(rid), "reason": why})
                continue
            entry = _entry(runs, rid, rows, list(skipped), baseline)
            if (rid, rows["point_id"].iloc[0]) in alone:
                entry["not_judged"] = noise.CANNOT_JUDGE_ALONE
            candidates.append(entry)
            if _meets_the_standard(entry):
                break
        if candidates:
            head.entries.append(_chosen(candidates))
        elif skipped:
            head.withheld.append({"label": skipped[0]["label"], "skipped_runs": skipped})
    return head


def _meets_the_standard(entry: dict) -> bool:
    """The headline's own standard: its ratio from at least MIN_QUIET_ROUNDS quiet rounds (a CI)."""
    ratio = entry.get("ratio")
    return bool(ratio) and ratio.get("quiet_rounds", 0) >= noise.MIN_QUIET_ROUNDS and ratio.get("ci_low") is not None


def _chosen(candidates: list) -> dict:
    """The newest candidate that meets the standard, naming the newer ones passed over; the newest
    candidate when none meets it (its line says it has no CI)."""
    if not _meets_the_standard(candidates[-1]):
        return candidates[0]
    chosen = candidates[-1]
    chosen["passed_over"] = [{"run_id": e["run_id"], "label": e["label"],
                              "quiet_rounds": (e.get("ratio") or {}).get("quiet_rounds", 0)} for e in candidates[:-1]]
    return chosen
