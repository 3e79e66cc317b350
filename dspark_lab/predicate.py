"""When SGLang reads `num_token_non_padded`: a pure function of explicit parallel settings.

SGLang 0.5.23 (`forward_batch_info.enable_num_token_non_padded`) reads process-global state
(`get_parallel()`, the MoE all-to-all backend, an env var, the ROCm flag). The lab takes the
same inputs as one frozen record so the predicate can be tabulated and tested; the conformance
check in `sglang_adapter` compares the two on an installed SGLang.
"""
from __future__ import annotations

from dataclasses import dataclass

# SGLang's MoeA2ABackend values that the lab models; only CUSTOMIZED changes the predicate.
MOE_A2A_BACKENDS = ("none", "deepep", "mooncake", "nixl", "customized")
# How the MoE joins expert-parallel ranks (model/dispatch.py has the three ways).
DISPATCH_MODES = ("allreduce", "a2a_fixed", "a2a_dynamic")


@dataclass(frozen=True)
class ParallelSettings:
    """The parallel settings the predicate depends on (SGLang names in comments)."""

    ep_size: int = 1  # get_parallel().moe_ep_size
    moe_a2a_backend: str = "none"  # get_moe_a2a_backend()
    world_dp_gather: bool = False  # world_dp_gather_enabled(): DP gather after an elastic-EP scale-up
    attn_dp_size: int = 1  # get_parallel().attn_dp_size
    rocm: bool = False  # _is_hip
    dp_mask_pad_rows: bool = True  # env SGLANG_DP_MASK_PAD_ROWS (default true)

    def __post_init__(self) -> None:
        if not isinstance(self.ep_size, int) or isinstance(self.ep_size, bool) or self.ep_size < 1:
            raise ValueError(f"ep_size must be a positive integer, got {self.ep_size!r}")
        if self.moe_a2a_backend not in MOE_A2A_BACKENDS:
            raise ValueError(
                f"moe_a2a_backend must be one of {', '.join(MOE_A2A_BACKENDS)}; got {self.moe_a2a_backend!r}"
            )
        if not isinstance(self.attn_dp_size, int) or self.attn_dp_size < 1:
            raise ValueError(f"attn_dp_size must be a positive integer, got {self.attn_dp_size!r}")


def enable_num_token_non_padded(p: ParallelSettings) -> bool:
    """True when a consumer (the MoE top-k) reads the device scalar.

    Releases before 0.5.23 checked `moe_ep_size > 1` alone (PR #34759's fix). 0.5.23 adds:
    world DP gather after an elastic-EP scale-up, a customized MoE all-to-all backend, and on
    ROCm only, DP attention with TP MoE masking its pad rows.
    """
    if p.ep_size > 1 or p.world_dp_gather or p.moe_a2a_backend == "customized":
        return True
    return p.rocm and p.dp_mask_pad_rows and p.attn_dp_size > 1 and p.moe_a2a_backend == "none"
