"""The katas: at least five, each on a gallery case; the starter is the pitfall, the solution the fix;
`check` grades output over steps of changing values (everywhere), races (synthetic run-ahead on the
CPU, the GPU's on CUDA) and guard + speed (CUDA only, tests marked `cuda`)."""
from __future__ import annotations

import pytest
import torch

from dspark_lab.gallery import changing, katas, registry
from dspark_lab.gallery import targets
from dspark_lab.gallery.cases import draft, host_prep, target_verify
from dspark_lab.measure import races
from helpers import FakeStream, stream_hooks


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


# --- the grade over steps of changing values, and the race check (synthetic steps on the CPU) --------



def _staged_lengths(stream, reuse: bool):
    """A pageable_copy solution that stages the new lengths on the host and 'copies' them in stream
    order: into one buffer refilled every step (`reuse`, the race), or a fresh one per step."""
    shared = torch.zeros(8, dtype=torch.int64)

    def solution(s):
        buf = shared if reuse else torch.zeros_like(shared)
        buf.copy_(s.seq_lens_cpu + 1)  # the host fills the staging buffer
        out = torch.zeros_like(buf)
        stream.enqueue(lambda: out.copy_(buf))  # the copy reads it when the stream gets there
        return out
    return solution


def test_a_solution_refilling_a_buffer_its_copy_still_reads_fails_the_race_check_only():
    s = FakeStream()
    racy = katas.check("pageable_copy", _staged_lengths(s, reuse=True), scale="smoke", hooks=stream_hooks(s))
    assert racy.results["output"][0] is True, racy  # synchronized, every step is right
    assert racy.results["races"][0] is False and not racy.passed and "races" in racy.failed()
    assert "7 output(s) differ" in racy.results["races"][1] and "step 0" in racy.results["races"][1]
    fresh = katas.check("pageable_copy", _staged_lengths(s, reuse=False), scale="smoke", hooks=stream_hooks(s))
    assert fresh.results["output"][0] is True and fresh.results["races"][0] is True, fresh


def test_a_solution_that_keeps_its_first_answer_fails_at_the_second_step():
    first = {}

    def cached(s):
        return first.setdefault("v", int(s.seq_lens_cpu.sum()))  # right once, stale after
    g = katas.check("scalar_item", cached, scale="smoke")
    assert g.failed() == ["output"] and g.results["output"][1].startswith("step 1: returned ")


def test_the_values_change_every_step_on_the_device_and_the_host_mirror_alike():
    make = changing.steps_of(lambda s: (s.seq_lens.clone(), s.seq_lens_cpu.clone(), s.num_non_padded.clone(),
                                        s.accept.clone(), s.expert_ids.clone()), scale="smoke")
    step = make()
    a, b = step(0), step(1)
    assert torch.equal(a[0].cpu(), a[1]) and torch.equal(b[0].cpu(), b[1])  # device and mirror in lockstep
    assert all(not torch.equal(x.cpu(), y.cpu()) for x, y in zip(a, b)), "every input the cases read changes"
    again = make()(0)  # a fresh factory call starts from the same state
    assert all(torch.equal(x.cpu(), y.cpu()) for x, y in zip(a, again))


def test_a_tensor_where_the_reference_returns_a_number_fails_by_type():
    g = katas.check("scalar_item", lambda s: s.seq_lens_cpu.sum(), scale="smoke")
    assert g.failed() == ["output"] and "returned a tensor; the reference returns a int" in g.results["output"][1]


def test_on_cpu_without_hooks_the_race_check_says_it_could_not_run():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    g = katas.check("scalar_item", registry.get("scalar_item").fix, scale="smoke")
    assert g.results["races"] == (None, katas.NO_RUN_AHEAD) and not g.complete


def seq_lens_to_pinned_unwaited(s):
    """A racy pageable_copy solution: the copy into pinned memory is truly asynchronous, and the host
    reads the buffer before waiting for it (one call on a state the fix has just filled passes)."""
    h = target_verify(s)
    new_lens = s.seq_lens + 1
    s.d2h_pinned.copy_(new_lens, non_blocking=True)
    host_prep(s)
    draft(s, h)
    return s.d2h_pinned.clone()  # read before the copy has landed


@pytest.mark.cuda
def test_on_cuda_a_racy_solution_fails_the_grade_on_the_race_check():
    g = katas.check("pageable_copy", seq_lens_to_pinned_unwaited, scale="queued")  # 4 ms queued in each step
    assert g.results["output"][0] is True, str(g)  # with every copy waited for, it returns the right values
    assert g.results["races"][0] is False and not g.passed, str(g)
    assert "output(s) differ" in g.results["races"][1]


def test_the_steps_the_texts_name_are_the_steps_the_grade_runs():
    from pathlib import Path
    import json

    root = Path(__file__).resolve().parents[1]
    word = {6: "six", 8: "eight", 10: "ten", 12: "twelve"}[katas.GRADED_STEPS]
    assert f"over {word} steps whose values change" in (root / "docs" / "your-own-code.md").read_text()
    assert f"{word} steps whose values change every" in (root / "docs" / "headroom.md").read_text()
    cells = json.loads((root / "notebooks" / "05_your_own_code.ipynb").read_text())["cells"]
    assert any(f"over {word} steps whose values change" in "".join(c["source"]) for c in cells)
