"""A sixth strategy added through the table and its function alone (strategies.registered: one
StrategyRow and one function, nothing else changed) is in every list the kit shows: the table and
the registry, the figures' colours and order, the command line's choices, the sweep's default
strategies and presets, the live panel's strategies, the recorded panel's options and its
dropdown over recorded rows of it, the stand-in panel's options, the report's strategy table, and
docs/lint.md's strategy table; and none of them keeps it once the block ends."""
from __future__ import annotations

import pytest

from dspark_lab import strategies
from dspark_lab.cli.lists import parse_strategies
from dspark_lab.cli.main import build_parser
from dspark_lab.config import FIELDS, choices_of
from dspark_lab.results import Runs
from dspark_lab.results.facts import strategy_table as T
from dspark_lab.results.viewmodels.backend import RecordedBackend
from dspark_lab.run import live, sweep_spec
from dspark_lab.views import panel, report
from dspark_lab.views.figures.style import STRATEGY_COLORS
from helpers import synthetic_runs
from scripts import lint_docs

NAME = "staged_sixth"
ROW = T.StrategyRow(NAME, "a made-up sixth strategy: a staged pageable copy", "a test", colour="#654321")


def staged_sixth(num_tokens, device, parallel, *, buffer=None):
    """A made-up sixth strategy: the pageable non-blocking copy, as non_blocking makes it."""
    return strategies.non_blocking(num_tokens, device, parallel)


def shown_lists() -> dict[str, list]:
    """Every list of strategies the kit shows, read afresh."""
    rows, tl, headers = synthetic_runs(eps=(1,), batches=(1,), gammas=(2,), trials=3)
    recorded = RecordedBackend(Runs(rows, tl, headers))
    drawn = panel.Panel(recorded)
    sweep_args = build_parser().parse_args(["sweep"])
    return {
        "table": list(T.names()),
        "registry": list(strategies.names()),
        "described": list(strategies.describe()),
        "figure colours": list(STRATEGY_COLORS),
        "figure order": T.strategy_order(reversed(strategies.names())),
        "config choices": list(choices_of(FIELDS["strategy"])),
        "--strategy all": list(parse_strategies("all")),
        "ep --strategies": list(build_parser().parse_args(["ep", "--strategies", ",".join(T.names())]).strategies),
        "sweep spec default": list(sweep_spec.SweepSpec().strategies),
        "preset default": list(sweep_spec.PRESETS["default"].strategies),
        "preset quick": list(sweep_spec.PRESETS["quick"].strategies),
        "sweep command": list(__import__("dspark_lab.cli.options", fromlist=["x"]).spec_from_args(
            sweep_args, build_parser())[0].strategies),
        "live panel": live.LiveBackend(measure=lambda *a, **k: None, warm=False, fingerprint={}).options()["strategy"],
        "recorded panel options": recorded.options()["strategy"],
        "recorded panel dropdown": [o[1] if isinstance(o, tuple) else o for o in drawn.controls["strategy"].options],
        "stand-in panel": panel._ErrorBackend(RuntimeError("none")).options()["strategy"],
        "report strategy table": [s for s in T.names() + (NAME,) if f"<td>{s}</td>" in "".join(
            report._tables(recorded.runs, recorded.runs))],
        "lint_docs strategy table": [r[0] for r in lint_docs.strategy_rows()],
    }


def test_every_list_holds_the_built_ins_alone_without_it():
    for what, names in shown_lists().items():
        assert NAME not in names, what
        assert set(strategies.BUILTIN) <= set(names), what


def test_a_sixth_strategy_is_in_every_list_the_kit_shows():
    with strategies.registered(staged_sixth, ROW):
        lists = shown_lists()
        missing = [what for what, names in lists.items() if NAME not in names]
        assert missing == []
        assert lists["table"] == lists["registry"] == [*strategies.BUILTIN, NAME]
        assert lists["sweep spec default"] == lists["preset default"] == lists["table"]
    assert NAME not in T.names() and sweep_spec.PRESETS["default"] is sweep_spec.DEFAULT_SWEEP


def test_its_lint_docs_row_says_it_has_no_recorded_trace():
    with strategies.registered(staged_sixth, ROW):
        row = next(r for r in lint_docs.strategy_rows() if r[0] == NAME)
    assert row[2] == "no recorded trace" and "no recorded H200 trace" in row[4]


@pytest.mark.parametrize("name", T.names())
def test_every_built_in_has_its_recorded_trace_found_by_name(name):
    path = lint_docs.recorded_trace(name)
    assert path is not None and f"_{name}" in path.name and path.exists()
