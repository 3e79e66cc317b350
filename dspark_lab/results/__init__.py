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
"""
from dspark_lab.results.query.runs import HEADLINE_RULE, REFERENCE, Headline, ReferencePoint, Runs
from dspark_lab.results.record.records import DataWarning, SchemaVersionError
from dspark_lab.results.record.rows import build_row
from dspark_lab.results.rules.stats import compare, difference_text, median_ci

__all__ = ["Runs", "Headline", "REFERENCE", "ReferencePoint", "HEADLINE_RULE", "build_row", "DataWarning",
           "SchemaVersionError", "median_ci", "compare", "difference_text"]
