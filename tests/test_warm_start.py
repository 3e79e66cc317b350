"""The live warm-up's first step, its two cold halves made side by side (LabStep.warmed,
the target verify on a helper thread while the draft model is built and its kernels load)."""
import sys
import threading

import pytest
import torch

from dspark_lab import strategies
from dspark_lab.config import LabConfig
from dspark_lab.model.workload import LabStep, side_by_side

TINY = dict(model="tiny", workload="tiny")


def _helpers_alive() -> list:
    return [t for t in threading.enumerate() if t.name == "dspark-side-by-side"]


def test_side_by_side_gives_both_results_and_runs_the_helper_on_another_thread():
    seen = {}

    def helper():
        seen["helper"] = threading.current_thread()
        return "h"

    def main():
        seen["main"] = threading.current_thread()
        return "m"

    assert side_by_side(helper, main) == ("h", "m")
    assert seen["main"] is threading.current_thread() and seen["helper"] is not seen["main"]
    assert not _helpers_alive()


def test_side_by_side_overlaps_the_two():
    # Each waits for the other to have started: only two threads running at once can finish.
    a, b = threading.Event(), threading.Event()

    def helper():
        a.set()
        return b.wait(30)

    def main():
        b.set()
        return a.wait(30)

    assert side_by_side(helper, main) == (True, True)


def test_side_by_side_raises_the_helpers_error_after_joining_it():
    def helper():
        raise ValueError("target verify failed")

    with pytest.raises(ValueError, match="target verify failed"):
        side_by_side(helper, lambda: 1)
    assert not _helpers_alive()


def test_side_by_side_joins_the_helper_when_main_raises():
    release = threading.Event()
    finished = []

    def helper():
        release.wait(30)
        finished.append(True)

    def main():
        release.set()
        raise KeyError("draft model failed")

    with pytest.raises(KeyError, match="draft model failed"):
        side_by_side(helper, main)
    assert finished == [True] and not _helpers_alive()  # joined before the error came out


def test_warmed_off_cuda_is_the_plain_step():
    cfg = LabConfig(**TINY, device="cpu", batch_size=3, gamma=2)
    a, b = LabStep.warmed(cfg, "non_blocking"), LabStep(cfg.with_(strategy="non_blocking"))
    assert a.strategy.name == "non_blocking"
    for s in (a, b):
        s.step()
        s.step()
    assert torch.equal(a.last_output, b.last_output)


@pytest.mark.cuda
def test_warmed_step_equals_the_plain_one_on_cuda():
    cfg = LabConfig(ep_size=8, batch_size=5, gamma=4, workload="tiny", device="cuda")
    name = strategies.BUILTIN[0]
    # The plain step first: the calibration is then known in this process, so each warmed step's
    # helper reaches its graph capture at once, while the draft weights would still be drawn
    # (a capture registers the default CUDA generator: that race failed once in the CUDA suite).
    plain = LabStep(cfg.with_(strategy=name))
    for _ in range(5):
        warm = LabStep.warmed(cfg, name)
        assert warm.target.graph is not None  # captured on the helper thread
        assert warm.target.layers == plain.target.layers  # the calibration both read
    for s in (warm, plain):
        for _ in range(3):
            s.step()
        s.drain()
    assert warm.runner.graph is not None
    assert torch.equal(warm.last_output, plain.last_output)
    assert torch.equal(warm.target.bonus, plain.target.bonus)
    assert not _helpers_alive()


def test_the_warm_up_shortens_the_gil_switch_interval_and_restores_it():
    from dspark_lab.run import live

    before = sys.getswitchinterval()
    with live._short_gil_switch(0.0002):
        assert sys.getswitchinterval() == pytest.approx(0.0002)
    assert sys.getswitchinterval() == before
    with pytest.raises(RuntimeError):  # restored also when the warm-up fails
        with live._short_gil_switch(0.0002):
            raise RuntimeError("x")
    assert sys.getswitchinterval() == before


def test_an_interval_set_by_someone_else_meanwhile_is_kept():
    from dspark_lab.run import live

    before = sys.getswitchinterval()
    try:
        with live._short_gil_switch(0.0002):
            sys.setswitchinterval(0.01)  # the user's own, set while the warm-up ran
        assert sys.getswitchinterval() == pytest.approx(0.01)
    finally:
        sys.setswitchinterval(before)


def test_a_backend_warm_up_leaves_the_interval_as_it_found_it():
    from dspark_lab.run import live

    before = sys.getswitchinterval()
    b = live.LiveBackend(LabConfig(**TINY, steps=2, warmup=0, trials=2, device="cpu"), warm=True)
    try:
        assert b.wait_warm(120) and b.warm_error is None
        assert sys.getswitchinterval() == before
    finally:
        b.close()
