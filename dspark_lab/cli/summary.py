"""A short text summary of recorded runs, as `report --summary` and `main` print it: the runs, the
headline (with its rule), then each headline run's step times by strategy x EP size."""
from __future__ import annotations

import pandas as pd

from dspark_lab.results.facts import strategy_table
from dspark_lab.results.query.runs import REFERENCE, Runs

SUMMARY_RUNS = 20  # runs listed by summary_table, the newest


def summary_table(runs, cpu_runs: bool = False) -> str:
    """The headline (with its rule), then per machine the headline's run at the reference batch and
    gamma: median step time over trials and syncs/step by strategy x EP size. Same rule, same
    numbers as the report and the notebooks (results.Runs.headline; `cpu_runs` as there: CPU-only
    runs headlined too, else left out and named)."""
    if not isinstance(runs, Runs):
        runs = Runs(runs)
    if runs.rows.empty:
        return "(no rows)"
    head = runs.headline(cpu_runs=cpu_runs)
    table = runs.table().to_dict("records")
    older = max(0, len(table) - SUMMARY_RUNS)  # a team's worth of runs: the newest listed, the rest counted
    listing = ["recorded runs:"] + [
        f"  {r['run']}: {r['GPU']} | driver {r['driver']} | CUDA {r['CUDA']} | torch {r['torch']} | "
        f"{r['points']} points, {r['failed points']} failed" for r in table[older:]]
    if older:
        listing.insert(1, f"  ({older} older run(s) not listed; the report's table lists every run)")
    blocks = ["\n".join(listing), head.text()]
    for e in head.entries:
        rows = runs.ok[(runs.ok["run_id"] == e["run_id"]) & (runs.ok["workload"] == REFERENCE.workload)
                       & (runs.ok["batch_size"] == REFERENCE.batch_size) & (runs.ok["gamma"] == REFERENCE.gamma)]
        cells = {}
        for ep, g in rows.groupby("ep_size"):
            summ = runs.summary(g).set_index("strategy")
            syncs = g.groupby("strategy")["syncs_per_step"].median()
            for s_name, r in summ.iterrows():
                cells[(s_name, f"EP {ep}")] = f"{r['median_ms']:7.2f} ms  {_fmt_num(syncs.get(s_name))} sync/step"
        table = pd.Series(cells).unstack()
        table.index.name = None
        table = table.loc[[s for s in strategy_table.names() if s in table.index] +
                          [s for s in table.index if s not in strategy_table.names()]]
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            body = table.fillna("-").to_string()
        blocks.append(f"{e['label']}: {REFERENCE.workload}, batch {REFERENCE.batch_size}, gamma "
                      f"{REFERENCE.gamma}: median step time over that run's trials, median unintended "
                      f"syncs per step\n{body}")
    return "\n\n".join(blocks)


def _fmt_num(v) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "?"
    return "n/a" if f != f else f"{f:.1f}"  # NaN: not measured (sync counts on CPU)
