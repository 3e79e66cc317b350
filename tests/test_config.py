import pytest

from dspark_lab.config import LabConfig


@pytest.mark.parametrize(
    "kwargs, field, allowed",
    [
        ({"batch_size": 0}, "batch_size", "positive integer"),
        ({"batch_size": -3}, "batch_size", "positive integer"),
        ({"gamma": 0}, "gamma", "positive integer"),
        ({"ep_size": 3}, "ep_size", r"divisor of the model's 8 experts \(\[1, 2, 4, 8\]\)"),
        ({"ep_size": 0}, "ep_size", "positive integer"),
        ({"strategy": "magic"}, "strategy", "one of device_direct, non_blocking, on_demand"),
        ({"model": "huge"}, "model", "one of small, tiny, medium"),
        ({"workload": "x"}, "workload", "one of sglang_profile"),
        ({"device": "tpu"}, "device", "one of auto, cpu, cuda"),
        ({"steps": 0}, "steps", "positive integer"),
        ({"batch_size": 1000}, "batch_size", "at most 256"),
    ],
)
def test_bad_values_name_the_field_and_what_is_allowed(kwargs, field, allowed):
    with pytest.raises(ValueError, match=rf"{field} must be .*{allowed}"):
        LabConfig(**kwargs)


def test_cuda_where_none_exists_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'auto' on this machine"):
        LabConfig(device="cuda")


def test_derived_sizes_pad_to_capture_buckets():
    c = LabConfig(batch_size=5, gamma=4)
    assert (c.bucket_batch_size, c.num_tokens, c.query_token_num) == (8, 20, 4)
    assert LabConfig(batch_size=17, gamma=2, query_mode="gamma+1").bucket_batch_size == 24
    assert LabConfig(batch_size=17, gamma=2, query_mode="gamma+1").num_tokens == 51


def test_round_trip_and_unknown_fields():
    c = LabConfig(ep_size=8, batch_size=32)
    assert LabConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="unknown config field"):
        LabConfig.from_dict({"ep": 8})
