"""What the kit knows about each strategy, without torch: one row per strategy, in display order.

The strategy functions (strategies.py) need torch; everything else (the CLI's choices, the figures'
colours, the card's cells, the SGLang conformance check, the panel's first pick) reads this table.
strategies.py binds each function to its row at import and fails, naming the strategy, when either
side is missing; `strategies.register(fn, row)` adds one later (the row lands here, at the end).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

OTHER_COLOUR = "#7f7f7f"  # what figures draw a strategy in that has no colour of its own


class StrategyTableError(ValueError):
    """A strategy row that does not fit the table; the message names the strategy and the field."""


@dataclass(frozen=True)
class StrategyRow:
    name: str
    description: str  # one line, for widgets and the CLI
    source: str  # the PR or release it comes from
    colour: str = OTHER_COLOUR  # its line and bars in every figure ("#rrggbb")
    # The platform card's cell that makes the same copy, (direction, source) of results.analyses.card
    # (4 bytes); None when no cell does (then the card and the advice say nothing about it).
    card_cell: Optional[tuple[str, str]] = None
    mirrors_sglang: bool = False  # re-implements SGLang's helper: None exactly where SGLang returns None
    needs_persistent_buffer: bool = False  # writes a caller-owned device scalar (`buffer=`)
    baseline: bool = False  # the form every fix is compared against (exactly one row)
    shown_first: bool = False  # the fix a view inspects first, against the baseline (at most one row)
    stream_waits: int = 0  # cross-stream waits (wait_stream / wait_event) it adds per call: advice charges them
    # The sync-free reference (exactly one row): the baseline's copy without its stream sync, the
    # other half of the headline pair (baseline / reference per round: what the sync costs), and
    # the step the sync-penalty rule and the step model take the sync-free parts from.
    sync_free_reference: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise StrategyTableError(f"strategy name must be a Python identifier; got {self.name!r}")
        for field in ("description", "source"):
            if not isinstance(getattr(self, field), str) or not getattr(self, field):
                raise StrategyTableError(f"strategy {self.name!r}: {field} must be a non-empty string")
        c = self.colour
        if not (isinstance(c, str) and len(c) == 7 and c[0] == "#" and all(ch in "0123456789abcdefABCDEF" for ch in c[1:])):
            raise StrategyTableError(f"strategy {self.name!r}: colour must be '#rrggbb'; got {c!r}")
        cell = self.card_cell
        if cell is not None and not (isinstance(cell, tuple) and len(cell) == 2 and all(isinstance(x, str) for x in cell)):
            raise StrategyTableError(f"strategy {self.name!r}: card_cell must be None or (direction, source); got {cell!r}")
        if isinstance(self.stream_waits, bool) or not isinstance(self.stream_waits, int) or self.stream_waits < 0:
            raise StrategyTableError(f"strategy {self.name!r}: stream_waits must be an integer >= 0; got {self.stream_waits!r}")


# The sources of the forms: SGLang #34782 (device_direct, non_blocking), SGLang #34759 (on_demand:
# on demand; its copy is #34782's), sglang 0.5.23 (on_demand_pinned, persistent_fill).
BUILTIN_ROWS = (
    StrategyRow("device_direct", "torch.tensor(n, device=cuda): a blocking copy (copy + stream sync)", "before PR #34782",
                colour="#d62728", card_cell=("h2d", "tensor_device"), baseline=True),
    StrategyRow("non_blocking", "pageable host tensor .to(cuda, non_blocking=True)", "PR #34782",
                colour="#ff7f0e", card_cell=("h2d", "pageable_to_nb"), sync_free_reference=True),
    StrategyRow("on_demand", "None unless the predicate holds, else the pageable non-blocking copy",
                "PR #34759, its copy from PR #34782",
                colour="#2ca02c", card_cell=("h2d", "pageable_to_nb"), mirrors_sglang=True),
    StrategyRow("on_demand_pinned", "on demand, pinned host tensor, non-blocking copy", "sglang 0.5.23",
                colour="#17becf", card_cell=("h2d", "pinned_to_nb"), mirrors_sglang=True),
    StrategyRow("persistent_fill", "persistent device scalar updated with fill_ (before a graph's replay, never captured)",
                "sglang 0.5.23 graph buffers",
                colour="#1f77b4", card_cell=("d2d", "fill"), needs_persistent_buffer=True, shown_first=True),
)


def _the_one(rows: Iterable[StrategyRow], flag: str, *, required: bool) -> Optional[str]:
    flagged = [r.name for r in rows if getattr(r, flag)]
    if len(flagged) > 1 or (required and not flagged):
        raise StrategyTableError(f"{flag}: exactly {'one' if required else 'at most one'} strategy row may set it; "
                                 f"got {flagged or 'none'}")
    return flagged[0] if flagged else None


# The roles, each read from its row's flag (no other module names a strategy for its role).
ROLE_FLAGS = ("baseline", "shown_first", "sync_free_reference")
BASELINE = _the_one(BUILTIN_ROWS, "baseline", required=True)
SHOWN_FIRST = _the_one(BUILTIN_ROWS, "shown_first", required=False)
SYNC_FREE = _the_one(BUILTIN_ROWS, "sync_free_reference", required=True)
# The headline pair: the baseline against the sync-free reference, per interleaved round.
HEADLINE_PAIR: tuple[str, str] = (BASELINE, SYNC_FREE)
if BASELINE == SYNC_FREE:
    raise StrategyTableError(f"strategy {BASELINE!r}: the baseline cannot also be the sync-free reference")
# name -> (one line, source) of the built-ins, for the report's and panel's fixed lists.
BUILTIN_INFO: dict[str, tuple[str, str]] = {r.name: (r.description, r.source) for r in BUILTIN_ROWS}

# The live table: the built-ins, then the strategies registered since (strategies.register).
_ROWS: dict[str, StrategyRow] = {r.name: r for r in BUILTIN_ROWS}


def rows() -> tuple[StrategyRow, ...]:
    return tuple(_ROWS.values())


def names() -> tuple[str, ...]:
    return tuple(_ROWS)


def describe() -> dict[str, str]:
    """name -> "one line (its source)", for the command line's help."""
    return {r.name: f"{r.description} ({r.source})" for r in _ROWS.values()}


def row(name: str) -> StrategyRow:
    try:
        return _ROWS[name]
    except KeyError:
        raise ValueError(f"strategy must be one of {', '.join(_ROWS)}; got {name!r}") from None


def add(new: StrategyRow) -> Optional[StrategyRow]:
    """Put `new` in the table (at the end, or in place of a registered row of its name); the row it
    replaced, if any. Called by strategies.register, which binds the row's function."""
    if not isinstance(new, StrategyRow):
        raise StrategyTableError(f"a strategy row must be a StrategyRow; got {type(new).__name__}")
    if new.name in BUILTIN_INFO:
        raise StrategyTableError(f"strategy {new.name!r} is built in; a registered strategy needs a name of its own")
    if any(getattr(new, flag) for flag in ROLE_FLAGS):
        raise StrategyTableError(f"strategy {new.name!r}: the roles ({', '.join(ROLE_FLAGS)}) belong to built-in rows")
    old = _ROWS.get(new.name)
    _ROWS[new.name] = new
    return old


def reset(kept: Iterable[StrategyRow]) -> None:
    """The table as `kept` (a snapshot from rows(), built-ins first): undoes registrations since."""
    kept = tuple(kept)
    if tuple(r.name for r in kept[:len(BUILTIN_ROWS)]) != tuple(BUILTIN_INFO):
        raise StrategyTableError("reset: the built-in rows must come first, all of them, in their order")
    _ROWS.clear()
    _ROWS.update((r.name, r) for r in kept)


class Column(Mapping):
    """name -> one field of each row that has it, read from the live table at every access (so a
    strategy registered later is in it); compares equal to a dict of the same items."""

    def __init__(self, value: Callable[[StrategyRow], Any]):
        self._value = value

    def _items(self) -> dict:
        return {r.name: v for r in _ROWS.values() if (v := self._value(r)) is not None}

    def __getitem__(self, name: str) -> Any:
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return f"Column({self._items()!r})"


def strategy_order(present: Iterable[str]) -> list[str]:
    """The present strategies, the table's in its display order first, others sorted after."""
    present = [p for p in dict.fromkeys(present) if isinstance(p, str)]
    return [s for s in _ROWS if s in present] + sorted(s for s in present if s not in _ROWS)


def default_strategy(present: Iterable[str]) -> str:
    """The strategy a view inspects first: the shown-first fix when present, else the last in order."""
    order = strategy_order(present)
    return SHOWN_FIRST if SHOWN_FIRST in order else order[-1]
