"""The results layer: load, validate, select and compare recorded runs, without torch or plotly.

    from dspark_lab.results import Runs
    runs = Runs.load()              # data/runs/ (or $DSPARK_DATA), every file validated
    print(runs.headline().text())   # the reference point's numbers, with the rule that chose them

Modules: rows (the typed row and its one builder), load (reading with validation), stats
(medians, CIs, paired comparisons), runs (the Runs object), strategy_info (names without torch).
Names load lazily so that `import dspark_lab.results.load` stays light.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "Runs": "runs", "Headline": "runs", "REFERENCE": "runs", "ReferencePoint": "runs", "HEADLINE_RULE": "runs",
    "build_row": "rows", "DataWarning": "load", "SchemaVersionError": "load", "median_ci": "stats",
    "compare": "stats", "difference_text": "stats",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
