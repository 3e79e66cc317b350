"""The katas: at least five, each on a gallery case; the starter is the pitfall, the solution the fix;
`check` grades output (everywhere) and guard + speed (CUDA only, tests marked `cuda`)."""
from __future__ import annotations

import pytest
import torch

from dspark_lab.gallery import katas, registry
from dspark_lab.gallery import targets


def _define(source: str, name: str):
    ns: dict = {}
    exec(compile(source, f"<kata {name}>", "exec"), ns)  # as a notebook cell would run it
    return ns


def test_there_are_at_least_five_katas_each_on_a_gallery_case():
    assert len(katas.names()) >= 5 and set(katas.names()) <= set(registry.names())
    with pytest.raises(ValueError, match="kata must be one of scalar_item, "):
        katas.kata("nope")


@pytest.mark.parametrize("name", katas.names())
def test_the_starter_and_the_solution_run_as_pasted_into_a_cell(name):
    case = registry.get(name)
    assert case.step.__name__ in _define(katas.starter(name), name)
    assert case.fix.__name__ in _define(katas.solution(name), name)


def test_the_reference_solution_passes_what_can_be_checked_and_says_what_cannot():
    ns = _define(katas.solution("scalar_item"), "scalar_item")
    g = katas.check("scalar_item", ns["seq_lens_sum_from_mirror"], scale="smoke")
    assert g.passed and g.results["output"][0] is True
    if not torch.cuda.is_available():
        assert not g.complete and g.results["guard"] == (None, katas.NEEDS_CUDA)
        assert katas.NOT_GRADED in str(g)


def test_on_cpu_the_untouched_pitfall_is_not_called_a_pass():
    if torch.cuda.is_available():
        pytest.skip("on CUDA the pitfall is graded (and fails the guard)")
    case = registry.get("scalar_item")
    head = str(katas.check("scalar_item", case.step, scale="smoke")).splitlines()[0]
    assert head == f"kata scalar_item: {katas.NOT_GRADED}" and "pass" not in head.replace("passes that too", "")


def test_a_wrong_output_fails_the_output_check_naming_both_values():
    g = katas.check("scalar_item", lambda s: int(s.seq_lens_cpu.sum()) + 1, scale="smoke")
    assert not g.passed and g.failed() == ["output"]
    assert "the reference returns" in g.results["output"][1]


def test_a_step_that_raises_fails_the_output_check_instead_of_crashing():
    g = katas.check("tensor_bool", lambda s: 1 / 0, scale="smoke")
    assert g.failed() == ["output"] and "ZeroDivisionError" in g.results["output"][1]


def test_a_tensor_of_the_wrong_shape_fails():
    g = katas.check("boolean_mask", lambda s: torch.zeros(3), scale="smoke")
    assert g.failed() == ["output"] and "shape (3,)" in g.results["output"][1]


def test_every_case_and_fix_is_an_inspect_target():
    assert targets.names() == [n for c in registry.names() for n in (c, c + targets.FIX_SUFFIX)]
    step = getattr(targets, "scalar_item_fix")()
    assert callable(step)


@pytest.mark.cuda
@pytest.mark.parametrize("name", katas.names())
def test_on_cuda_the_fix_passes_and_the_pitfall_fails_the_guard_at_its_sync_line(name):
    case = registry.get(name)
    good = katas.check(name, case.fix)
    # verify's verdict: output and guard must pass; a speed criterion this GPU does not show is said, not failed
    from dspark_lab.results.analyses.verification import kata_check

    verdict = kata_check(name, good.results, katas.kata(name).speed)
    assert verdict.passed and good.complete, verdict.line()
    bad = katas.check(name, case.step)
    assert not bad.passed and "guard" in bad.failed(), str(bad)
    # The guard names the sync's line (or, for a sync only the trace sees, its function's def line).
    assert all(site.split(" ")[-1] in bad.results["guard"][1] for site in case.sites()), bad.results["guard"][1]
