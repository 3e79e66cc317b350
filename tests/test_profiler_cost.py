"""The profiler's own host time taken off the charge (measure/profiler_cost.py, measure/breakdown.py):
synthetic traces of the known-cost step (3 ms of GPU idle caused per step) with host events recorded
in the gap after the wait, a trace carrying a cost per event and one without; the calibration's fit
and event count on synthetic numbers; the cost carried in a kept trace file."""
import json

import pytest

from dspark_lab.measure import breakdown, profiler_cost, syncs, trace
from test_wait_kinds import HOST_AFTER_US, known_cost_trace


def _with_frames(t, per_step: int, tid: int = 1):
    """Python-frame events spread over the 2 ms of host work after each step's wait."""
    waits = [e for e in t.events if e["name"] == "cudaStreamSynchronize"]
    for w in waits:
        lo = w["ts"] + w["dur"] + 20.0
        for k in range(per_step):
            t.events.append({"ph": "X", "cat": "python_function", "name": f"f{k}", "ts": lo + k * 5.0,
                             "dur": 1.0, "pid": 1, "tid": tid, "args": {}})
    return t


def _charged(tr: dict) -> dict:
    ev = trace.events(tr)
    return breakdown.summary(ev, calls=syncs.sync_calls(ev))


def test_the_profilers_own_time_in_the_gap_comes_off_the_charge():
    t = _with_frames(known_cost_trace("item"), per_step=200)
    plain = _charged({"traceEvents": t.events})
    costed = _charged({"traceEvents": t.events, profiler_cost.TRACE_KEY: {"us_per_event": 1.0}})
    assert plain["gpu_idle_sync_caused_ms"] == pytest.approx(3.0, abs=0.05)
    assert plain["gpu_idle_profiler_ms"] == 0.0
    # 200 events at 1 µs each recorded while the GPU waited: 0.2 ms of the gap was the profiler's.
    assert costed["gpu_idle_sync_caused_ms"] == pytest.approx(2.8, abs=0.05)
    assert costed["gpu_idle_profiler_ms"] == pytest.approx(0.2, abs=0.01)


def test_events_on_another_thread_do_not_shorten_the_gap():
    t = _with_frames(known_cost_trace("item"), per_step=200, tid=2)
    costed = _charged({"traceEvents": t.events, profiler_cost.TRACE_KEY: {"us_per_event": 1.0}})
    assert costed["gpu_idle_sync_caused_ms"] == pytest.approx(3.0, abs=0.05)


def test_the_profilers_time_never_takes_a_gap_below_nothing():
    t = _with_frames(known_cost_trace("item"), per_step=300)
    # 300 events at 50 µs claim 15 ms of a 3 ms gap: the gap is charged nothing, not less.
    costed = _charged({"traceEvents": t.events, profiler_cost.TRACE_KEY: {"us_per_event": 50.0}})
    assert costed["gpu_idle_sync_caused_ms"] == 0.0


def _cap_cuts(t) -> list:
    """Per wait: how much the cap shrinks once the trace carries 10 µs per event (ms)."""
    caps = []
    for extra in ({}, {profiler_cost.TRACE_KEY: {"us_per_event": 10.0}}):
        ev = trace.events({"traceEvents": t.events, **extra})
        caps.append(breakdown.wait_charges(ev, syncs.sync_calls(ev)).cap_ms)
    return (caps[0] - caps[1]).tolist()


def test_the_cap_of_a_wait_loses_the_profilers_events_inside_its_call():
    own = _cap_cuts(known_cost_trace("item"))  # the call's own events: its ops, copy and sync
    t = known_cost_trace("item")
    for op in [e for e in t.events if e["name"] == "aten::item"]:
        for k in range(100):
            t.events.append({"ph": "X", "cat": "python_function", "name": "inner", "ts": op["ts"] + 0.5 + k * 0.01,
                             "dur": 0.001, "pid": 1, "tid": 1, "args": {}})
    # 100 more events at 10 µs inside each wait's .item(): its cap is 1 ms less again.
    assert [b - a for a, b in zip(own, _cap_cuts(t))] == pytest.approx([1.0] * len(own), abs=1e-6)
    assert all(0 < a < 0.1 for a in own)


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


def test_a_kept_trace_file_carries_the_cost_and_still_reads_as_the_same_events(tmp_path):
    t = known_cost_trace("item")
    path = tmp_path / "dspark-trace-x.json"
    path.write_text(json.dumps({"traceEvents": t.events, "deviceProperties": []}, indent=1) + "\n")
    before = trace.events(str(path))
    trace._carry_in_file(str(path), {"us_per_event": 0.9})
    after = trace.events(str(path))
    assert after.attrs[profiler_cost.TRACE_KEY] == {"us_per_event": 0.9}
    assert after.drop(columns="args").equals(before.drop(columns="args"))
    assert trace.window(json.loads(path.read_text()), "dspark:step")[profiler_cost.TRACE_KEY]["us_per_event"] == 0.9


def test_a_file_that_is_not_a_json_object_is_refused(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text("[1, 2, 3]")
    with pytest.raises(OSError, match="does not end with a JSON object"):
        trace._carry_in_file(str(path), {"us_per_event": 1.0})


def test_no_calibration_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert profiler_cost.for_session(True, True) is None


@pytest.mark.cuda
def test_cuda_the_calibration_measures_a_positive_cost_per_event_for_both_bodies():
    got = profiler_cost.calibrate(with_stack=True, repeats=3)
    assert got["us_per_event"] > 0
    assert got["bodies"]["python"]["events_per_iter"] > got["bodies"]["launch"]["events_per_iter"]
