"""`Runs`: recorded runs loaded once, labelled, selected and compared the same way in every view.

The report, the CLI, the panel and the notebooks ask these questions here and only render the
answers, so the same question gives the same number everywhere:
  - which runs are there, each with a short unique label (`labels()`, column `run_label`);
  - a point, the nearest recorded point, THE reference point (`REFERENCE`, defined once);
  - per-run or pooled summaries (median step time, 95% CI, trials, disturbed trials left out);
  - paired comparisons within a run and the same comparison across runs;
  - the `headline`: the reference point's numbers by one explicit rule (`HEADLINE_RULE`).

A thin facade, as HolisticTraceAnalysis's TraceAnalysis over its parsed Trace: the data lives in
RunData (query/data.py) and every question is answered by a module of one concern: labels (names),
selection (rows and points), catalog (the list of runs), run_filters (`select`), summaries (medians
and comparisons), headline, noise (the verdicts). Analyses take the RunData, never this facade.
"""
from __future__ import annotations

import pandas as pd

from dspark_lab.results.facts.strategy_table import BASELINE
from dspark_lab.results.loading.load import load
from dspark_lab.results.query.catalog import MAX_COMPARED
from dspark_lab.results.query.data import RunData
from dspark_lab.results.query.headline import HEADLINE_RULE, Headline, headline as _headline
from dspark_lab.results.record.paths import default_data_dir
from dspark_lab.results.record.schema import MACHINE_KEYS
from dspark_lab.results.rules import selection, summaries
from dspark_lab.results.rules.labels import EP_MODE_LABELS, gpu_name, point_label, run_labels
from dspark_lab.results.rules.selection import (REFERENCE, SEPARATE_EP_MODES, ReferencePoint, failed_rows, ok_rows,
                                                one_process, point_distance, undisturbed)

# The names views, notebooks and the CLI import from here (defined in the modules above).
__all__ = ["Runs", "Headline", "HEADLINE_RULE", "REFERENCE", "ReferencePoint", "SEPARATE_EP_MODES",
           "MACHINE_COLUMNS", "MAX_COMPARED", "EP_MODE_LABELS", "ok_rows", "failed_rows", "one_process",
           "undisturbed", "point_distance", "point_label", "gpu_name", "run_labels"]
MACHINE_COLUMNS = MACHINE_KEYS


class Runs(RunData):
    """Recorded runs, loaded, labelled, selected and compared the same way in every view: the data
    object (RunData) and the questions built on it."""

    @classmethod
    def load(cls, paths=None, *, cache=None) -> "Runs":
        """Load run files or folders (default: the data dir, data/ or $DSPARK_DATA), through the
        columnar cache (results/loading/cache.py; `cache=False` parses every file)."""
        loaded = load(paths, default=default_data_dir(), cache=cache)
        return cls(loaded.rows, loaded.timeline_source, loaded.headers, loaded.warnings)

    def default_selection(self, limit: int = MAX_COMPARED) -> list[str]:
        """The runs compared when none are chosen, all holding the headline's point so that every
        one is drawn: the headline run of each machine, then the other runs that recorded that point
        (one process; the latest of each machine first, then the newest); at most `limit`. Without
        a headline: ranked_run_ids."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        return self._memoized(f"default_selection{limit}", lambda: self._default_selection(limit))

    def _default_selection(self, limit: int) -> list[str]:
        ranked = self.ranked_run_ids()
        entries = self.headline().entries
        if not entries:
            return ranked[:limit]
        first = self.newest_started([str(e["run_id"]) for e in entries])  # newest machine's first
        r0 = one_process(self.ok)
        r0 = r0[(r0["run_id"].astype(str) == first[0])]
        r0 = selection.reference(r0, first[0]).iloc[0]
        hold = self.holding(ranked, ep_size=r0["ep_size"], batch_size=r0["batch_size"], gamma=r0["gamma"],
                            workload=r0["workload"])
        return list(dict.fromkeys(first + hold))[:limit]

    # -- summarising (results.rules.summaries) ---------------------------------------------------------
    summary = staticmethod(summaries.summary)
    paired_times = staticmethod(summaries.paired_times)
    compare = staticmethod(summaries.compare)
    best_fix = staticmethod(summaries.best_fix)

    def cross_run(self, rows: pd.DataFrame, baseline: str = BASELINE) -> list[dict]:
        """Per run holding these rows' point: the baseline against that run's best fix."""
        return summaries.cross_run(rows, self._labels, baseline)

    # -- the headline (results.query.headline) ---------------------------------------------------------
    def headline(self, baseline: str = BASELINE, cpu_runs: bool = False) -> Headline:
        """The reference point's numbers by HEADLINE_RULE (printed with them); CPU-only runs left out
        and named unless `cpu_runs`."""
        return _headline(self, baseline, cpu_runs)
