"""The kit's step windows (measure/syncs.step_windows): a step wrapped in the kit's range and then
run under it again holds two nested ranges, which are one step, not two."""
import pytest

from dspark_lab.measure import breakdown, syncs
from helpers import STEP_RANGE
from test_wait_kinds import known_cost_trace


def _nested(t, inner_threads=(1,)):
    for e in [e for e in t.events if e["name"] == STEP_RANGE]:
        for tid in inner_threads:
            t.events.append({**e, "ts": e["ts"] + 0.5, "dur": e["dur"] - 1.0, "tid": tid})
    return t


def test_a_step_in_two_nested_ranges_is_one_step_charged_once():
    plain, nested = known_cost_trace("item").ev(), _nested(known_cost_trace("item")).ev()
    assert len(syncs.step_windows(nested)) == len(syncs.step_windows(plain)) == 4
    assert syncs.counts_per_step(nested)["syncs_per_step"] == syncs.counts_per_step(plain)["syncs_per_step"] == 1
    charge = lambda ev: breakdown.summary(ev, calls=syncs.sync_calls(ev))["gpu_idle_sync_caused_ms"]  # noqa: E731
    assert charge(nested) == pytest.approx(charge(plain), abs=1e-9)


def test_steps_one_after_another_stay_apart_and_another_threads_range_is_its_own():
    t = known_cost_trace("item")
    steps = [e for e in t.events if e["name"] == STEP_RANGE]
    # The same span on another thread is not nested in this thread's range.
    t.events.append({**steps[0], "tid": 9})
    assert len(syncs.step_windows(t.ev())) == 5
