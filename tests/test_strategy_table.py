"""The strategy table: one row per strategy, bound to its function at import; a strategy added by its
function and its row alone shows up in the card, the advice, the figures and the CLI."""
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from dspark_lab import strategies
from dspark_lab.cli.lists import parse_strategies
from dspark_lab.cli.main import build_parser
from dspark_lab.config import FIELDS, LabConfig, choices_of
from dspark_lab.results.analyses import advice
from dspark_lab.results.analyses import card as C
from dspark_lab.results.facts import strategy_table as T
from dspark_lab.results.viewmodels import frames
from dspark_lab.views import figures
from dspark_lab.views.figures.style import STRATEGY_COLORS
from helpers import synthetic_card, synthetic_hazards
from test_advice import _rows
from test_card import ALL_TIMES


def staged_copy(num_tokens, device, parallel, *, buffer=None):
    """A made-up strategy: a pageable non-blocking copy, as non_blocking makes it."""
    return strategies.non_blocking(num_tokens, device, parallel)


STAGED = T.StrategyRow("staged_copy", "a made-up pageable copy", "a test", colour="#123456",
                       card_cell=("h2d", "pageable_to_nb"))


@pytest.fixture
def staged():
    with strategies.registered(staged_copy, STAGED) as s:
        yield s
    assert "staged_copy" not in strategies.names() and "staged_copy" not in T.names()


def test_a_registered_strategy_is_on_the_card_and_in_the_advice(staged):
    assert C.STRATEGY_CELLS["staged_copy"] == ("h2d", "pageable_to_nb")
    waits = synthetic_card(gpu="SYNTH-PCIE", waits_from=4)  # pageable copies wait for the queue
    assert C.strategy_verdicts(waits)["staged_copy"] == C.WAITS
    assert C.strategy_verdicts(synthetic_card())["staged_copy"] == C.AT_ONCE
    assert advice.card_waits([waits])["staged_copy"] == [C.label(waits)]
    # fastest here, but its copy waits on the other card: the advice ranks it below a portable one
    rows = _rows({**ALL_TIMES, "staged_copy": 4.0})
    here = synthetic_card(gpu="NVIDIA H200", driver="1", waits_from=4 << 20)
    safe = synthetic_hazards()  # counted after the registration: staged_copy has its count
    assert advice.recommend(rows, cards=[here], hazards=safe).strategy == "staged_copy"
    rec = advice.recommend(rows, cards=[here, waits], hazards=safe)
    assert rec.strategy != "staged_copy" and "staged_copy's copy waits on SYNTH-PCIE" in rec.text()


def test_a_registered_strategy_has_its_colour_in_the_figures(staged):
    assert STRATEGY_COLORS["staged_copy"] == "#123456" and "staged_copy" in STRATEGY_COLORS
    rows = _rows({"device_direct": 8.0, "staged_copy": 5.0}).assign(batch_size=1)
    rows = pd.concat([rows, rows.assign(batch_size=8, point_id="r1-b8")])
    fig = figures.sweep(rows)
    drawn = {t.name: t.line.color for t in fig.data if t.name in ("device_direct", "staged_copy")}
    assert drawn == {"device_direct": STRATEGY_COLORS["device_direct"], "staged_copy": "#123456"}


def test_a_registered_strategy_is_among_the_cli_choices(staged):
    assert "staged_copy" in choices_of(FIELDS["strategy"]) and LabConfig(strategy="staged_copy").strategy == "staged_copy"
    assert parse_strategies("all")[-1] == "staged_copy"
    args = build_parser().parse_args(["sweep", "--strategy", "device_direct,staged_copy"])
    assert args.strategy == ("device_direct", "staged_copy")
    assert strategies.get("staged_copy").fn is staged_copy and strategies.describe()["staged_copy"].endswith("(a test)")


def test_registering_is_undone_after_the_block():
    before_rows, before = T.rows(), strategies.names()
    with strategies.registered(staged_copy, STAGED):
        assert T.names()[-1] == strategies.names()[-1] == "staged_copy"
    assert T.rows() == before_rows and strategies.names() == before and "staged_copy" not in STRATEGY_COLORS
    with pytest.raises(ValueError, match=r"strategy must be one of .*persistent_fill; got 'staged_copy'"):
        LabConfig(strategy="staged_copy")


def test_a_function_without_a_row_fails_naming_it():
    with pytest.raises(T.StrategyTableError, match=r"strategy 'staged_copy' has a function in strategies.py but no row"):
        strategies.bind([strategies.device_direct, staged_copy], T.BUILTIN_ROWS[:1])


def test_a_row_without_a_function_fails_naming_it():
    with pytest.raises(T.StrategyTableError, match=r"strategy 'staged_copy' has a row in .* but no function"):
        strategies.bind([strategies.device_direct], (T.BUILTIN_ROWS[0], STAGED))


def _import_strategies_changed(monkeypatch, old: str, new: str) -> None:
    """strategies.py's source with `old` replaced by `new`, imported as a module of its own (the real
    one and the table are left as they are)."""
    source = Path(strategies.__file__).read_text()
    assert source.count(old) == 1
    module = types.ModuleType("strategies_changed")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source.replace(old, new), "strategies_changed.py", "exec"), module.__dict__)


def test_the_import_fails_naming_a_function_without_a_row(monkeypatch):
    extra = "\n\ndef pinned_twice(num_tokens, device, parallel, *, buffer=None):\n    return None\n\n\nStrategyFn ="
    with pytest.raises(T.StrategyTableError, match=r"strategy 'pinned_twice' has a function in strategies.py but no row"):
        _import_strategies_changed(monkeypatch, "\n\nStrategyFn =", extra)


def test_the_import_fails_naming_a_row_without_a_function(monkeypatch):
    with pytest.raises(T.StrategyTableError, match=r"strategy 'persistent_fill' has a row in .* but no function"):
        _import_strategies_changed(monkeypatch, "def persistent_fill(num_tokens: int,", "def _gone(count: int,")


def test_the_import_binds_every_strategy_shaped_function_of_the_module():
    """What the import checks: the functions of the strategy signature in strategies.py, no others."""
    found = {f.__name__ for f in strategies.strategy_functions(vars(strategies), strategies.__name__)}
    assert found == set(strategies.BUILTIN) == {r.name for r in T.BUILTIN_ROWS}
    assert strategies.names() == T.names() == strategies.BUILTIN  # the same order: the table's
    namespace = {"staged_copy": staged_copy, "helper": lambda n: n}
    assert strategies.strategy_functions(namespace, __name__) == [staged_copy]


@pytest.mark.parametrize("row, named", [
    (dict(name="device_direct"), "'device_direct' is built in"),
    (dict(colour="red"), "colour must be '#rrggbb'; got 'red'"),
    (dict(card_cell="fill"), "card_cell must be None or"),
    (dict(description=""), "description must be a non-empty string"),
    (dict(name="two words"), "must be a Python identifier"),
    (dict(baseline=True), r"the roles \(baseline, shown_first, sync_free_reference\) belong to built-in rows"),
    (dict(sync_free_reference=True), "belong to built-in rows"),
])
def test_a_row_that_does_not_fit_is_refused_naming_the_field(row, named):
    fields = dict(name="x", description="d", source="s") | row
    with pytest.raises(T.StrategyTableError, match=named):
        strategies.register(staged_copy, T.StrategyRow(**fields))
    assert strategies.names() == strategies.BUILTIN


def test_a_card_cell_the_card_does_not_measure_is_named():
    with strategies.registered(staged_copy, T.StrategyRow("staged_copy", "d", "s", card_cell=("d2h", "fill"))):
        with pytest.raises(ValueError, match=r"strategy 'staged_copy': card_cell \('d2h', 'fill'\) is not a cell"):
            C.check_strategy_cells()
        assert C.strategy_verdicts(synthetic_card())["staged_copy"] is None  # not on the card: said as such


def test_the_facts_each_place_read_come_from_the_rows():
    by = {r.name: r for r in T.BUILTIN_ROWS}
    assert T.BASELINE == "device_direct" and by["device_direct"].baseline
    assert frames.default_strategy(list(T.names())) == "persistent_fill" == T.SHOWN_FIRST
    assert frames.default_strategy(["device_direct", "non_blocking"]) == "non_blocking"
    assert [n for n, r in by.items() if r.needs_persistent_buffer] == ["persistent_fill"]
    assert [n for n, r in by.items() if r.mirrors_sglang] == ["on_demand", "on_demand_pinned"]
    assert dict(STRATEGY_COLORS) == {n: r.colour for n, r in by.items()}
    assert dict(C.STRATEGY_CELLS) == {n: r.card_cell for n, r in by.items()}
    assert T.strategy_order(["zz", "persistent_fill", "device_direct", "aa"]) == ["device_direct", "persistent_fill",
                                                                                "aa", "zz"]


def test_importing_config_loads_no_torch():
    code = "import sys, dspark_lab.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
