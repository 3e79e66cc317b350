"""The platform card measured on this GPU (CUDA; the settings checks run on CPU): the cells whose behaviour the CUDA
documentation fixes: a pinned 4-byte non-blocking H2D copy returns at once, a copy into pageable
host memory waits for the queue, and what waits is seen as a sync."""
import pytest
import torch

from dspark_lab.results.analyses import card as C


def test_without_cuda_the_card_says_why():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from dspark_lab.measure import card as measure_card

    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        measure_card.measure_card()


@pytest.mark.cuda
def test_pinned_h2d_returns_at_once_and_pageable_d2h_waits():
    from dspark_lab.measure import card as measure_card

    card = C.validate(measure_card.measure_card(sizes=(4,), queued_ms=(0.0, 10.0), reps=3,
                                                sources=["pinned_to_nb", "into_pageable_nb", "tensor_device"]))
    f = C.frame(card)
    assert C.cell(f, "h2d", "pinned_to_nb", 4)["verdict"] == C.AT_ONCE
    assert C.cell(f, "d2h", "into_pageable_nb", 4)["verdict"] == C.WAITS
    direct = C.cell(f, "h2d", "tensor_device", 4)
    assert direct["verdict"] == C.WAITS and direct["trace_syncs"] >= 1 and direct["debug_syncs"] >= 1
    assert C.cell(f, "h2d", "pinned_to_nb", 4)["trace_syncs"] == 0


@pytest.mark.parametrize("kwargs, named", [
    ({"reps": 0}, "reps must be a positive integer"), ({"sizes": (3,)}, "sizes must be byte counts"),
    ({"queued_ms": (0.0,)}, "queued_ms must hold numbers >= 0, one of them > 0"),
    ({"sources": ["carrier_pigeon"]}, "sources: each must be one of pageable_to_nb"),
    ({"primitive_reps": 2}, "primitive_reps must be None or an integer >= 3")])
def test_bad_card_settings_name_the_field_before_any_gpu_work(kwargs, named):
    from dspark_lab.measure import card as measure_card

    with pytest.raises(ValueError, match=named):
        measure_card.measure_card(**kwargs)
