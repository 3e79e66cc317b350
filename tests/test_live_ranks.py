"""The live panel on real EP ranks, with gloo ranks on CPU: the dispatch control, the
per-rank view, trials streamed from rank 0 as they end, a cancel every rank obeys at the same
trial, and no rank process left once the panel closes."""
from __future__ import annotations

import os
import threading

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("anywidget")

from dspark_lab.config import LabConfig  # noqa: E402
from dspark_lab.parallel import workers  # noqa: E402
from dspark_lab.parallel.run import EPLive  # noqa: E402
from dspark_lab.run import live  # noqa: E402
from dspark_lab.views import panel  # noqa: E402

FP = {"gpu": "none", "driver": "none", "cuda": "none", "torch": "x"}
BASE = LabConfig(model="tiny", workload="tiny", steps=1, warmup=0, trials=2, device="cpu", batch_size=2, gamma=2)
NAMES = ["device_direct", "non_blocking"]  # two strategies (three rank cases): a quick test on CPU
SETTING = {"ep_size": 2, "batch_size": 2, "gamma": 2, "workload": "tiny"}


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(workers, "device_count", lambda: 2)  # as on two GPUs; the ranks run gloo here


@pytest.fixture(scope="module")
def ep_live():
    """One gloo group for the module. Its ranks get one intra-op thread each: on a small shared CPU
    machine, ranks that each spin a thread per core slow every step several-fold."""
    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # read by the rank processes when the group starts
    ep = EPLive(backend="gloo", profile_steps=1)
    try:
        yield ep
    finally:
        ep.close()
        if old is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = old


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_trials_stream_from_rank0_in_order(two_gpus, ep_live):
    b = live.LiveBackend(BASE, fingerprint=FP, ep_live=ep_live, names=NAMES)
    got = []
    final = b.stream({**SETTING, "dispatch": "a2a_fixed"}, on_update=got.append)
    n = len(NAMES)
    assert [u.trials for u in got] == [1, n, 2 * n] and [u.final for u in got] == [False] * 2 + [True]
    for u in got[:-1]:
        assert set(u.data.rows.ep_mode) == {"real"} and set(u.data.rows.dispatch) == {"a2a_fixed"}
        assert len(u.data.rows) == u.trials
    assert list(got[1].data.rows.strategy) == NAMES  # round 1, in the order run
    # The point is fixed before it is measured: the partial rows carry the same identity as the
    # ranks' complete ones (nothing fills it in afterwards).
    for u in got[:-1]:
        assert set(u.data.rows.point_id) == set(final.data.rows.point_id) and set(u.data.rows.world_size) == {2}
    # The complete update: rank 0 of the uniform cases for the figures; every rank for the per-rank view.
    assert set(final.data.rows["rank"]) == {0} and set(final.data.rows.strategy) == set(NAMES)
    assert set(final.ranks["rank"]) == {0, 1} and set(final.ranks.dispatch) == {"a2a_fixed"}
    assert "device_direct,non_blocking" in set(final.ranks.rank_case)  # ranks that differ: who waits for whom


def test_a_cancel_stops_every_rank_at_the_same_trial_and_the_group_goes_on(two_gpus, ep_live):
    b = live.LiveBackend(BASE, fingerprint=FP, ep_live=ep_live, names=NAMES)
    cancel = threading.Event()
    got = []

    def on_update(u):
        got.append(u.trials)
        cancel.set()  # a newer setting arrives after the first trial

    with pytest.raises(live.Cancelled):
        b.stream(SETTING, on_update=on_update, cancel=cancel)
    assert got == [1]
    assert ep_live.group.alive()  # no rank left waiting in a collective: the next request runs
    d = b.get({**SETTING, "dispatch": "allreduce"})
    assert set(d.rows.dispatch) == {"allreduce"} and set(d.rows.strategy) == set(NAMES)


def test_panel_dispatch_control_and_per_rank_view_then_close_leaves_no_worker(two_gpus, ep_live):
    p = panel.Panel(live.LiveBackend(BASE, fingerprint=FP, ep_live=ep_live, names=NAMES), debounce_s=0.01)
    try:
        dd = p.controls["dispatch"]
        assert list(dd.options) == ["allreduce", "a2a_fixed", "a2a_dynamic"]
        p.set(ep_size=1, batch_size=2, gamma=2, workload="tiny")
        assert dd.layout.display == "none" and p.live.box.layout.display == "none"  # one process: no ranks
        assert p.live.figs == {} and len(p.live.box.children) == 1  # the per-rank figures: made when first shown
        p.set(ep_size=2, dispatch="a2a_dynamic")
        assert dd.layout.display == ""
        assert p._worker.wait(120)
        assert p.error.value == "", p.error.value
        assert set(p.last.rows.dispatch) == {"a2a_dynamic"} and set(p.last.rows.ep_mode) == {"real"}
        assert p.live.box.layout.display == "" and "2 processes, dispatch a2a_dynamic" in p.live.rank_note.value
        assert list(p.live.box.children[1:]) == [p.live.figs["per_rank"], p.live.figs["who_waits"]]
        names = {t.name for t in p.live.figs["per_rank"].data}
        assert names and len(p.live.figs["who_waits"].data) > 0
        x = p.live.figs["per_rank"].data[0].x
        assert {"r0", "r1"} <= set(x[1]) and "r0 device_direct<br>r1 non_blocking" in set(x[0])  # each rank
        pids = p.backend._ep_live.group.pids
        assert len(pids) == 2 and all(_alive(q) for q in pids)
    finally:
        p.close()
    assert p.backend._ep_live.group is None
    assert not any(_alive(q) for q in pids)  # close() waited for them and reaped them
    assert not any(t.name.startswith("dspark") and t.is_alive() for t in threading.enumerate()
                   if t.name in ("dspark-live", "dspark-ep-spawner", "dspark-ep-dispatch"))
