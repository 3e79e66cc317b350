import pytest
import torch

from dspark_lab import strategies
from dspark_lab.predicate import MOE_A2A_BACKENDS, ParallelSettings, enable_num_token_non_padded


@pytest.mark.parametrize(
    "settings, expected",
    [
        (ParallelSettings(ep_size=1), False),
        (ParallelSettings(ep_size=2), True),
        (ParallelSettings(ep_size=8), True),
        (ParallelSettings(ep_size=1, moe_a2a_backend="customized"), True),
        (ParallelSettings(ep_size=1, moe_a2a_backend="deepep"), False),
        (ParallelSettings(ep_size=1, world_dp_gather=True), True),
        # DP attention + TP MoE masks pad rows on ROCm only, and only with the env switch on
        (ParallelSettings(ep_size=1, attn_dp_size=2, rocm=True), True),
        (ParallelSettings(ep_size=1, attn_dp_size=2, rocm=False), False),
        (ParallelSettings(ep_size=1, attn_dp_size=2, rocm=True, dp_mask_pad_rows=False), False),
        (ParallelSettings(ep_size=1, attn_dp_size=1, rocm=True), False),
        (ParallelSettings(ep_size=1, attn_dp_size=2, rocm=True, moe_a2a_backend="deepep"), False),
    ],
)
def test_predicate_truth_table(settings, expected):
    assert enable_num_token_non_padded(settings) is expected


def test_parallel_settings_validate():
    with pytest.raises(ValueError, match="ep_size"):
        ParallelSettings(ep_size=0)
    with pytest.raises(ValueError, match="moe_a2a_backend.*deepep"):
        ParallelSettings(moe_a2a_backend="nccl")


@pytest.mark.parametrize("name", strategies.BUILTIN)
@pytest.mark.parametrize("ep_size", [1, 2, 8])
@pytest.mark.parametrize("backend", MOE_A2A_BACKENDS)
def test_every_strategy_same_value_or_none_exactly_when_predicate_false(name, ep_size, backend):
    p = ParallelSettings(ep_size=ep_size, moe_a2a_backend=backend)
    out = strategies.get(name).fn(37, "cpu", p)
    if out is None:
        assert name.startswith("on_demand") and not enable_num_token_non_padded(p)
    else:
        assert out.dtype == torch.int32 and out.dim() == 0 and int(out) == 37
        if name.startswith("on_demand"):
            assert enable_num_token_non_padded(p)


def test_persistent_fill_writes_the_callers_buffer_in_place():
    buf = torch.zeros((), dtype=torch.int32)
    out = strategies.persistent_fill(12, "cpu", ParallelSettings(), buffer=buf)
    assert out.data_ptr() == buf.data_ptr() and int(buf) == 12
    strategies.persistent_fill(40, "cpu", ParallelSettings(), buffer=buf)
    assert int(out) == 40


def test_registry_lists_every_strategy_with_a_description_and_source():
    d = strategies.describe()
    assert set(strategies.BUILTIN) <= set(d)
    assert all(len(v) > 10 for v in d.values())
    assert "PR #34782" in d["non_blocking"] and "PR #34759" in d["on_demand"]
    with pytest.raises(ValueError, match="strategy must be one of device_direct, non_blocking"):
        strategies.get("fast")
