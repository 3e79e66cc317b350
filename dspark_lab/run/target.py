"""A user's step named on the command line: parse it, load it, and say plainly what is wrong.

TARGET is `package.module:callable` or `path/to/file.py:callable` (a dotted attribute path after
the colon is allowed, e.g. `mod:Runner.step`). The callable is either the step (called with no
arguments, once per step) or a factory that returns the step. With `()` after the name
(`mod:make_step()`) it is a factory and must return a callable; without, a call that returns a
callable is taken as a factory's too (its result is the step), anything else as a step's result.

Every failure is a TargetError whose one line names the target and what was wrong.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

FACTORY_MARK = "()"


class TargetError(Exception):
    """A target that cannot be measured: `str(e)` is one line naming the target and the reason."""

    def __init__(self, target: str, reason: str):
        super().__init__(f"target {target!r}: {reason}")
        self.target, self.reason = target, reason


@dataclass(frozen=True)
class Target:
    text: str  # as given
    module: str  # a dotted module name, or a path to a .py file
    attr: str  # the callable's dotted name inside the module
    is_file: bool
    factory: bool  # "()" given: the callable must return the step

    @property
    def label(self) -> str:
        """A short name for figures and file names: the callable's name."""
        return self.attr.rsplit(".", 1)[-1]

    def source_root(self) -> Path:
        """The folder whose files the page may quote: the target file's folder, or the module's."""
        if self.is_file:
            return Path(self.module).resolve().parent
        spec = importlib.util.find_spec(self.module)
        origin = spec.origin if spec else None
        if not origin or origin in ("built-in", "frozen"):
            raise TargetError(self.text, f"module {self.module!r} has no source file")
        return Path(origin).resolve().parent


def parse(text: str) -> Target:
    """A Target from `module:callable`, `file.py:callable` or either with `()`; TargetError otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise TargetError(str(text), "must read MODULE:CALLABLE or path/to/file.py:CALLABLE")
    t = text.strip()
    where, sep, attr = t.rpartition(":")
    if not sep or not where or not attr:
        raise TargetError(t, "must read MODULE:CALLABLE or path/to/file.py:CALLABLE (no ':CALLABLE' given)")
    factory = attr.endswith(FACTORY_MARK)
    attr = attr[: -len(FACTORY_MARK)] if factory else attr
    if not all(part.isidentifier() for part in attr.split(".")):
        raise TargetError(t, f"{attr!r} is not a Python name (dotted names allowed, e.g. Runner.step)")
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    if not is_file and not all(part.isidentifier() for part in where.split(".")):
        raise TargetError(t, f"{where!r} is neither a dotted module name nor a path to a .py file")
    return Target(t, where, attr, is_file, factory)


def _import(target: Target):
    if target.is_file:
        path = Path(target.module)
        if not path.is_file():
            raise TargetError(target.text, f"does not import: no file {path}")
        name = f"dspark_target_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TargetError(target.text, f"does not import: {path} is not a Python source file")
        mod = importlib.util.module_from_spec(spec)
        # The file's own folder first on the path, so its sibling imports work as when run as a script.
        sys.path.insert(0, str(path.resolve().parent))
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as e:  # noqa: BLE001 -- any failure at import is the target's
            raise TargetError(target.text, f"does not import: {type(e).__name__}: {e}") from None
        return mod
    try:
        return importlib.import_module(target.module)
    except Exception as e:  # noqa: BLE001
        raise TargetError(target.text, f"does not import: {type(e).__name__}: {e}") from None


def _resolve(target: Target, mod) -> object:
    obj = mod
    for part in target.attr.split("."):
        if not hasattr(obj, part):
            raise TargetError(target.text, f"does not import: {target.module} has no attribute {target.attr!r}")
        obj = getattr(obj, part)
    return obj


def required_parameters(fn: Callable) -> list[str]:
    """The parameters a call with no arguments would leave unfilled ([] if the signature is unknown)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _check_zero_args(target: Target, fn: object, what: str) -> Callable:
    if not callable(fn):
        raise TargetError(target.text, f"{what} is not callable (its type is {type(fn).__name__})")
    need = required_parameters(fn)
    if need:
        raise TargetError(target.text, f"{what} needs arguments ({', '.join(need)}); give a zero-argument step "
                                       "or a factory that returns one")
    return fn


def _call(target: Target, fn: Callable, what: str) -> object:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- the target's own failure, reported as such
        raise TargetError(target.text, f"{what} raised {type(e).__name__}: {e}") from None


def load_step(target: Target) -> Callable[[], object]:
    """Import the target and return its zero-argument step; calls it once (the first warm-up)."""
    obj = _check_zero_args(target, _resolve(target, _import(target)), repr(target.attr))
    first = _call(target, obj, repr(target.attr))
    if target.factory or callable(first):
        if not callable(first):
            raise TargetError(target.text, f"the factory {target.attr}() returned a non-callable "
                                           f"({type(first).__name__}); it must return the step")
        step = _check_zero_args(target, first, f"the step {target.attr}() returned")
        _call(target, step, f"the step {target.attr}() returned")
        return step
    return obj


def load_factory(target: Target) -> tuple[Callable[[], Callable], bool]:
    """(a zero-argument callable that makes a fresh step, True) for a factory target; for a step target
    (nothing to make it afresh with), (a callable returning that one step, False): two runs then share
    its state. A call that returns a callable is taken as a factory's, as load_step does."""
    obj = _check_zero_args(target, _resolve(target, _import(target)), repr(target.attr))
    if target.factory:
        return obj, True
    first = _call(target, obj, repr(target.attr))
    return (obj, True) if callable(first) else ((lambda: obj), False)
