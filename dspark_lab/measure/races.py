"""Races a fix can cause, found on the user's own step: the step run N times with GPU work queued ahead
of each step and nothing synchronized, its outputs compared with a reference run of a fresh step in
which every non-blocking copy is made blocking and the device is synchronized after each step. Any
difference is a race, reported with the step, the output (its index or key in what the step returned)
and the copy that raced.

The outputs are taken as a consumer would take them: a device tensor by a device copy queued in
stream order (what the next kernel would read), a host tensor and a Python value at once, when the
step returns (what the host would read next). vLLM #53613's test reproduces such a race the same way,
with `torch.cuda._sleep` ahead of the step.

The copy that raced is the step's non-blocking copy whose destination (or source) shares the raced
output's storage, named by its site as the guard names sites; where none does, every non-blocking
copy of the step is listed. A step built by `make_step()` takes either no argument or the step
index (its changing input); the two runs each build their own, so both start from the same state.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from dspark_lab.measure import probe
from dspark_lab.measure.read_stub import caller_site
from dspark_lab.results.analyses.headroom import races_text

NO_CUDA = ("races: no CUDA device, so no GPU work can be queued ahead of the step and no copy can be in "
           "flight; nothing was checked (run this on a GPU machine to check it)")
DEFAULT_QUEUED_MS = 0.2  # the hazards record's GPU work queued per step
FLOAT_RTOL = 1e-4
# A copy is named by the innermost frame outside torch and this module (the kit's own hazard forms included).
_COPY_SKIP = ("/torch/", "\\torch\\", "<built-in", "contextlib.py", "/dspark_lab/measure/races.py")


class RaceError(AssertionError):
    """The step's outputs differ from the synchronized reference."""


class NoCudaRaceWarning(UserWarning):
    """The race check ran without CUDA, so it checked nothing."""


@dataclass
class CopyLog:
    """The non-blocking copies seen: (site, destination storage, source storage), in order, per step."""

    force_blocking: bool = False
    steps: list = field(default_factory=list)

    def add(self, site: str, dst: torch.Tensor, src: torch.Tensor) -> None:
        if self.steps:
            self.steps[-1].append((site, _storage(dst), _storage(src)))


def _storage(t) -> Optional[int]:
    try:
        return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None
    except RuntimeError:
        return None


@contextlib.contextmanager
def copy_log(force_blocking: bool = False) -> Iterator[CopyLog]:
    """Log every `Tensor.copy_`/`Tensor.to` asked to be non-blocking; `force_blocking` makes them blocking."""
    log = CopyLog(force_blocking)
    orig_copy, orig_to = torch.Tensor.__dict__.get("copy_"), torch.Tensor.__dict__.get("to")
    base_copy, base_to = torch.Tensor.copy_, torch.Tensor.to

    @functools.wraps(base_copy)
    def copy_(dst, src, non_blocking=False, **kw):
        if non_blocking:
            log.add(caller_site(_COPY_SKIP), dst, src)
            non_blocking = not log.force_blocking
        return base_copy(dst, src, non_blocking, **kw)

    @functools.wraps(base_to)
    def to(self, *args, **kw):
        if kw.get("non_blocking") or (len(args) >= 2 and isinstance(args[1], bool) and args[1]):
            if log.force_blocking:
                kw["non_blocking"] = False
                args = tuple(False if i == 1 and isinstance(a, bool) else a for i, a in enumerate(args))
            out = base_to(self, *args, **kw)
            log.add(caller_site(_COPY_SKIP), out, self)
            return out
        return base_to(self, *args, **kw)

    torch.Tensor.copy_, torch.Tensor.to = copy_, to
    try:
        yield log
    finally:
        for name, had in (("copy_", orig_copy), ("to", orig_to)):
            if had is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, had)


def flatten(out, path: str = "") -> list:
    """(path, value) of every tensor and number in what a step returned: "0", "1.logits", ..."""
    if isinstance(out, torch.Tensor) or isinstance(out, (int, float, bool)) or out is None:
        return [(path or "output", out)]
    if isinstance(out, dict):
        items = out.items()
    elif isinstance(out, (list, tuple)):
        items = enumerate(out)
    else:
        return [(path or "output", out)]
    return [x for k, v in items for x in flatten(v, f"{path}.{k}" if path else str(k))]


def snapshot(value):
    """A tensor's value as a consumer takes it (a device tensor by a stream-ordered copy, a host one now)."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _caller(step: Callable) -> Callable[[int], object]:
    try:
        params = [p for p in inspect.signature(step).parameters.values()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return (lambda i: step(i)) if params else (lambda i: step())


@dataclass
class Hooks:
    """What the runs do around the step: queue GPU work ahead (racy run), synchronize (reference run,
    and once at the end of both), take an output (`snapshot`) and read it after that sync (`resolve`)."""

    ahead: Callable[[], None]
    sync: Callable[[], None]
    snapshot: Callable = snapshot
    resolve: Callable = lambda x: x  # noqa: E731


def cuda_hooks(queued_ms: float = DEFAULT_QUEUED_MS) -> Hooks:
    probe.calibrate_sleep()
    return Hooks(ahead=lambda: probe.busy_kernel(queued_ms), sync=torch.cuda.synchronize)


def _run(make_step: Callable, steps: int, hooks: Hooks, reference: bool) -> tuple[list, list]:
    """Every step's outputs [(path, value)] and the non-blocking copies each made."""
    call = _caller(make_step())
    outs = []
    with copy_log(force_blocking=reference) as log:
        for i in range(steps):
            log.steps.append([])
            if not reference:
                hooks.ahead()
            out = flatten(call(i))
            outs.append([(p, hooks.snapshot(v), _storage(v)) for p, v in out])
            if reference:
                hooks.sync()
    hooks.sync()
    return [[(p, hooks.resolve(s), ptr) for p, s, ptr in step] for step in outs], log.steps


def outputs(make_step: Callable, steps: int, hooks: Hooks) -> list:
    """Every step's outputs [(path, value)] of the synchronized reference run alone (each non-blocking
    copy made blocking, `hooks.sync` after each step): what the step returns when nothing is in flight."""
    got, _ = _run(make_step, steps, hooks, reference=True)
    return [[(p, v) for p, v, _ in step] for step in got]


def _wrong(got, want) -> tuple[int, int]:
    """(differing elements, elements) of one output."""
    if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
        g, w = got.detach().cpu(), want.detach().cpu()
        if g.shape != w.shape:
            return max(g.numel(), w.numel()), max(g.numel(), w.numel())
        # floating outputs within FLOAT_RTOL (two runs of the same kernels may round differently); a race
        # delivers another step's values, far outside it
        same = torch.isclose(g, w, rtol=FLOAT_RTOL, atol=0.0, equal_nan=True) if g.is_floating_point() else (g == w)
        return int((~same).sum()), int(g.numel())
    return int(got != want), 1


def _raced_copy(copies: list, ptr: Optional[int]) -> str:
    hit = [site for site, dst, src in copies if ptr is not None and ptr in (dst, src)]
    if hit:
        return hit[0]
    if copies:
        return "one of the step's non-blocking copies: " + ", ".join(dict.fromkeys(s for s, _, _ in copies))
    return "no non-blocking copy call seen in the step"


def check(make_step: Callable[[], Callable], *, steps: int = 20, hooks: Optional[Hooks] = None,
          queued_ms: float = DEFAULT_QUEUED_MS) -> dict:
    """Run a step made by `make_step()` `steps` times under run-ahead and once per step synchronized;
    every output that differs is a race. `hooks`: None on CUDA (queue `queued_ms` per step); without CUDA
    and without hooks nothing can be checked (`checked` False, the note says why)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 2:
        raise ValueError(f"steps must be an integer >= 2; got {steps!r}")
    if hooks is None:
        if not torch.cuda.is_available():
            return {"checked": False, "note": NO_CUDA, "steps": steps, "races": [], "clean": True}
        hooks = cuda_hooks(queued_ms)
    want, _ = _run(make_step, steps, hooks, reference=True)
    got, copies = _run(make_step, steps, hooks, reference=False)
    races = []
    for i, (g_step, w_step) in enumerate(zip(got, want)):
        for (path, g, ptr), (_, w, _) in zip(g_step, w_step):
            bad, of = _wrong(g, w)
            if bad:
                races.append({"step": i, "output": path, "wrong": bad, "of": of, "copy": _raced_copy(copies[i], ptr)})
    return {"checked": True, "note": "", "steps": steps, "queued_ms": queued_ms, "races": races, "clean": not races,
            "copies": sorted({s for c in copies for s, _, _ in c})}


def describe(report: dict) -> str:
    """One line per race (the first few), or the verdict (results.analyses.headroom.races_text)."""
    return races_text(report)
