"""The process's deliberate-wait counter: host seconds a step spends waiting on purpose.

A step adds to it when it spins to emulate host cost or blocks by design (the lab's readback);
measure/diagnostics.py reads its delta per trial, and what is left of a trial's wall time is the
host's real work, where host-side interference shows. It lives here, below the model, so that
the measurement never imports the step it measures.
"""
from __future__ import annotations

import threading

_LOCK = threading.Lock()
_TOTAL_S = 0.0


def add(seconds: float) -> None:
    """Count `seconds` of deliberate waiting (negative amounts are ignored)."""
    global _TOTAL_S
    if seconds > 0:
        with _LOCK:
            _TOTAL_S += seconds


def total_s() -> float:
    """Deliberate-wait seconds since the process started."""
    return _TOTAL_S
