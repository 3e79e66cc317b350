"""Derived tables of one trace frame, computed once while the frame lives.

The counts, the cost rule, the idle causes and the wait table of one trace each ask for the same
derived tables (the step ranges, the step thread's events, the launches, the waits): without a
memo one record of a 3-step trace found the step ranges 42 times. A trace frame is read, never
changed in place (trace.events builds a new one), so what is derived from it stays true while it
lives; each caller gets its own copy, since callers add columns.
"""
from __future__ import annotations

import functools
import weakref
from typing import Callable, TypeVar

import pandas as pd

T = TypeVar("T")
ENABLED = True  # False: every call computes afresh (the memo's equivalence test compares the two)


def _own_copy(value):
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return value.copy()
    if isinstance(value, list):
        return list(value)
    return value


def per_frame(fn: Callable[[pd.DataFrame], T]) -> Callable[[pd.DataFrame], T]:
    """`fn(ev)` computed once per live frame `ev` (keyed by identity; the entry goes with the frame)."""
    memo: dict = {}  # id(ev) -> (weak reference to ev, fn(ev))

    @functools.wraps(fn)
    def memoised(ev: pd.DataFrame) -> T:
        if not ENABLED:
            return fn(ev)
        key = id(ev)
        hit = memo.get(key)
        if hit is None or hit[0]() is not ev:
            hit = (weakref.ref(ev, lambda _, k=key: memo.pop(k, None)), fn(ev))
            memo[key] = hit
        return _own_copy(hit[1])

    memoised.memo = memo  # tests look in it
    return memoised
