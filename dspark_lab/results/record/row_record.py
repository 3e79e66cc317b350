"""One row as a typed record, from the trial to the file: built once, checked when it is made, and
read-only after (no field or column can be changed on it).

`RowRecord` holds the row's identity and outcome (point_id, strategy, status, error) as fields,
every other column (schema.ROW_COLUMNS, the rank columns, extras) in `columns`, and, for a frame
shown without a file (the live panel), the machine it was measured on in `machine`
(schema.FINGERPRINT_COLUMNS; in a run file the header holds them, so `file_row()` leaves them out).
The run writer (results/record/store.py) takes these records and writes `file_row()`; a row
handed over as a dict (results.record.rows.build_row's) becomes one through `RowRecord.of`, so a
bad value is refused there, naming its column and what it may be.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from dspark_lab.results.record import schema
from dspark_lab.results.record.rows import FLOAT_COLUMNS, RANK_TYPES, STATUSES, value_problem

IDENTITY = ("point_id", "strategy", "status", "error")
# The file's own keys on a row line (store.RunWriter writes them): never a column of the row.
FILE_KEYS = ("kind", "attempt")
_TYPED = frozenset((*schema.ROW_COLUMNS, *RANK_TYPES))
_FLOATS = frozenset((*FLOAT_COLUMNS, *(c for c, kind in RANK_TYPES.items() if kind == "float")))


def column_problem(column: Any, value: Any) -> str | None:
    """Why `value` cannot be `column`'s in a record, or None: the types of results.record.rows
    (build_row's check). NaN and infinity are allowed where a float goes (the file stores them as
    null, which loads as missing), never for a count."""
    if not isinstance(column, str) or not column:
        return f"a column name must be a non-empty string; got {column!r:.60}"
    if column in FILE_KEYS or column in schema.FINGERPRINT_COLUMNS:
        where = "the run file's own key" if column in FILE_KEYS else "the machine's (RowRecord.machine)"
        return f"{column} is {where}, not a row column; allowed row columns exclude {', '.join(FILE_KEYS + schema.FINGERPRINT_COLUMNS)}"
    if column not in _TYPED or (column in _FLOATS and isinstance(value, float) and not math.isfinite(value)):
        return None
    return value_problem(column, value)


@dataclass(frozen=True)
class RowRecord:
    """One row of one point x strategy x trial; ValueError naming the field when a value is not allowed."""

    point_id: str
    strategy: str
    status: str
    error: str = ""
    columns: Mapping[str, Any] = field(default_factory=dict)
    machine: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("point_id", "strategy"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise ValueError(f"{name} must be a non-empty string; got {v!r:.60}")
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}; got {self.status!r:.60}")
        if not isinstance(self.error, str):
            raise ValueError(f"error must be a string (\"\" when none); got {type(self.error).__name__}")
        for c, v in self.columns.items():
            if c in IDENTITY:
                raise ValueError(f"{c} is a field of the record, not one of its columns")
            problem = column_problem(c, v)
            if problem:
                raise ValueError(problem)
        unknown = sorted(str(k) for k in self.machine if k not in schema.FINGERPRINT_COLUMNS)
        if unknown:
            raise ValueError(f"machine holds {', '.join(unknown)}; allowed: {', '.join(schema.FINGERPRINT_COLUMNS)}")
        object.__setattr__(self, "columns", MappingProxyType(dict(self.columns)))
        object.__setattr__(self, "machine", MappingProxyType(dict(self.machine)))

    @classmethod
    def of(cls, row: Mapping[str, Any], machine: Mapping[str, Any] | None = None) -> "RowRecord":
        """The record of a built row (a dict with its identity among its columns), checked."""
        if not isinstance(row, Mapping):
            raise ValueError(f"a row must be a mapping of column to value; got {type(row).__name__}")
        rest = {k: v for k, v in row.items() if k not in IDENTITY}
        return cls(row.get("point_id"), row.get("strategy"), row.get("status"), row.get("error", ""), rest,
                   dict(machine or {}))

    def file_row(self) -> dict:
        """The row as the run file holds it: every schema.ROW_COLUMNS key in order (None where the
        record has none), then its other columns; no machine columns (the header holds them)."""
        row: dict = {c: None for c in schema.ROW_COLUMNS}
        row.update(self.columns)
        row.update(point_id=self.point_id, strategy=self.strategy, status=self.status, error=self.error)
        return row

    def row(self) -> dict:
        """The row as a frame shows it: file_row() with the machine's columns (a fresh dict each call)."""
        return {**self.file_row(), **self.machine}
