"""The charge less the profiler's stretch of the step.

A wait's charge is the GPU idle it caused in a profiled step, and the profiler's own host time
lengthens the host's work after the wait, so the gap the GPU waits in is longer profiled than not.
Where the step was also timed without the profiler, its profiled time over that median is the
profiler's stretch of the step; taking it off the step's charges (shared among its waits by each
one's charge over the GPU idle the step's syncs caused) is the charge as the step would have paid it
unprofiled. A model: it takes the stretch to lie in the charged gaps (a step that is GPU-bound
elsewhere hides part of it there).
"""
from __future__ import annotations

import math
from typing import Optional

PROFILER_STRETCH_RULE = ("the charge less the profiler's stretch of the step: the profiled step's mean time over its "
                         "profiler-free median, shared among the step's waits by each one's charge over the GPU idle "
                         "the step's syncs caused, taken off each "
                         "(never below 0); a model that puts the profiler's extra host time in the charged gaps")


def _num(v) -> Optional[float]:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def stretch_ms(profiled_step_ms, step_ms) -> Optional[float]:
    """The profiler's stretch of a step (ms): its profiled time over its profiler-free median, never
    below 0; None where either is missing."""
    p, f = _num(profiled_step_ms), _num(step_ms)
    return None if p is None or f is None else max(0.0, p - f)


def less_stretch(charge_ms, step_charge_ms, stretch) -> Optional[float]:
    """One wait's charge less its share of the step's stretch (its charge over the step's total
    charge); None where the charge or the stretch is missing."""
    c, total, s = _num(charge_ms), _num(step_charge_ms), _num(stretch)
    if c is None or s is None:
        return None
    share = c / total if total and total > 0 else 1.0
    return max(0.0, c - s * min(share, 1.0))
