"""Interval arithmetic on (start, end) pairs: the step breakdown must never count time twice."""
from __future__ import annotations

from typing import Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[list[float]] = []
    for s, e in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """Parts of union(a) not covered by union(b)."""
    out: list[Interval] = []
    a = union(a)
    if not a:
        return out
    # Only the parts of b that reach a's span matter: a step's gaps are cut from the whole trace's
    # GPU ops (thousands), and uniting all of them for every step was most of the breakdown's time.
    lo, hi = a[0][0], a[-1][1]
    b = union((bs, be) for bs, be in b if be > lo and bs < hi)
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
            if cur >= e:
                break
        if cur < e:
            out.append((cur, e))
    return out


def complement(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    return subtract([(lo, hi)], intervals)


def length(intervals: Iterable[Interval]) -> float:
    return sum(e - s for s, e in intervals)
