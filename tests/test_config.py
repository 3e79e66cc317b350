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
        ({"steps": 0}, "steps", "an integer between 1 and 100000"),
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


# -- types and bounds: every wrong value is the field-naming ValueError ----------
WRONG_TYPES = [
    ("seed", -1, "an integer between 0 and 2\\*\\*63 - 1"),
    ("seed", 2**63, "an integer between 0 and 2\\*\\*63 - 1"),
    ("seed", 1.5, "an integer between 0"),
    ("seed", "7", "an integer between 0"),
    ("seed", True, "an integer between 0"),
    ("graph", "yes", "True or False"),
    ("graph", 1, "True or False"),
    ("graph", None, "True or False"),
    ("warmup", 2.0, "an integer between 0 and 100000"),
    ("warmup", True, "an integer between 0"),
    ("warmup", -1, "an integer between 0"),
    ("warmup", "3", "an integer between 0"),
    ("target_verify_ms", "4.5", "a number between 0 and 1000"),
    ("target_verify_ms", True, "a number between 0 and 1000"),
    ("target_verify_ms", float("nan"), "a number between 0 and 1000"),
    ("target_verify_ms", 1001, "a number between 0 and 1000"),
    ("host_prep_scale", "2", "a number between 0 and 100"),
    ("host_prep_scale", False, "a number between 0 and 100"),
    ("host_prep_scale", None, "a number between 0 and 100"),
    ("host_prep_scale", -0.5, "a number between 0 and 100"),
    ("steps", 100_001, "an integer between 1 and 100000"),
    ("steps", 2.0, "an integer between 1 and 100000"),
    ("trials", 1001, "an integer between 1 and 1000"),
    ("trials", "5", "an integer between 1 and 1000"),
    ("batch_size", 8.0, "a positive integer"),
    ("batch_size", True, "a positive integer"),
    ("gamma", "4", "a positive integer"),
    ("ep_size", None, "a positive integer"),
    ("strategy", ["device_direct"], "one of device_direct"),
    ("strategy", None, "one of device_direct"),
    ("model", {"x": 1}, "one of small, tiny, medium"),
    ("workload", 3, "one of sglang_profile"),
    ("query_mode", ["gamma"], "one of gamma, gamma\\+1"),
    ("device", None, "one of auto, cpu, cuda"),
    ("moe_a2a_backend", 0, "one of none, deepep"),
    ("readback", ["lagged"], "one of lagged, none"),
]


@pytest.mark.parametrize("field, value, allowed", WRONG_TYPES)
def test_wrong_types_and_bounds_name_the_field(field, value, allowed):
    with pytest.raises(ValueError, match=rf"^{field} must be {allowed}.*; got "):
        LabConfig(**{field: value})


@pytest.mark.parametrize("field, value, allowed", WRONG_TYPES)
def test_from_dict_gives_the_same_errors(field, value, allowed):
    d = LabConfig().to_dict()
    d[field] = value
    with pytest.raises(ValueError, match=rf"^{field} must be {allowed}.*; got "):
        LabConfig.from_dict(d)


def test_from_dict_of_a_non_mapping_is_a_value_error():
    for bad in (["ep_size", 1], "ep_size=1", None, {1: 2}):
        with pytest.raises(ValueError, match="a config must be a mapping of field names"):
            LabConfig.from_dict(bad)


def test_values_at_the_bounds_are_accepted():
    c = LabConfig(seed=2**63 - 1, steps=100_000, trials=1000, warmup=0, graph=False,
                  target_verify_ms=0, host_prep_scale=100)
    assert (c.seed, c.steps, c.trials, c.graph) == (2**63 - 1, 100_000, 1000, False)
    assert LabConfig(target_verify_ms=2, host_prep_scale=1).workload_costs.target_verify_ms == 2
    assert LabConfig.from_dict(c.to_dict()) == c
