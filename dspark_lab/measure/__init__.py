"""Measurement of any step: sync accounting with source lines, step-time breakdown, timing.

`measure_step(fn)` takes any callable that runs one step (your own hot path, e.g. a function with
an `.item()` in it) and returns the same accounting the lab's draft step gets. Mark phases inside
your step with `dspark_lab.measure.ranges.phase("host_prep")` etc. to split host time further.

Nothing is imported eagerly: `import dspark_lab.measure` (or `.ranges`) does not load torch;
`measure_step`, `StepReport`, `as_step` and the submodules load on first use.
"""
from __future__ import annotations

import importlib

_SUBMODULES = ("breakdown", "card", "hazards", "intervals", "loop", "probe", "ranges", "step", "syncs", "timing", "trace")
_FROM_STEP = ("StepReport", "as_step", "measure_step")

__all__ = list(_SUBMODULES + _FROM_STEP)


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _FROM_STEP:
        return getattr(importlib.import_module(f"{__name__}.step"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
