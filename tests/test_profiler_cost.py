"""The profiler's own host time per recorded event (measure/profiler_cost.py): the calibration's fit
and its event count on synthetic numbers, and the measurement itself on CUDA; and the recorded H200
check that keeps it off the charge."""
import json
from pathlib import Path

import pytest

from dspark_lab.measure import profiler_cost

DATA = Path(__file__).resolve().parents[1] / "data" / "machines"


def test_the_fit_recovers_one_cost_per_event_across_bodies():
    pairs = {"launch": [(10.0, 10.0 + 1.5 * 4, 4.0), (11.0, 11.0 + 1.5 * 4 + 0.2, 4.0)],
             "python": [(12.0, 12.0 + 1.5 * 22, 22.0), (12.5, 12.5 + 1.5 * 22 - 0.2, 22.0)]}
    got = profiler_cost.fit(pairs)
    assert got["us_per_event"] == pytest.approx(1.5, abs=0.02)
    assert got["bodies"]["python"]["events_per_iter"] == 22.0
    assert got["bodies"]["launch"]["us_per_event"] == pytest.approx(1.525, abs=1e-9)


def test_the_fit_refuses_loops_that_recorded_nothing():
    with pytest.raises(ValueError, match="no host events"):
        profiler_cost.fit({"launch": [(10.0, 12.0, 0.0)]})


def test_the_calibration_counts_the_host_events_inside_its_range_on_its_thread():
    r = profiler_cost.CALIBRATION_RANGE
    tr = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": r, "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 3, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "python_function", "name": "f", "ts": 4, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "other thread", "ts": 5, "dur": 2, "pid": 1, "tid": 2},
        {"ph": "X", "cat": "kernel", "name": "gpu", "ts": 6, "dur": 2, "pid": 0, "tid": 7},
        {"ph": "X", "cat": "cpu_op", "name": "after", "ts": 150, "dur": 2, "pid": 1, "tid": 1}]}
    assert profiler_cost.events_in_ranges(tr, r) == [3]


@pytest.mark.cuda
def test_cuda_the_calibration_measures_a_positive_cost_per_event_for_both_bodies():
    got = profiler_cost.calibrate(with_stack=True, repeats=3)
    assert got["us_per_event"] > 0
    assert got["bodies"]["python"]["events_per_iter"] > got["bodies"]["launch"]["events_per_iter"]
