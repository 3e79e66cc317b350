"""The gallery's cases as `dspark-lab inspect` targets: a zero-argument factory per case and per
fix, each making the case's state and returning the step, e.g.

    dspark-lab inspect dspark_lab.gallery.targets:scalar_item
    dspark-lab diff dspark_lab.gallery.targets:scalar_item dspark_lab.gallery.targets:scalar_item_fix

The state is made at the scale the gallery records at (cases.default_scale: "queued" on a CUDA
machine, "smoke" elsewhere; $DSPARK_GALLERY_SCALE overrides), so a target measures what the
recorded gallery shows. The factories are made from the registry, one per case, so a
case added there is a target here.
"""
from __future__ import annotations

import os
from typing import Callable

from dspark_lab.gallery import cases
from dspark_lab.gallery.cases import SCALES, make_state
from dspark_lab.gallery.registry import CASES, Case

SCALE_ENV = "DSPARK_GALLERY_SCALE"
FIX_SUFFIX = "_fix"


def default_scale() -> str:
    name = os.environ.get(SCALE_ENV) or cases.default_scale()
    if name not in SCALES:
        raise ValueError(f"{SCALE_ENV} must be one of {', '.join(SCALES)}; got {name!r}")
    return name


def _factory(case: Case, variant: str) -> Callable[[], Callable[[], object]]:
    fn = case.step if variant == "case" else case.fix

    def make() -> Callable[[], object]:
        state = make_state(scale_name=default_scale())
        return lambda: fn(state)

    make.__name__ = make.__qualname__ = case.name + (FIX_SUFFIX if variant == "fix" else "")
    make.__doc__ = f"The gallery's {case.name} {'fix' if variant == 'fix' else 'pitfall'} ({fn.__name__}) as a step."
    return make


def names() -> list[str]:
    """Every target's name in this module: each case, then its fix."""
    return [n for c in CASES for n in (c, c + FIX_SUFFIX)]


for _case in CASES.values():
    for _variant in ("case", "fix"):
        _f = _factory(_case, _variant)
        globals()[_f.__name__] = _f
del _case, _variant, _f
