"""The typed row: one per config point x strategy x trial, and the ONE function that builds it.

Every producer (run.point.measure_point, run.point.failed_rows, a sweep's failed point) calls
`build_row`; the run writer takes each row as a results.record.row_record.RowRecord, checked
against the same types; the loader checks recorded rows with `row_problems`.
Columns are listed in dspark_lab/results/record/schema.py; rows may carry extra columns, which are kept as they are.
"""
from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Optional

from dspark_lab.printable import one_line
from dspark_lab.results.record import schema

STATUSES = ("ok", "failed")
INT_COLUMNS = ("ep_size", "batch_size", "gamma", "query_token_num", "bucket_batch_size", "num_tokens",
               "trial", "steps", "ctx_switches_invol", "ctx_switches_vol", "throttle_reasons",
               "order_seed", "trial_position")
BOOL_COLUMNS = ("graph", "predicate", "sync_count_mismatch", "disturbed")
STR_COLUMNS = ("point_id", "strategy", "model", "workload", "device", "status", "error", "sync_site", "sync_note",
               "wait_charges", "wait_note", "disturbed_reason", "stop_reason")
FLOAT_COLUMNS = tuple(c for c in schema.ROW_COLUMNS if c not in INT_COLUMNS + BOOL_COLUMNS + STR_COLUMNS)
REQUIRED = ("point_id", "strategy", "status")  # a row without these cannot be placed
# An ok row must say which point it measured (the grid's axes); null measurements load as NaN
# (summaries skip them).
REQUIRED_OK = ("ep_size", "batch_size", "gamma")
# The rank columns (schema.RANK_COLUMNS) are extras, but views group and label by them: typed too,
# so a list or an object there skips its row instead of breaking a groupby or a label.
RANK_TYPES = {"rank": "int", "world_size": "int", "node_rank": "int", "local_rank": "int", "node": "str", "ep_mode": "str", "dispatch": "str", "rank_case": "str",
              "rank_strategies": "str", "sync_sites": "str", "host_delay_ms": "float", "host_jitter_ms": "float",
              "gpu_collective_ms": "float", "step_ms_max_rank": "float", "blocked_from_others_ms": "float",
              "collective_from_others_ms": "float"}
# What a recorded value can be at all, checked at load (a step cannot take -5 ms, a batch hold 0
# requests): "positive" > 0, "nonnegative" >= 0. Columns that may be negative by their meaning (a
# residual such as host_other_ms, a rise over another case such as blocked_from_others_ms) are not listed.
POSITIVE = ("step_ms", "batch_size", "ep_size", "gamma", "steps", "world_size", "step_ms_max_rank",
            "query_token_num", "bucket_batch_size", "num_tokens")
NONNEGATIVE = ("trial", "rank", "node_rank", "local_rank", "step_ms_p50", "step_ms_p90", "profiled_step_ms",
               *(c for c in schema.TRACE_COLUMNS if c.endswith("_per_step")),
               "host_prep_ms", "host_blocked_ms", "host_readback_ms", "host_copy_ms", "host_launch_ms",
               "gpu_busy_ms", "gpu_idle_ms",
               "gpu_idle_after_sync_ms", "gpu_idle_sync_caused_ms", "gpu_ms", "host_work_ms", "host_wait_ms",
               "offcpu_ms", "ctx_switches_invol", "ctx_switches_vol", "cpu_steal_ms", "sm_clock_mhz",
               "throttle_reasons", "ci_half_width_pct", "target_verify_ms", "host_delay_ms", "host_jitter_ms",
               "gpu_collective_ms")
# Upper bounds, which stop a value no run can record (1e308 trials, a step of 10**300 ms) from
# loading as a number: sizes, counts and indices at most 2**31 - 1 (torch sizes a tensor in int64, but
# no batch, EP size, step count or trial index the kit runs comes near), every time in ms at most a
# day in magnitude (the residuals too: a -1e308 ms residual is no measurement), a percentage at most
# 1000 (a CI half-width), a clock at most 100 GHz. A column named nowhere here has no bound but finiteness.
COUNT_MAX = 2**31 - 1
MS_MAX = 86_400_000.0  # one day in ms
COUNT_COLUMNS = tuple(c for c in INT_COLUMNS if c not in ("throttle_reasons", "order_seed")) + (
    "rank", "world_size", "node_rank", "local_rank", *(c for c in schema.TRACE_COLUMNS if c.endswith("_per_step")))
MS_COLUMNS = tuple(c for c in (*FLOAT_COLUMNS, *RANK_TYPES) if "_ms" in c and c not in COUNT_COLUMNS)
INT64 = 2**63  # integers are stored as int64: a larger one cannot be a count or an index


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool) or type(v).__name__ == "bool_"  # numpy's too, without importing numpy


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not _is_bool(v)


def value_problem(column: str, value: Any) -> Optional[str]:
    """Why `value` is not a valid `column` value, or None. None (null) is always allowed: missing."""
    if value is None:
        return None
    kind = RANK_TYPES.get(column)
    if column in INT_COLUMNS or kind == "int":
        if isinstance(value, int) and not _is_bool(value):
            if not -INT64 <= value < INT64:
                return f"{column} must be an integer within int64, got one of {len(str(abs(value)))} digits"
        elif not _is_number(value) or not _finite(value) or float(value) != int(value):
            return f"{column} must be an integer, got {_short(value)}"
    elif column in FLOAT_COLUMNS or kind == "float":
        if not _is_number(value):
            return f"{column} must be a number, got {type(value).__name__} {_short(value)}"
        if not _finite(value):
            return f"{column} must be finite, got {_short(value)}"
    elif column in BOOL_COLUMNS:
        if not _is_bool(value):
            return f"{column} must be true or false, got {value!r:.60}"
    elif column in STR_COLUMNS or kind == "str":
        if not isinstance(value, str):
            return f"{column} must be a string, got {type(value).__name__}"
    if column == "status" and value not in STATUSES:
        return f"status must be one of {', '.join(STATUSES)}, got {value!r:.60}"
    return None


def _finite(value: Any) -> bool:
    """math.isfinite, with an integer too large for a float (more than 308 digits) not finite."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _short(value: Any) -> str:
    """A value as an error message shows it: its repr cut to 60 characters (a field may be huge)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**60 else f"<{len(str(abs(value)))} digits>"
    return text if len(text) <= 60 else text[:57] + "..."


# The plainly valid values of JSON-decoded rows, by exact type: checked first (loading 500 runs
# checks 10 million values); anything else gets value_problem's full check.
_PLAIN = {**{c: (int,) for c in INT_COLUMNS}, **{c: (float, int) for c in FLOAT_COLUMNS},
          **{c: (bool,) for c in BOOL_COLUMNS}, **{c: (str,) for c in STR_COLUMNS if c != "status"},
          **{c: {"int": (int,), "float": (float, int), "str": (str,)}[k] for c, k in RANK_TYPES.items()}}


def _plainly_valid(column: str, value: Any) -> bool:
    t = type(value)
    if t is int:
        return int in _PLAIN.get(column, ()) and -INT64 <= value < INT64
    return t in _PLAIN.get(column, ()) and (t is not float or math.isfinite(value))


def _ranges() -> dict:
    """column -> (low, low allowed?, high): the one table of what a recorded number may be."""
    out: dict = {c: (-MS_MAX, True, MS_MAX) for c in MS_COLUMNS}
    out.update({c: (-COUNT_MAX, True, COUNT_MAX) for c in COUNT_COLUMNS})
    out.update(ci_half_width_pct=(0.0, True, 1000.0), sm_clock_mhz=(0.0, True, 100_000.0))
    for c in (*NONNEGATIVE, *POSITIVE):
        high = out.get(c, (None, None, None))[2]
        out[c] = (0, c not in POSITIVE, high)
    return out


RANGES = _ranges()


def allowed_range(column: str) -> Optional[str]:
    """`column`'s allowed values in words ("> 0 and at most 2147483647"), None where any finite value goes."""
    bounds = RANGES.get(column)
    if bounds is None:
        return None
    low, inclusive, high = bounds
    lower = f"{'>=' if inclusive else '>'} {_bound(low)}"
    return lower if high is None else f"{lower} and <= {_bound(high)}"


def _bound(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


def range_problem(column: str, value: Any) -> Optional[str]:
    """Why a number (JSON-decoded: int or float) is out of `column`'s range (RANGES), or None."""
    bounds = RANGES.get(column)
    if bounds is None or type(value) not in (int, float) or value != value:  # NaN: said by value_problem
        return None
    low, inclusive, high = bounds
    if (value > low or (inclusive and value == low)) and (high is None or value <= high):
        return None
    return f"{column} must be {allowed_range(column)}, got {_short(value)}"


# The names a row is grouped, labelled and printed by: text without control characters, newlines,
# bidi overrides or zero-width marks (a strategy "s\ndspark-lab: ..." would print a forged line).
NAME_COLUMNS = ("point_id", "strategy", "model", "workload", "device", "status", "sync_site", "stop_reason",
                "ep_mode", "dispatch", "rank_case", "rank_strategies", "node")


@functools.lru_cache(maxsize=4096)  # names repeat across rows: each distinct one is looked at once
def _name_problem(column: str, value: str) -> Optional[str]:
    shown = one_line(value)
    if shown == value:
        return None
    return f"{column} must be printable text (no control character, newline or bidi mark), got {shown[:60]}"


def row_problems(rec: dict) -> list[str]:
    """Everything wrong with a recorded row, its types and its ranges (empty: it is valid)."""
    out = [f"{c} is missing" for c in REQUIRED if rec.get(c) in (None, "")]
    if rec.get("status") == "ok":
        out += [f"{c} is missing from an ok row" for c in REQUIRED_OK if rec.get(c) is None]
    for c in (*schema.ROW_COLUMNS, *RANK_TYPES):
        v = rec.get(c)
        if v is None:
            continue
        p = None if _plainly_valid(c, v) else value_problem(c, v)
        p = p or range_problem(c, v)
        if p is None and c in NAME_COLUMNS and type(v) is str:
            p = _name_problem(c, v)
        if p:
            out.append(p)
    return out


def build_row(*, status: str = "ok", error: str = "", **columns: Any) -> dict:
    """A complete row: every schema.ROW_COLUMNS key (None where not given) plus any extra columns.

    Values are checked by type (NaN is allowed for numbers: the writer stores it as null);
    a bad value raises ValueError naming the column."""
    row: dict = {c: None for c in schema.ROW_COLUMNS}
    row.update(columns)
    row["status"], row["error"] = status, error if error is not None else ""
    for c in schema.ROW_COLUMNS:
        v = row.get(c)
        if c in FLOAT_COLUMNS and _is_number(v) and not math.isfinite(v):
            continue
        p = value_problem(c, v)
        if p:
            raise ValueError(p)
    if not row.get("point_id") or not row.get("strategy"):
        raise ValueError("a row needs point_id and strategy")
    return row


def failed_rows(config: dict, strategies, error: BaseException | str) -> list[dict]:
    """One failed row per strategy for a point whose measurement raised: `config` holds the
    config columns (point_id included); the error is kept as "Type: message"."""
    msg = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return [build_row(**{**config, "strategy": s}, status="failed", error=msg) for s in strategies]
