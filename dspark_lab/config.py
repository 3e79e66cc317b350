"""One frozen config for a lab run, its presets, and validation with messages that name the field."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from . import strategies
from .predicate import MOE_A2A_BACKENDS, ParallelSettings

# SGLang's draft forward runs ONE forward over `gamma` rows per request (or gamma + 1).
QUERY_MODES = ("gamma", "gamma+1")
DEVICES = ("auto", "cpu", "cuda")

# Batch sizes are padded up to one of these CUDA-graph capture buckets, as SGLang's graph runner
# does (its default list is 1, 2, 4, 8, then steps of 8 up to 256 and coarser beyond).
CAPTURE_BUCKETS = (1, 2, 4, 8) + tuple(range(16, 257, 8))


@dataclass(frozen=True)
class ModelSize:
    """The small draft model: a few attention + MoE layers over a KV prefix."""

    layers: int = 2
    hidden: int = 512
    heads: int = 8
    vocab: int = 4096
    experts: int = 8
    top_k: int = 2
    prefix_len: int = 256  # KV prefix each request attends to (longest seq_len)


@dataclass(frozen=True)
class Workload:
    """The work around the draft step, per decode step (see workload.py for the order).

    Host costs are wall-clock microseconds of host-side batch preparation; the target verify is
    GPU work queued ahead of the draft step, its duration calibrated on the current GPU.
    """

    target_verify_ms: float = 4.5
    prep_before_target_us: float = 2600.0
    draft_prep_us: float = 1000.0  # between the target-verify launch and the scalar
    post_scalar_us: float = 1200.0  # between the scalar and the draft launch


# "sglang_profile" stands for PR #34782's profile: an 8.4 ms step with device-direct, ~3.5 ms of
# it (42%) with the host blocked in the scalar's stream sync. With the GPU idle at the start of a
# step (the draft graph is short), a device-direct step is about
#   prep_before_target + target_verify + post_scalar + launches = 1.6 + 4.8 + 1.2 + ~0.8 = 8.4 ms
# and the host is blocked for about target_verify - draft_prep - launches = 4.8 - 1.0 - ~0.3 = 3.5 ms.
# (~0.8 ms of launches and bookkeeping per step was measured on an H200: a first version with
# 2.6 / 4.5 / 1.0 / 1.2 gave 9.1 ms device-direct steps with 3.2 ms blocked.)
WORKLOAD_PRESETS: dict[str, Workload] = {
    "sglang_profile": Workload(4.8, 1600.0, 1000.0, 1200.0),
    # GPU-bound: the host is blocked most of the step, yet the sync costs little (little host
    # work after it for the GPU to starve on).
    "gpu_bound": Workload(8.0, 300.0, 150.0, 50.0),
    # Host-bound: the GPU is already idle when the sync comes, so it costs almost nothing.
    "host_bound": Workload(0.5, 4000.0, 1000.0, 1000.0),
    # Tiny: for tests and CPU runs, where the host costs are all that exists.
    "tiny": Workload(0.2, 50.0, 20.0, 20.0),
}

MODEL_PRESETS: dict[str, ModelSize] = {
    "small": ModelSize(),
    "tiny": ModelSize(layers=1, hidden=64, heads=4, vocab=256, experts=8, top_k=2, prefix_len=32),
    "medium": ModelSize(layers=4, hidden=1024, heads=16, vocab=16384, experts=16, top_k=2, prefix_len=1024),
}


def _field_error(name: str, allowed: str, got: Any) -> ValueError:
    return ValueError(f"{name} must be {allowed}; got {got!r}")


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise _field_error(name, "a positive integer", value)


@dataclass(frozen=True)
class LabConfig:
    ep_size: int = 1
    batch_size: int = 8
    gamma: int = 4
    strategy: str = "device_direct"
    model: str = "small"
    workload: str = "sglang_profile"
    # Workload overrides (None keeps the preset's value).
    target_verify_ms: float | None = None
    host_prep_scale: float = 1.0  # multiplies all three host-prep costs
    query_mode: str = "gamma"
    graph: bool = True  # CUDA-graph replay of the draft forward (CUDA only; CPU runs eagerly)
    device: str = "auto"
    steps: int = 60
    warmup: int = 10
    trials: int = 5
    seed: int = 0
    moe_a2a_backend: str = "none"
    readback: str = "lagged"  # see workload.py: how the step's result returns to the host

    def __post_init__(self) -> None:
        _positive_int("batch_size", self.batch_size)
        _positive_int("gamma", self.gamma)
        _positive_int("ep_size", self.ep_size)
        _positive_int("steps", self.steps)
        _positive_int("trials", self.trials)
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise _field_error("warmup", "an integer >= 0", self.warmup)
        if self.model not in MODEL_PRESETS:
            raise _field_error("model", f"one of {', '.join(MODEL_PRESETS)}", self.model)
        if self.workload not in WORKLOAD_PRESETS:
            raise _field_error("workload", f"one of {', '.join(WORKLOAD_PRESETS)}", self.workload)
        experts = MODEL_PRESETS[self.model].experts
        if experts % self.ep_size:
            divisors = [d for d in range(1, experts + 1) if experts % d == 0]
            raise _field_error(
                "ep_size", f"a positive divisor of the model's {experts} experts ({divisors})", self.ep_size
            )
        if self.batch_size > CAPTURE_BUCKETS[-1]:
            raise _field_error("batch_size", f"at most {CAPTURE_BUCKETS[-1]} (largest capture bucket)", self.batch_size)
        if self.gamma > 64:
            raise _field_error("gamma", "between 1 and 64", self.gamma)
        strategies.get(self.strategy)  # raises naming the known strategies
        if self.query_mode not in QUERY_MODES:
            raise _field_error("query_mode", f"one of {', '.join(QUERY_MODES)}", self.query_mode)
        if self.device not in DEVICES:
            raise _field_error("device", f"one of {', '.join(DEVICES)}", self.device)
        if self.moe_a2a_backend not in MOE_A2A_BACKENDS:
            raise _field_error("moe_a2a_backend", f"one of {', '.join(MOE_A2A_BACKENDS)}", self.moe_a2a_backend)
        if self.readback not in ("lagged", "none"):
            raise _field_error("readback", "one of lagged, none", self.readback)
        if self.target_verify_ms is not None and not (0 <= self.target_verify_ms <= 1000):
            raise _field_error("target_verify_ms", "between 0 and 1000", self.target_verify_ms)
        if not (0 <= self.host_prep_scale <= 100):
            raise _field_error("host_prep_scale", "between 0 and 100", self.host_prep_scale)
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise _field_error("device", "'cpu' or 'auto' on this machine (no CUDA device is available)", "cuda")

    # -- derived -------------------------------------------------------------------------
    @property
    def query_token_num(self) -> int:
        return self.gamma + (1 if self.query_mode == "gamma+1" else 0)

    @property
    def bucket_batch_size(self) -> int:
        return next(b for b in CAPTURE_BUCKETS if b >= self.batch_size)

    @property
    def num_tokens(self) -> int:
        """Real (non-padded) rows of the draft forward: the value of num_token_non_padded."""
        return self.batch_size * self.query_token_num

    @property
    def model_size(self) -> ModelSize:
        return MODEL_PRESETS[self.model]

    @property
    def workload_costs(self) -> Workload:
        w = WORKLOAD_PRESETS[self.workload]
        s = self.host_prep_scale
        return Workload(
            self.target_verify_ms if self.target_verify_ms is not None else w.target_verify_ms,
            w.prep_before_target_us * s,
            w.draft_prep_us * s,
            w.post_scalar_us * s,
        )

    @property
    def parallel(self) -> ParallelSettings:
        return ParallelSettings(ep_size=self.ep_size, moe_a2a_backend=self.moe_a2a_backend)

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def with_(self, **changes: Any) -> "LabConfig":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LabConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)
