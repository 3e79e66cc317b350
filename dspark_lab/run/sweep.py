"""A sweep: a grid over EP size x batch size x gamma x strategy around one base LabConfig.

Each grid point (ep, batch, gamma) is measured by ONE `measure_point` call with all the sweep's
strategies, so their trials are interleaved (A B C A B C ...) and host noise does not pass for a
difference between strategies. Points go to a RunWriter as they finish; a point already complete
in the file is skipped (resume); a point that raises is recorded as failed and the sweep goes on;
Ctrl-C stops the sweep with every finished point on disk.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

from dspark_lab.results.record import schema
from dspark_lab import strategies as strategies_mod
from dspark_lab.results.record import rows as rowbuild
from dspark_lab.config import LabConfig
from dspark_lab.results.record.store import machine_differences
from dspark_lab.run import baseline, point

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
    strategies: tuple[str, ...] = strategies_mod.BUILTIN
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


# The default sweep is sized to finish in under 3 minutes on an H200 (24 points x 5 strategies);
# 4 interleaved trials per strategy give each point a median with a confidence interval.
# (24 steps per trial took 181 s on an H200, 30 steps 224 s.)
DEFAULT_SWEEP = SweepSpec(base=LabConfig(steps=20, warmup=4, trials=4))
QUICK_SWEEP = SweepSpec(
    ep_sizes=(1, 8), batch_sizes=(1, 32), gammas=(4,),
    base=LabConfig(steps=30, warmup=5, trials=3),
)
PRESETS: dict[str, SweepSpec] = {"default": DEFAULT_SWEEP, "quick": QUICK_SWEEP}
PRESET_KINDS = {"default": "default_sweep", "quick": "quick_sweep"}  # preset -> its run kind (results.facts.run_kinds)


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


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------
@dataclass
class SweepSummary:
    total: int = 0  # points in the grid
    skipped: int = 0  # already complete in the file (resume)
    measured: int = 0  # measured now, ok
    failed: int = 0  # measured now, recorded as failed
    failures: list[tuple[str, str]] = field(default_factory=list)  # (point label, error)

    def note_failure(self, label: str, error: Exception) -> str:
        """Count a point recorded as failed; the line that says so."""
        msg = f"{type(error).__name__}: {error}"
        self.failed += 1
        self.failures.append((label, msg))
        return f"point {label} failed and was recorded as failed: {msg.splitlines()[0] if msg else ''}"

    def __str__(self) -> str:
        return f"{self.measured} measured, {self.failed} failed, {self.skipped} already recorded, of {self.total} points"


def progress_label(cfg: LabConfig) -> str:
    """The point as the progress bar and the failure lines name it ("ep=1 bs=8 gamma=4")."""
    return f"ep={cfg.ep_size} bs={cfg.batch_size} gamma={cfg.gamma}"


def check_resume(writer, spec: SweepSpec, fingerprint: dict | None) -> None:
    """Refuse to resume a run on another machine or with another sweep (it would mix them)."""
    if fingerprint is not None:
        diff = machine_differences(writer.fingerprint, fingerprint)
        if diff:
            was = ", ".join(f"{k}={writer.fingerprint.get(k)}" for k in diff)
            now = ", ".join(f"{k}={fingerprint.get(k)}" for k in diff)
            raise ResumeError(f"{writer.path} was recorded on {was}; this machine has {now}. "
                              "Resuming would mix machines in one run: start a new run instead")
    recorded = writer.sweep
    if recorded:
        try:
            same = SweepSpec.from_dict(recorded) == spec
            desc = SweepSpec.from_dict(recorded).describe()
        except ValueError as e:
            raise ResumeError(f"{writer.path}: its recorded sweep cannot be read by this version ({e})") from None
        if not same:
            raise ResumeError(f"{writer.path} records another sweep ({desc}); asked for: {spec.describe()}. "
                              "Resume without grid options, or start a new run")


def run_sweep(
    spec: SweepSpec,
    writer,
    measure: Callable | None = None,
    progress: bool = True,
    *,
    retry_failed: bool = False,
    save_traces: bool = False,
    point_id: Callable[[LabConfig], str] | None = None,
    failed_rows: Callable | None = None,
    log: Callable[[str], None] | None = None,
) -> SweepSummary:
    """Measure every point of `spec` not yet complete in `writer`'s file.

    measure(cfg, strategies, on_progress=...) -> PointResult (.rows, .timelines, .traces);
    default run.point.measure_point. A point that raises an Exception (a torch OOM included) is
    written as failed rows and the sweep goes on; KeyboardInterrupt propagates after the bar is
    closed, every finished point being already on disk (each is fsynced as it is written).
    """
    measure = measure or point.measure_point
    failed_rows = failed_rows or point.failed_rows
    tqdm = _progress_class()
    say = _say(log, tqdm if progress else None)
    summary = SweepSummary(total=len(spec))
    todo = _pending(spec, writer, point_id or point.point_id, retry_failed)
    summary.skipped = summary.total - len(todo)
    if summary.skipped:
        say(f"resume: {summary.skipped} of {summary.total} points already recorded in {writer.path}")
    strategies = list(spec.strategies)
    bar = _open_bar(tqdm, len(todo), progress)
    try:
        for i, (cfg, pid) in enumerate(todo):
            label = progress_label(cfg)
            bar.set_postfix_str(label)
            try:
                result = measure(cfg, strategies, on_progress=_on_progress(bar, i, label))
                rows = [dict(r, point_id=pid) for r in result.rows]
                timelines = [dict(t, point_id=pid) for t in (getattr(result, "timelines", None) or [])]
            except Exception as e:  # noqa: BLE001 - a failed point is recorded, the sweep goes on
                _free_cuda_memory()
                writer.write_point(pid, _failed_point_rows(cfg, pid, strategies, e, failed_rows), [], status="failed")
                say(summary.note_failure(label, e))
            else:
                _write_point(writer, pid, rows, timelines, getattr(result, "traces", None) if save_traces else None)
                summary.measured += 1
            bar.update(max(i + 1 - bar.n, 0.0))
    finally:
        bar.close()
    return summary


def _say(log: Callable[[str], None] | None, tqdm) -> Callable[[str], None]:
    """The sweep's message lines: to `log` where given, else above the bar (none without progress)."""
    def say(msg: str) -> None:
        if log is not None:
            log(msg)
        elif tqdm is not None:
            tqdm.write(msg, file=sys.stderr)

    return say


def _write_point(writer, pid: str, rows: list, timelines: list, traces: dict | None) -> None:
    """A measured point on disk: its rows and timelines, its traces where asked for."""
    writer.write_point(pid, rows, timelines, status="ok")
    baseline.keep(writer.fingerprint, rows)  # the machine's quietest host work here, for lone runs
    if traces:
        writer.write_traces(pid, traces)


def _progress_class():
    try:
        from tqdm.auto import tqdm  # optional: a bare GPU box has plain lines instead of a bar
    except ImportError:
        return _PlainProgress
    return tqdm


def _open_bar(tqdm, total: int, progress: bool):
    """The sweep's bar, in points (fractions while a point runs); a log gets a line each 15 s."""
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    return tqdm(total=total, unit="point", disable=not progress, dynamic_ncols=True, desc="sweep",
                file=sys.stderr, mininterval=0.5 if tty else 15.0,
                bar_format="{l_bar}{bar}| {n:.1f}/{total:.0f} points [{elapsed}<{remaining}]{postfix}")


def _pending(spec: SweepSpec, writer, point_id: Callable[[LabConfig], str], retry_failed: bool) -> list:
    """(config, point id) of each point not yet complete in the file (resume), in grid order."""
    todo = [(cfg, point_id(cfg)) for cfg in spec.points()]
    return [(cfg, pid) for cfg, pid in todo if not writer.is_complete(pid, retry_failed=retry_failed)]


def _on_progress(bar, done: int, label: str) -> Callable[[str, float], None]:
    """measure's progress callback for the point after `done` finished ones: the bar moves within it."""
    def on_progress(message: str, fraction: float) -> None:
        f = min(max(float(fraction), 0.0), 1.0)
        bar.set_postfix_str(f"{label} {message}", refresh=False)
        bar.update(max(done + f - bar.n, 0.0))  # throttled by mininterval

    return on_progress


def _failed_point_rows(cfg: LabConfig, pid: str, strategies: list, error: Exception, failed_rows) -> list[dict]:
    """The rows recording a failed point: the runner's helper's, else (it failed too) the same
    builder on the config as given."""
    try:
        rows = failed_rows(cfg, strategies, error) if failed_rows else None
    except Exception:  # noqa: BLE001
        rows = None
    if not rows:
        config = {k: v for k, v in cfg.to_dict().items() if k in schema.CONFIG_COLUMNS}
        rows = rowbuild.failed_rows({**config, "point_id": pid}, strategies, error)
    return [dict(r, point_id=pid, status="failed") for r in rows]


class _PlainProgress:
    """What run_sweep uses of tqdm, as one line per finished point (when tqdm is not installed)."""

    def __init__(self, total: int, disable: bool = False, **_: Any):
        self.total, self.n, self.disable, self.postfix = total, 0.0, disable, ""

    @staticmethod
    def write(msg: str, file=None) -> None:
        print(msg, file=file or sys.stderr, flush=True)

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        self.postfix = s

    def update(self, n: float = 1) -> None:
        before, self.n = self.n, self.n + n
        if not self.disable and int(self.n) > int(before):
            self.write(f"sweep: {int(self.n)}/{self.total} points done ({self.postfix})")

    def close(self) -> None:
        pass


def _free_cuda_memory() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
