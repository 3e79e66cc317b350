"""Names of the profiler ranges a measured step is marked with, and `phase()` to mark your own.

The model marks its step with these names and measure/ reads them back, so they live at the
lower of the two layers (imports flow model -> measure, never back: pyproject's import-linter
contract). torch is imported only when a phase is entered, so that importing the names loads no
torch (tests/test_safe_io.py checks it).
"""
from __future__ import annotations

from contextlib import contextmanager

PHASE_PREFIX = "dspark:"
STEP_RANGE = PHASE_PREFIX + "step"
READBACK_RANGE = PHASE_PREFIX + "readback"


@contextmanager
def phase(name: str):
    """Mark a phase of a step for the trace (use it in your own step functions too)."""
    import torch  # here, not at the top: see the docstring

    with torch.profiler.record_function(PHASE_PREFIX + name):
        yield
