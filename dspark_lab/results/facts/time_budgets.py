"""The times the kit's runs are sized to, stated once with the recorded files that check them.

A budget is a target (a design choice, not a measurement) for a run whose work grows with the
strategy table: every trial and every profiled step is one strategy's. So it is checked against a
recorded run by scaling that run's time from the strategies it measured to the table's count now
(a linear model, stated as one), and a table that has grown past the budget is named
(tests/test_time_budgets.py reads the newest recordings). stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class TimeBudget:
    what: str
    target_s: float  # the time the run is sized to stay within ("about": up to `slack` over it)
    slack: float  # the share over the target that "about" allows
    evidence: str  # the recorded files a check reads (paths under the repository)

    def expected_s(self, measured_s: float, measured_strategies: int, strategies: int) -> float:
        """A model's number: the recorded time scaled from `measured_strategies` to `strategies`."""
        if measured_strategies < 1 or strategies < 1:
            raise ValueError(f"{self.what}: strategy counts must be >= 1; got {measured_strategies}, {strategies}")
        return measured_s * strategies / measured_strategies

    def problem(self, measured_s: float, measured_strategies: int, strategies: int) -> Optional[str]:
        """None while the scaled time stays within the budget; else one sentence saying what to size again."""
        expected = self.expected_s(measured_s, measured_strategies, strategies)
        if expected <= self.target_s * (1 + self.slack):
            return None
        return (f"{self.what}: {measured_s:.1f} s recorded with {measured_strategies} strategies scales to "
                f"{expected:.1f} s for the table's {strategies} (a linear model), past its budget of about "
                f"{self.target_s:g} s: size it again and record it ({self.evidence})")


# run.sweep_spec.DEFAULT_SWEEP: every point of its grid x every strategy of the table.
DEFAULT_SWEEP = TimeBudget("the default sweep", 180.0, 0.10, "data/runs/*default-sweep*.jsonl")
# run.live's sizes (LIVE_STEPS, LIVE_WARMUP, LIVE_TRIALS, LIVE_PROFILE_STEPS): a complete update, warm.
LIVE_UPDATE = TimeBudget("a complete live update", 2.0, 0.10, "data/machines/h200-live-stream-*.json")
BUDGETS = (DEFAULT_SWEEP, LIVE_UPDATE)
