"""The profiled pass analysed in a worker process: the same result as in this process, a
job given up on never taken for the next one, a dead worker replaced by this process's own
analysis, nothing left running after close; and the round hook that places the live profiled pass."""
from __future__ import annotations

import os

import numpy as np
import pytest

from dspark_lab.config import LabConfig
from dspark_lab.measure import analysis_worker as aw
from dspark_lab.measure import loop, profile
from dspark_lab.run import point

CFG = LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=3, device="cpu")
NAMES = ["device_direct", "non_blocking", "persistent_fill"]


def trace_files() -> set:
    return {f for f in os.listdir("/tmp") if f.startswith("dspark-trace-")}


def started() -> aw.AnalysisWorker:
    """A worker past its imports (a job submitted before is refused: the caller analyses it)."""
    w = aw.AnalysisWorker()
    assert w.wait_ready(120), "the analysis worker did not start"
    return w


@pytest.fixture(scope="module")
def worker():
    w = started()
    yield w
    w.close()


@pytest.fixture(scope="module")
def trace_file():
    path = profile.profile_strategies(point.build_steps(CFG, NAMES), 3, keep_file=True)
    yield path
    os.unlink(path)


def test_the_worker_gives_what_this_process_gives(worker, trace_file):
    here = profile.analyse_strategies(trace_file, NAMES)
    there = worker.submit(trace_file, NAMES).result(120)
    assert set(there) == set(NAMES)
    for n in NAMES:
        assert there[n][0] == pytest.approx(here[n][0], nan_ok=True) and there[n][1] == here[n][1]


def test_a_job_given_up_on_is_dropped_not_taken_for_the_next(worker, trace_file):
    worker.submit(trace_file, NAMES[:1])  # a cancelled setting's: never collected
    second = worker.submit(trace_file, NAMES[1:])
    assert set(second.result(120)) == set(NAMES[1:])


def test_an_analysis_that_fails_there_says_why(worker):
    with pytest.raises(aw.WorkerFailed, match="FileNotFoundError"):
        worker.submit("/nonexistent/trace.json", NAMES).result(120)
    assert worker.alive  # one bad job does not end the worker


def test_closing_leaves_no_process_and_a_closed_worker_takes_no_job():
    w = started()
    pid = w.pid
    w.close()
    assert not w.alive and w._proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(aw.WorkerFailed, match="not running"):
        w.submit("x.json", NAMES)


def test_live_profiled_pass_after_the_first_round_analysed_in_the_worker(worker):
    """measure_point with profile_after_round=1: the profiled pass runs between rounds 1 and 2 (each
    trial before it is timed before it, the rest after), the worker analyses it, and the rows carry
    the profiled columns as the in-process path gives them; no trace file is left."""
    order, before = [], trace_files()
    res = point.measure_point(CFG, NAMES, profile_steps=3, keep_traces=False, profile_after_round=1,
                              analysis_worker=worker, on_trial=lambda n, t: order.append((n, t.trial)),
                              on_progress=lambda msg, frac: order.append(msg) if msg == "profiling" else None)
    assert res.analysed_in == "a worker process"
    assert order.index("profiling") == len(NAMES)  # after round 1's trials, before round 2's
    assert len(order) == CFG.trials * len(NAMES) + 1
    rows = res.rows
    assert len(rows) == CFG.trials * len(NAMES) and all(r["profiled_step_ms"] > 0 for r in rows)
    assert {t["strategy"] for t in res.timelines} == set(NAMES) and all(t["segments"] for t in res.timelines)
    assert trace_files() == before


def test_a_dead_worker_is_replaced_by_this_process(worker):
    dead = started()
    dead._proc.kill()
    dead._proc.wait()
    res = point.measure_point(CFG, NAMES[:2], profile_steps=3, keep_traces=False, profile_after_round=1,
                              analysis_worker=dead)
    assert res.analysed_in == "this process" and all(r["profiled_step_ms"] > 0 for r in res.rows)
    dead.close()


def test_a_cancelled_measurement_leaves_no_trace_file(worker):
    class Stop(Exception):
        pass

    seen, before = [], trace_files()

    def on_trial(n, t):
        seen.append(n)
        if len(seen) == len(NAMES) + 1:  # the first trial after the profiled pass
            raise Stop

    with pytest.raises(Stop):
        point.measure_point(CFG, NAMES, profile_steps=3, keep_traces=False, profile_after_round=1,
                            analysis_worker=worker, on_trial=on_trial)
    assert trace_files() == before


def test_the_round_hook_runs_after_each_round_and_its_time_is_not_the_trials():
    clock = iter(np.arange(0.0, 1000.0, 1.0))
    now = [0.0]

    def tick():
        now[0] = next(clock)
        return now[0]

    hooks = []

    def hook(done):
        hooks.append(done)
        for _ in range(50):  # a long hook: 50 clock ticks
            tick()

    steps = {"a": lambda: None, "b": lambda: None}
    res = loop.run_rounds(steps, loop.CITarget(0.001, 30.0, min_trials=2), steps=1, warmup=0, sync=lambda: None,
                          clock=tick, timer=lambda: 0.0, after_round=hook)
    # Each round costs a few ticks, each hook 50: with the hooks counted, the 30-tick cap would end
    # the loop after round 1; without them it runs for several rounds.
    assert hooks == list(range(1, res.rounds + 1)) and res.rounds > 2


def test_profile_after_round_must_be_a_whole_number_of_rounds():
    with pytest.raises(ValueError, match="profile_after_round"):
        point.measure_point(CFG, NAMES[:1], profile_after_round=0)



def test_the_worker_reads_traces_without_importing_torch():
    """Its start-up must end before a live update's profiled pass (about 1.5 s after the panel is
    made): torch's import alone took 3-5 s on the H200's host, so the trace readers load no torch."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; import dspark_lab.measure.analysis_worker, dspark_lab.measure.profile, "
            "dspark_lab.measure.breakdown, dspark_lab.measure.syncs, dspark_lab.measure.trace; "
            "sys.exit('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr or "torch was imported"
