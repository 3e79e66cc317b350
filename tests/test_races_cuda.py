"""On CUDA: the race check flags every unsafe hazard form with a step (the reused pinned buffer, the early
device-to-host read, vLLM #51599's condense) and passes every safe form and strategy; the condense race
case is flagged and its fix passes; a served .item() behind queued GPU work buys headroom. Skipped on CPU."""
from __future__ import annotations

import time

import pytest
import torch

from dspark_lab.gallery import race_cases
from dspark_lab.measure import hazards, probe, races
from dspark_lab.measure.read_stub import ReadStub

pytestmark = pytest.mark.cuda


def test_racy_forms_are_flagged_and_safe_forms_and_strategies_clean():
    rec = hazards.check_race_forms(steps=20, queued_ms=0.2)
    flagged = {r["form"] for r in rec["forms"] if r["flagged"]}
    assert flagged == {n for n, (_, safe, _) in hazards.RACE_FORMS.items() if not safe}
    assert {"pinned_reused", "d2h_before_event", "pinned_written_in_flight"} <= flagged
    assert all(not r["flagged"] for r in rec["strategies"])
    first = next(r for r in rec["forms"] if r["form"] == "pinned_reused")["first"]
    assert first["copy"].startswith("measure/hazards.py:")  # the copy that raced, by its line


def test_the_condense_race_case_is_flagged_and_its_fix_clean():
    dev = torch.device("cuda")
    case = race_cases.CASES["condense_pinned_in_flight"]
    assert not races.check(lambda: case.make_step(dev), steps=20)["clean"]
    assert races.check(lambda: case.make_fix(dev), steps=20)["clean"]


def test_a_served_item_behind_queued_work_does_not_wait():
    probe.calibrate_sleep()
    x = torch.ones(8, device="cuda")

    def step():
        probe.busy_kernel(2.0)
        return x.sum().item()
    with ReadStub() as stub:
        (site,) = stub.record(step)
        real, served = stub.step(step, None), stub.step(step, site)
        torch.cuda.synchronize()

        a = time.perf_counter()
        real()
        b = time.perf_counter()
        served()
        c = time.perf_counter()
        torch.cuda.synchronize()
    assert (b - a) > 1.5e-3 > (c - b)  # the real read waits for the 2 ms queued; the served one does not
