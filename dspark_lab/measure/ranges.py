"""Names of the profiler ranges a measured step is marked with, and `phase()` to mark your own.

Kept here (not in workload.py) so that measure/ needs nothing from the workload: imports flow
workload -> measure -> results, never back. torch is imported only when a phase is entered.
"""
from __future__ import annotations

from contextlib import contextmanager

PHASE_PREFIX = "dspark:"
STEP_RANGE = PHASE_PREFIX + "step"
READBACK_RANGE = PHASE_PREFIX + "readback"


@contextmanager
def phase(name: str):
    """Mark a phase of a step for the trace (use it in your own step functions too)."""
    import torch

    with torch.profiler.record_function(PHASE_PREFIX + name):
        yield
