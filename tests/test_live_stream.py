"""Live updates that keep up, with a fake measurer on CPU: a setting's trials arrive in
order and are drawn as they come, a newer setting cancels the running measurement, and closing the
panel leaves no thread; real-rank dispatch and the per-rank view with gloo ranks."""
from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")

from dspark_lab import strategies  # noqa: E402
from dspark_lab.config import LabConfig  # noqa: E402
from dspark_lab.measure.timing import TrialTiming  # noqa: E402
from dspark_lab.run import live  # noqa: E402
from dspark_lab.run.point import timing_rows  # noqa: E402
from dspark_lab.views import panel  # noqa: E402

FP = {"gpu": "FAKE-GPU", "driver": "0.0", "cuda": "0", "torch": "0"}
BASE = LabConfig(model="tiny", workload="tiny", batch_size=1, gamma=2, ep_size=1, device="cpu", steps=4, warmup=0,
                 trials=3)


class FakeMeasurer:
    """measure_point's stand-in: rounds of one trial per strategy, passed to `on_trial` as they end
    (step time = batch size + strategy index/10 + trial/100 ms, so each trial is recognisable).
    `hold(cfg, trial_index)` (if given) is called after each trial: a test holds a measurement there."""

    def __init__(self, hold=None):
        self.hold = hold
        self.calls: list = []  # (batch_size, trials run) per measurement, filled as trials run

    def __call__(self, cfg, names, *, on_progress=None, on_trial=None):
        self.calls.append([cfg.batch_size, 0])
        timings = {n: [] for n in names}
        for t in range(cfg.trials):
            for i, n in enumerate(names):
                tt = TrialTiming(t, cfg.steps, cfg.batch_size + i / 10 + t / 100, np.full(cfg.steps, 1.0))
                timings[n].append(tt)
                self.calls[-1][1] += 1
                if on_trial is not None:
                    on_trial(n, tt)
                if self.hold is not None:
                    self.hold(cfg, self.calls[-1][1])
        if on_progress is not None:
            on_progress("profiling", 0.9)
        return _Result(timing_rows(cfg, timings), [])


class _Result:
    def __init__(self, rows, timelines):
        self.rows, self.timelines = rows, timelines


def backend(measure, trials: int = 3) -> live.LiveBackend:
    return live.LiveBackend(BASE.with_(trials=trials), measure=measure, fingerprint=FP)


def test_partial_results_arrive_in_order_then_the_complete_one():
    b, names = backend(FakeMeasurer()), list(strategies.names())
    got = []
    final = b.stream({"ep_size": 1, "batch_size": 8, "gamma": 2}, on_update=got.append)
    assert got[-1] is final and final.final and [u.final for u in got[:-1]] == [False] * (len(got) - 1)
    partial = got[:-1]
    # The first trial (the first figure), then each round but the last (the complete update
    # follows it at once): 1, n, 2n trials; the complete one has all 3n.
    n = len(names)
    assert [u.trials for u in partial] == [1, n, 2 * n] and final.trials == 3 * n
    for u in partial:  # the rows are exactly the trials run so far, in the order run
        r = u.data.rows
        assert len(r) == u.trials and u.planned == 3 * n
        assert list(r.drop_duplicates("strategy").strategy) == names[:min(u.trials, n)]
        assert (r.batch_size == 8).all() and (r.gpu == "FAKE-GPU").all() and u.data.timelines.empty
    assert partial[0].data.rows.step_ms.tolist() == [8.0]
    # The CI: none below results.rules.noise.MIN_QUIET_ROUNDS quiet rounds, so none in 3 rounds.
    assert [u.half_width_pct is None for u in partial] == [True, True, True]
    assert "10/15 trials so far" in partial[-1].line() and "complete: 15 trials" in final.line()
    assert len(final.data.rows) == 3 * n and "measured now" in final.data.note


def test_a_set_cancel_stops_the_measurement_at_the_next_trial():
    cancel = threading.Event()

    def hold(cfg, done):
        if done == 2:
            cancel.set()  # as a newer setting does

    m = FakeMeasurer(hold)
    got = []
    with pytest.raises(live.Cancelled):
        backend(m).stream({"ep_size": 1, "batch_size": 8, "gamma": 2}, on_update=got.append, cancel=cancel)
    assert m.calls == [[8, 3]]  # the trial under way ended; the next one stopped it
    assert [u.trials for u in got] == [1] and not any(u.final for u in got)


def _panel(measure) -> panel.Panel:
    """A live panel; its first measurement (the defaults) is cancelled by the test's first setting."""
    return panel.Panel(backend(measure, trials=2), debounce_s=0.01)  # 2 rounds: fewer draws, a faster test


def test_a_change_cancels_the_running_measurement_and_the_new_one_is_drawn():
    reached, release = threading.Event(), threading.Event()
    release.set()

    def hold(cfg, done):
        if cfg.batch_size == 8 and done == 1:
            reached.set()
            assert release.wait(30), "the test never released the measurement"

    m = FakeMeasurer(hold)
    p = _panel(m)
    try:
        release.clear()
        p.set(ep_size=1, batch_size=8, gamma=2)
        assert reached.wait(30)  # batch 8 is being measured, its first trials drawn ...
        drawn_8 = [u for u in p._worker.updates if u[0]["batch_size"] == 8]
        assert [u[2] for u in drawn_8] == [1] and not any(u[1] for u in drawn_8)
        assert dict(zip(p.figs["comparison"].data[0].x, p.figs["comparison"].data[0].y))  # the partial bars
        p.set(ep_size=1, batch_size=32, gamma=2)  # ... when the slider moves on
        release.set()
        assert p._worker.wait(30)
    finally:
        p.close()
    assert [c for c in m.calls if c[0] in (8, 32)] == [[8, 2], [32, 10]]  # 8 stopped after one more trial
    assert [s["batch_size"] for s in p._worker.cancelled] == [8]
    assert [u[0]["batch_size"] for u in p._worker.updates if u[1]] [-1] == 32
    assert not any(u[0]["batch_size"] == 8 and u[2] > 1 for u in p._worker.updates)  # nothing of 8 after the change
    assert set(p.last.rows.batch_size) == {32} and p.progress.value == 1.0
    assert "complete: 10 trials" in p.status.value and "FAKE-GPU" in p.status.value


def test_closing_the_panel_leaves_no_thread():
    reached = threading.Event()
    closing = threading.Event()

    def hold(cfg, done):
        if cfg.batch_size == 8 and done == 1:
            reached.set()
            assert closing.wait(30)

    before = set(threading.enumerate())
    p = _panel(FakeMeasurer(hold))
    p.set(ep_size=1, batch_size=8, gamma=2)
    assert reached.wait(30)
    worker = p._worker._thread
    assert worker in threading.enumerate()
    closer = threading.Thread(target=p.close)
    closer.start()
    assert p._worker._closed.wait(30)
    closing.set()  # the measurement goes on to its next trial, where the cancel stops it
    closer.join(30)
    assert not closer.is_alive() and not worker.is_alive()
    left = [t for t in threading.enumerate() if t not in before and t.name.startswith("dspark")]
    assert left == []
    p._worker.submit({"ep_size": 1, "batch_size": 2, "gamma": 2})  # a closed panel measures nothing more
    assert not p._worker.busy


def test_the_warm_up_builds_one_step_and_the_first_request_looks_first_then_builds_the_rest():
    """The cheap start with the real runner: the warm-up builds (and steps once, which captures
    graphs on CUDA) only the default strategy's step at the default setting. The first request
    there draws a first look (one timed trial of that strategy, before the others exist), then
    measures every strategy with that step kept among them; the step is not reused after."""
    b = live.LiveBackend(BASE, fingerprint=FP, warm=True)
    assert b.wait_warm(60) and b.warm_error is None, b.warm_error
    assert "first_step_and_graphs_s" in b.warm_parts
    name = b.defaults()["strategy"]
    built = b._steps[1]
    assert list(built) == [name] and b._steps[0] == b.config(b.defaults())
    given, updates = [], []

    def spy(cfg, names, *, on_progress=None, on_trial=None, steps=None):
        given.append(steps)
        return FakeMeasurer()(cfg, names, on_progress=on_progress, on_trial=on_trial)

    b._measure = spy
    b.stream(b.defaults(), on_update=updates.append)
    first = updates[0]
    assert first.first_look and not first.final and first.trials == 0
    assert list(first.data.rows["strategy"]) == [name] and first.data.rows["step_ms"].iloc[0] > 0
    assert "first look: 1 trial of " + name in first.line()
    steps = given[0]
    assert list(steps) == list(strategies.names()) and steps[name] is built[name]
    assert all(s.runner.model is built[name].runner.model for s in steps.values())  # one set of weights
    # Until its rounds give it a trial, the first look's bar stays in the partial updates.
    second = updates[1]
    assert not second.first_look and set(second.data.rows["strategy"]) == {strategies.names()[0], name}
    assert not any(u.first_look for u in updates[1:]) and updates[-1].final
    b.get(b.defaults())
    assert given[1] is None and b._steps is None
    worker = b._analysis  # the real runner's analysis process (measure.analysis_worker) ends with the backend
    assert worker is not None and worker.alive
    b.close()
    assert not worker.alive and worker._proc.returncode is not None


@pytest.mark.cuda
def test_cuda_a_streamed_measurement_cancels_mid_way_and_the_next_one_completes():
    """The real runner on the GPU: cancelled after its first figure, it stops there (no complete
    update); the next setting streams in order and completes with its profiled columns."""
    b = live.LiveBackend(LabConfig(steps=4, warmup=1, trials=2), warm=True)
    settings = {**b.defaults(), "ep_size": 1, "batch_size": 8, "gamma": 4}
    cancel, got = threading.Event(), []

    def first_then_cancel(u):
        got.append(u)
        cancel.set()

    with pytest.raises(live.Cancelled):
        b.stream(settings, on_update=first_then_cancel, cancel=cancel)
    assert [u.trials for u in got] == [1]
    got.clear()
    final = b.stream({**settings, "batch_size": 16}, on_update=got.append)
    n = len(strategies.names())
    assert [u.trials for u in got] == [1, n, 2 * n] and got[-1] is final
    by = final.data.rows.groupby("strategy")["syncs_per_step"].max()
    assert by["device_direct"] >= 1 and by["non_blocking"] == 0, by
    assert not final.data.timelines.empty and (final.data.rows.batch_size == 16).all()
