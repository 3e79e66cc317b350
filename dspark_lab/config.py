"""One frozen config for a lab run, its presets, and validation with messages that name the field."""
from __future__ import annotations

import os
from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any, Callable, Collection

from dspark_lab.predicate import MOE_A2A_BACKENDS, ParallelSettings
from dspark_lab.results.facts import strategy_table  # names without torch (registered ones included)

MODE_ENV = "DSPARK_LAB_MODE"  # "recorded" forces recorded mode (e.g. headless notebook runs)


def choose_mode() -> str:
    """"live" when a CUDA device is available and DSPARK_LAB_MODE is not "recorded", else "recorded"."""
    if os.environ.get(MODE_ENV, "").lower() == "recorded":
        return "recorded"
    try:
        import torch  # here, not at the top: validating a config needs no torch

        return "live" if torch.cuda.is_available() else "recorded"
    except Exception:  # noqa: BLE001 - a broken torch install: nothing can be measured here
        return "recorded"

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
class WorkloadCosts:
    """The costs of a workload preset around the draft step, per decode step (see model/workload.py
    for the order).

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
WORKLOAD_PRESETS: dict[str, WorkloadCosts] = {
    "sglang_profile": WorkloadCosts(4.8, 1600.0, 1000.0, 1200.0),
    # GPU-bound: the host is blocked most of the step, yet the sync costs little (little host
    # work after it for the GPU to starve on).
    "gpu_bound": WorkloadCosts(8.0, 300.0, 150.0, 50.0),
    # Host-bound: the GPU is already idle when the sync comes, so it costs almost nothing.
    "host_bound": WorkloadCosts(0.5, 4000.0, 1000.0, 1000.0),
    # Tiny: for tests and CPU runs, where the host costs are all that exists.
    "tiny": WorkloadCosts(0.2, 50.0, 20.0, 20.0),
}

MODEL_PRESETS: dict[str, ModelSize] = {
    "small": ModelSize(),
    "tiny": ModelSize(layers=1, hidden=64, heads=4, vocab=256, experts=8, top_k=2, prefix_len=32),
    "medium": ModelSize(layers=4, hidden=1024, heads=16, vocab=16384, experts=16, top_k=2, prefix_len=1024),
}


def _field_error(name: str, allowed: str, got: Any) -> ValueError:
    return ValueError(f"{name} must be {allowed}; got {got!r}")


def _positive_int(name: str, value: Any, at_most: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise _field_error(name, "a positive integer" if at_most is None else f"an integer between 1 and {at_most}", value)
    if at_most is not None and value > at_most:
        raise _field_error(name, f"an integer between 1 and {at_most}", value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    """int or float, not bool (True would pass as 1 and hide a swapped argument)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _real_between(name: str, value: Any, lo: float, hi: float) -> None:
    # `not (lo <= v <= hi)` also rejects NaN.
    if not _is_real(value) or not (lo <= value <= hi):
        raise _field_error(name, f"a number between {lo:g} and {hi:g}", value)


def _one_of(name: str, value: Any, allowed) -> None:
    # `value in allowed` on an unhashable value (a list from a JSON file) would raise TypeError,
    # and a dict lookup would too; a string check first keeps the error the field-naming one.
    if not isinstance(value, str) or value not in allowed:
        raise _field_error(name, f"one of {', '.join(allowed)}", value)


# Upper bounds that stop accidents (a typo'd 1e6, an extra zero), not real experiments: a point's
# steps run trials x strategies times, so 100000 steps is already hours at the default sizes, and
# 1000 trials is far past where the CI on the median stops narrowing usefully.
MAX_STEPS = 100_000
MAX_WARMUP = 100_000
MAX_TRIALS = 1000
MAX_GAMMA = 64
# How long a rank waits to join the group, and for any one collective, before it fails (no hang).
DEFAULT_TIMEOUT_S = 120.0
SEED_LIMIT = 2**63  # torch.manual_seed takes a 64-bit seed; keep it in the signed range
READBACKS = ("lagged", "none")


def _about(default: Any, help: str, *, choices: Collection | Callable[[], Collection] | None = None,
           range: tuple | None = None, metavar: str | None = None, help_off: str | None = None) -> Any:
    """A LabConfig field with what the command line says of it and what it allows, said here once:
    `help` (a "{default}" in it is replaced by the default; else the CLI appends one), `choices` (a
    collection read when asked, or a function for a registry that can grow), `range` ((lo, hi) inclusive, hi None: no
    bound), `metavar`, and for a bool the help of its --no- flag (`help_off`)."""
    facts = {"help": help, "choices": choices, "range": range, "metavar": metavar, "help_off": help_off}
    return field(default=default, metadata={k: v for k, v in facts.items() if v is not None})


def choices_of(f: Field) -> tuple | None:
    """A field's allowed values, or None where any value of its type in its range goes."""
    allowed = f.metadata.get("choices")
    if allowed is None:
        return None
    return tuple(allowed() if callable(allowed) else allowed)


def type_of(f: Field) -> type:
    """The field's value type (its annotation is a string: `from __future__ import annotations`)."""
    return {"int": int, "float": float, "bool": bool, "str": str}[f.type.split(" |")[0]]


@dataclass(frozen=True)
class LabConfig:
    ep_size: int = _about(1, "MoE EP size (a divisor of the model's expert count)", range=(1, None))
    batch_size: int = _about(8, "batch size (padded up to a capture bucket)", range=(1, CAPTURE_BUCKETS[-1]))
    gamma: int = _about(4, "draft block size", range=(1, MAX_GAMMA))
    strategy: str = _about(strategy_table.BASELINE, "allocation strategy of num_token_non_padded",
                           choices=strategy_table.names)
    model: str = _about("small", "draft model size preset", choices=MODEL_PRESETS)
    workload: str = _about("sglang_profile", "work around the draft step: sglang_profile mimics PR #34782's "
                           "8.4 ms step; gpu_bound / host_bound show when the sync costs little; tiny is for "
                           "tests and CPU", choices=WORKLOAD_PRESETS)
    # Overrides of the workload preset's costs (target_verify_ms None keeps the preset's; the scale
    # multiplies all three host-prep costs).
    target_verify_ms: float | None = _about(None, "override the workload's target-verify GPU time",
                                            range=(0, 1000), metavar="MS")
    host_prep_scale: float = _about(1.0, "multiply the workload's host-prep costs", range=(0, 100), metavar="X")
    query_mode: str = _about("gamma", "rows per request in the draft forward", choices=QUERY_MODES)
    graph: bool = _about(True, "replay the draft forward as a CUDA graph (default; CPU runs eagerly)",
                         help_off="run the draft forward eagerly")
    device: str = _about("auto", "where to run: auto picks cuda when available", choices=DEVICES)
    steps: int = _about(60, "timed steps per trial", range=(1, MAX_STEPS))
    warmup: int = _about(10, "untimed warm-up steps per trial", range=(0, MAX_WARMUP))
    trials: int = _about(5, "trials per strategy and point (interleaved across strategies)", range=(1, MAX_TRIALS))
    seed: int = _about(0, "random seed", range=(0, SEED_LIMIT - 1))
    moe_a2a_backend: str = _about("none", "MoE all-to-all backend (customized turns the predicate on at EP 1)",
                                  choices=MOE_A2A_BACKENDS)
    # see model/workload.py: how the step's result returns to the host
    readback: str = _about("lagged", "how a step's result returns to the host (default: {default}, as "
                           "SGLang's overlap scheduler)", choices=READBACKS)

    def __post_init__(self) -> None:
        # Integers, each with its own wording of what is allowed.
        _positive_int("batch_size", self.batch_size)
        _positive_int("gamma", self.gamma)
        _positive_int("ep_size", self.ep_size)
        _positive_int("steps", self.steps, at_most=MAX_STEPS)
        _positive_int("trials", self.trials, at_most=MAX_TRIALS)
        if not _is_int(self.warmup) or not (0 <= self.warmup <= MAX_WARMUP):
            raise _field_error("warmup", f"an integer between 0 and {MAX_WARMUP}", self.warmup)
        if not _is_int(self.seed) or not (0 <= self.seed < SEED_LIMIT):
            raise _field_error("seed", "an integer between 0 and 2**63 - 1", self.seed)
        if not isinstance(self.graph, bool):
            raise _field_error("graph", "True or False", self.graph)
        # Names and real numbers, from the fields' own choices and ranges.
        for f in fields(self):
            value, allowed, bounds = getattr(self, f.name), choices_of(f), f.metadata.get("range")
            if allowed is not None:
                _one_of(f.name, value, allowed)
            elif type_of(f) is float and not (value is None and f.default is None):
                _real_between(f.name, value, *bounds)
        # Across fields.
        experts = MODEL_PRESETS[self.model].experts
        if experts % self.ep_size:
            divisors = [d for d in range(1, experts + 1) if experts % d == 0]
            raise _field_error(
                "ep_size", f"a positive divisor of the model's {experts} experts ({divisors})", self.ep_size
            )
        if self.batch_size > CAPTURE_BUCKETS[-1]:
            raise _field_error("batch_size", f"at most {CAPTURE_BUCKETS[-1]} (largest capture bucket)", self.batch_size)
        if self.gamma > MAX_GAMMA:
            raise _field_error("gamma", f"between 1 and {MAX_GAMMA}", self.gamma)
        if self.device == "cuda":
            import torch  # here, not at the top: validating a config needs no torch

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
    def workload_costs(self) -> WorkloadCosts:
        w = WORKLOAD_PRESETS[self.workload]
        s = self.host_prep_scale
        return WorkloadCosts(
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
        if not isinstance(d, dict) or not all(isinstance(k, str) for k in d):
            raise ValueError(f"a config must be a mapping of field names to values; got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown config field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)


FIELDS: dict[str, Field] = {f.name: f for f in fields(LabConfig)}  # name -> field (its metadata: _about)
