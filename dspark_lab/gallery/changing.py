"""The gallery's steps over N steps with values that change between them, for the race check: a race
delivers another step's values, so a check whose values never change cannot see one.

`advance(state)` moves the inputs it lists (not h, w, positions or tokens) to the next step's values, the device tensors by
kernels queued in stream order (no host wait) and the host mirror in lockstep with them (State's
seq_lens_cpu: the scheduler's mirror, kept in lockstep). `steps_of(fn)` is a factory of such steps (a fresh state per call, so
the race check's two runs start alike), for `dspark_lab.measure.races.check`.
"""
from __future__ import annotations

from typing import Callable, Optional

from dspark_lab.gallery.cases import State, default_scale, make_state


def advance(s: State) -> None:
    """The next step's inputs: every length one longer (device and host mirror alike), one more token
    padded, the accepted draft tokens and each token's expert rotated, the scores shifted."""
    s.seq_lens.add_(1)
    s.seq_lens_cpu.add_(1)
    rows = s.positions.numel()
    s.num_non_padded.copy_((s.num_non_padded + rows - 1) % (rows + 1))
    s.accept.copy_(s.accept.roll(1, 0))
    s.expert_ids.copy_((s.expert_ids + 1) % s.scale.experts)
    s.logits.add_(0.25)


def steps_of(fn: Callable[[State], object], scale: Optional[str] = None, seed: int = 0
             ) -> Callable[[], Callable[[int], object]]:
    """A factory of steps: each made step owns a fresh state (`make_state(scale, seed)`) and, at every
    call, advances it and returns `fn(state)`."""
    def make() -> Callable[[int], object]:
        state = make_state(scale_name=scale or default_scale(), seed=seed)

        def step(i: int) -> object:
            advance(state)
            return fn(state)
        return step
    make.__name__ = f"{getattr(fn, '__name__', 'step')}_changing"
    return make
