"""False alarms in quiet runs: the emulated host cost must not turn a CPU running slower
than its calibration into seconds of extra "host work". A fake clock and a fake `sum`: nothing is timed."""
from __future__ import annotations

import pytest

from dspark_lab.model import workload


class SlowCPU:
    """A clock, and a `sum(range(n))` that advances it at `slowdown` times the calibrated cost."""

    def __init__(self, rate_per_us: float, slowdown: float):
        self.now, self.rate, self.slowdown, self.pieces = 0.0, rate_per_us, slowdown, []

    def clock(self) -> float:
        return self.now

    def sum(self, r) -> int:
        self.pieces.append(len(r))
        self.now += len(r) / self.rate * self.slowdown * 1e-6
        return 0


@pytest.mark.parametrize("slowdown", [1.0, 2.0, 5.0])
def test_a_spin_overshoots_its_deadline_by_at_most_one_piece_however_slow_the_cpu(monkeypatch, slowdown):
    cpu = SlowCPU(rate_per_us=100.0, slowdown=slowdown)
    monkeypatch.setattr(workload, "_iters_per_us", lambda: cpu.rate)
    monkeypatch.setattr(workload, "sum", cpu.sum, raising=False)  # the module's `sum` before the builtin
    spin_ms = 3.8  # the sglang_profile step's spins together
    workload.spin_until(spin_ms * 1e-3, clock=cpu.clock)
    overshoot_us = (cpu.now - spin_ms * 1e-3) * 1e6
    assert -2.0 - 1e-6 <= overshoot_us <= workload.SPIN_PIECE_US * slowdown  # it stops within 2 µs of the deadline
    assert max(cpu.pieces) <= workload.SPIN_PIECE_US * cpu.rate
    # One call sized for the whole spin would have overshot by (slowdown - 1) x 3.8 ms.
