"""A sweep's spec: the grid over EP size x batch size x gamma x strategy around one base LabConfig,
its presets and the run kind it records. Torch-free: the command line builds its options and
checks a resumed header from it without loading the measurement (run/sweep.py runs a spec)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from collections.abc import Iterator, Mapping
from typing import Any, Sequence

from dspark_lab.config import LabConfig
from dspark_lab.results.facts import strategy_table
from dspark_lab.results.rules.selection import REFERENCE

GRID_FIELDS = ("ep_size", "batch_size", "gamma", "strategy")


class SweepSpecError(ValueError):
    """A bad sweep value; `.field` names the grid or config field it concerns."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class ResumeError(RuntimeError):
    """A run file cannot be resumed as asked (another machine, another sweep)."""


# ---------------------------------------------------------------------------------------------
# The spec
# ---------------------------------------------------------------------------------------------
def _dedupe(values: Sequence) -> tuple:
    out: list = []
    for v in values:
        if v not in out:
            out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class SweepSpec:
    """The grid and the base config. Every other LabConfig field (model, workload, steps,
    trials, warmup, graph, device, ...) comes from `base`; its ep_size, batch_size, gamma and
    strategy are replaced by the grid's."""

    ep_sizes: tuple[int, ...] = (1, 8)
    batch_sizes: tuple[int, ...] = (1, 8, 32, 128)
    gammas: tuple[int, ...] = (2, 4, 8)
    strategies: tuple[str, ...] = field(default_factory=strategy_table.names)  # the table's when made
    base: LabConfig = field(default_factory=LabConfig)

    def __post_init__(self) -> None:
        for name, attr in (("ep_size", "ep_sizes"), ("batch_size", "batch_sizes"),
                           ("gamma", "gammas"), ("strategy", "strategies")):
            values = getattr(self, attr)
            if isinstance(values, (str, int)):
                values = (values,)
            values = _dedupe(tuple(values))
            if not values:
                raise SweepSpecError(name, f"{name}: the sweep needs at least one value")
            object.__setattr__(self, attr, values)
        if not isinstance(self.base, LabConfig):
            raise SweepSpecError("base", f"base must be a LabConfig; got {type(self.base).__name__}")
        # Every value on its own axis must make a valid config (errors name the field).
        for name, values in (("strategy", self.strategies), ("ep_size", self.ep_sizes),
                             ("batch_size", self.batch_sizes), ("gamma", self.gammas)):
            for v in values:
                try:
                    self.base.with_(**{name: v})
                except ValueError as e:
                    raise SweepSpecError(name, str(e)) from None

    # -- the grid ----------------------------------------------------------------------------
    def points(self) -> list[LabConfig]:
        """One config per (ep, batch, gamma), its strategy the sweep's first (measure_point
        takes the strategy list)."""
        return [
            self.base.with_(ep_size=ep, batch_size=bs, gamma=g, strategy=self.strategies[0])
            for ep in self.ep_sizes for bs in self.batch_sizes for g in self.gammas
        ]

    def __len__(self) -> int:
        return len(self.ep_sizes) * len(self.batch_sizes) * len(self.gammas)

    @property
    def n_rows(self) -> int:
        return len(self) * len(self.strategies) * self.base.trials

    def with_(self, **changes: Any) -> "SweepSpec":
        """A copy with grid fields (ep_sizes, ...) and/or base config fields (steps, model, ...) changed."""
        grid = {f.name for f in fields(self)} - {"base"}
        base_changes = {k: v for k, v in changes.items() if k not in grid}
        d = {k: v for k, v in changes.items() if k in grid}
        if base_changes:
            try:
                d["base"] = self.base.with_(**base_changes)
            except TypeError as e:
                raise SweepSpecError("base", str(e)) from None
            except ValueError as e:
                raise SweepSpecError(_field_of(e, base_changes), str(e)) from None
        return SweepSpec(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **d})

    # -- (de)serialization for the run header ------------------------------------------------
    def to_dict(self) -> dict:
        base = self.base.to_dict()
        for k in GRID_FIELDS:
            base.pop(k, None)
        return {
            "ep_size": list(self.ep_sizes),
            "batch_size": list(self.batch_sizes),
            "gamma": list(self.gammas),
            "strategy": list(self.strategies),
            "base": base,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "SweepSpec":
        """The spec a run header records; SweepSpecError (a ValueError) for any spec of the wrong shape."""
        try:
            if not isinstance(d, dict):
                raise TypeError(f"a sweep spec must be an object, got {type(d).__name__}")
            base = LabConfig.from_dict(dict(d.get("base", {})))
            return cls(
                ep_sizes=tuple(d["ep_size"]), batch_sizes=tuple(d["batch_size"]),
                gammas=tuple(d["gamma"]), strategies=tuple(d["strategy"]), base=base,
            )
        except KeyError as e:
            raise SweepSpecError(str(e.args[0]), f"sweep spec lacks {e.args[0]!r}") from None
        except (TypeError, AttributeError) as e:  # a tampered header: a number for a list, null, a list for base
            raise SweepSpecError("sweep", f"sweep spec of the wrong shape ({e})") from None

    def describe(self) -> str:
        b = self.base
        return (
            f"EP {_fmt(self.ep_sizes)} x batch {_fmt(self.batch_sizes)} x gamma {_fmt(self.gammas)} "
            f"x {len(self.strategies)} strategies = {len(self)} points; model {b.model}, workload "
            f"{b.workload}, {b.trials} trials x {b.steps} steps (+{b.warmup} warm-up), "
            f"graph {'on' if b.graph else 'off'}, device {b.device}"
        )


def _fmt(values: Sequence) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def _field_of(err: ValueError, candidates: dict) -> str:
    msg = str(err)
    for name in candidates:
        if msg.startswith(name + " "):
            return name
    return next(iter(candidates), "base")


# The default sweep is sized to its budget on an H200 (results.facts.time_budgets.DEFAULT_SWEEP:
# every point x every strategy of the table, checked against the newest recorded default sweep
# scaled to the table's strategy count); 4 interleaved trials per strategy give each point a
# median with a confidence interval. (With the strategies of that day, 24 steps per trial took
# 181 s on an H200, 30 steps 224 s.)
DEFAULT_SWEEP = SweepSpec(base=LabConfig(steps=20, warmup=4, trials=4))
QUICK_SWEEP = SweepSpec(
    ep_sizes=(1, 8), batch_sizes=(1, 32), gammas=(4,),
    base=LabConfig(steps=30, warmup=5, trials=3),
)


class _Presets(Mapping):
    """name -> preset, over every strategy of the table when it is read (a strategy registered since
    import is in it; with none, the preset itself)."""

    def __init__(self, specs: dict[str, SweepSpec]):
        self._specs = specs

    def __getitem__(self, name: str) -> SweepSpec:
        spec, now = self._specs[name], strategy_table.names()
        return spec if spec.strategies == now else spec.with_(strategies=now)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


PRESETS: Mapping[str, SweepSpec] = _Presets({"default": DEFAULT_SWEEP, "quick": QUICK_SWEEP})
PRESET_KINDS = {"default": "default_sweep", "quick": "quick_sweep"}  # preset -> its run kind (results.facts.run_kinds)


# The reference point measured to the headline's own standard (results/query/headline.py: a CI needs
# noise.MIN_QUIET_ROUNDS quiet rounds, and the stop rule waits for them): after its sweep the main job
# measures it on, interleaved, until the headline CI half-width is at most this or the cap passes.
# (The three H200 reference runs of 2026-12-01 stopped at 3% after 10 rounds, about 20 s each.)
REFERENCE_TARGET_CI_PCT = 3.0
REFERENCE_TIME_CAP_S = 40.0


def reference_spec(spec: SweepSpec) -> SweepSpec:
    """The headline's reference point (results REFERENCE: its workload, batch size and gamma, at the
    sweep's largest EP size) over `spec`'s strategies and base config."""
    if max(spec.ep_sizes) < 2:
        raise SweepSpecError("ep_size", f"the reference point needs an EP size above 1; the sweep has {list(spec.ep_sizes)}")
    return spec.with_(ep_sizes=(max(spec.ep_sizes),), batch_sizes=(REFERENCE.batch_size,), gammas=(REFERENCE.gamma,),
                      workload=REFERENCE.workload)


def run_kind(spec: SweepSpec, *, adaptive: bool = False) -> str:
    """The kind of run a sweep of `spec` records: the preset's whose grid it measures, else a reference
    point (one point measured to a target CI), a sweep (two points or more) or one point."""
    def grid(s: SweepSpec) -> tuple:
        return s.ep_sizes, s.batch_sizes, s.gammas

    preset = next((name for name, p in PRESETS.items() if grid(p) == grid(spec)), None)
    if preset is not None:
        return PRESET_KINDS[preset]
    if len(spec) > 1:
        return "sweep"
    return "reference" if adaptive else "single_point"
