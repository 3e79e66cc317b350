"""The results wing: recorded runs stored, loaded, judged, queried and analysed, without torch or plotly.

    from dspark_lab.results import Runs
    runs = Runs.load()              # data/runs/ (or $DSPARK_DATA), every file validated
    print(runs.headline().text())   # the reference point's numbers, with the rule that chose them

Sub-wings, each importing only those below it (the `results-sub-wings` contract in pyproject.toml):
  viewmodels/  what the views draw: a point as every figure shows it, the panel's recorded backend
  analyses/    one analysis a module (card, advice, hazards, EP prediction, sync cost, step diff)
  query/       the data object (RunData), the `Runs` facade over it, the run list, kinds, headline
  loading/     reading run files with validation, through the columnar cache
  rules/       statistics and the rules over rows (disturbed trials, selection, summaries, labels)
  record/      the record formats on disk and their writers (rows, run files, inspect records)
  facts/       what the kit knows of each strategy and each run kind, one table each

The names below are loaded on first use (a module `__getattr__`; their imports are written down
under TYPE_CHECKING, so the import linter still sees every edge), so importing a module of this
wing (the facts above all) loads only what that module imports, not pandas and the query layer.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # every edge written down, for the import linter and a reader; loaded on first use below
    from dspark_lab.results.query.runs import HEADLINE_RULE, REFERENCE, Headline, ReferencePoint, Runs
    from dspark_lab.results.record.records import DataWarning, SchemaVersionError
    from dspark_lab.results.record.rows import build_row
    from dspark_lab.results.rules.stats import compare, difference_text, median_ci

# name -> the module that defines it, imported when the name is first asked for.
_LAZY = {
    "Runs": "dspark_lab.results.query.runs",
    "Headline": "dspark_lab.results.query.runs",
    "REFERENCE": "dspark_lab.results.query.runs",
    "ReferencePoint": "dspark_lab.results.query.runs",
    "HEADLINE_RULE": "dspark_lab.results.query.runs",
    "build_row": "dspark_lab.results.record.rows",
    "DataWarning": "dspark_lab.results.record.records",
    "SchemaVersionError": "dspark_lab.results.record.records",
    "median_ci": "dspark_lab.results.rules.stats",
    "compare": "dspark_lab.results.rules.stats",
    "difference_text": "dspark_lab.results.rules.stats",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # asked once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
