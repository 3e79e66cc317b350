"""A realistic decode step for the worked investigation (notebook 06): three syncing lines built to
differ in cost (what each costs on a given GPU is for `inspect` to measure), and the step with the
first two removed.

    1. `positions` built with `torch.tensor(list, device=)` right after the forward is queued, then
       the next batch's metadata built on the host: the host waits for the whole forward, and the GPU
       then starves for the whole host work.
    2. `torch.repeat_interleave(ids, repeats)` with device repeats, a sync hidden in a library call
       (the output size must be known on the host), followed by a little host work.
    3. `accepted.sum().item()` right after the by-design read-back, when the GPU has nothing queued:
       the wait is one round trip.

The fixed step copies the positions from a pinned tensor with `non_blocking=True` and finds each
row's owner on the device (`_owner_of_rows_padded`): removing only the first sync moves the host's
wait for the forward into `repeat_interleave`, the next sync the host reaches.

`slow_step()` and `fixed_step()` are zero-argument factories for the command line:

    dspark-lab inspect "dspark_lab.gallery.decode_step:slow_step()"
    dspark-lab diff "dspark_lab.gallery.decode_step:slow_step()" "dspark_lab.gallery.decode_step:fixed_step()"
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from dspark_lab.gallery.cases import State, draft, make_state, read_back, target_verify
from dspark_lab.gallery.targets import default_scale

METADATA_HOST_FACTOR = 5.0  # host work after pitfall 1, in units of the scale's host preparation
EXPAND_HOST_FACTOR = 1.0  # host work after pitfall 2
PAD_OWNER = -1  # the fixed step's owner of a row past the real total (its output is padded to a static bound)
# The CI allow-list of the fixed step, "FUNCTION: REASON": the by-design read-back and the one sync
# the fixed step keeps, so a new sync, or a removed one back, fails CI.
CI_ALLOW = ("read_back: the by-design result wait, after the next work is queued",
            "_count_accepted: reached right after the read-back, when the GPU has nothing queued to wait for")


def _host_work(s: State, factor: float) -> None:
    """Host work (building the next batch's metadata) for `factor` x the scale's host preparation."""
    end = time.perf_counter() + factor * s.scale.host_prep_us * 1e-6
    while time.perf_counter() < end:
        pass


def _sample(s: State, h: torch.Tensor) -> torch.Tensor:
    """Greedy sampling stand-in: one token id per request, on the device."""
    return h[: s.seq_lens.numel(), :64].float().argmax(dim=1)


def _accept_lens(s: State) -> torch.Tensor:
    """The by-design read-back: the host needs the accepted lengths before it plans the next step."""
    s.d2h_pinned.copy_(s.accept.sum(1), non_blocking=True)
    done = torch.cuda.Event() if s.device.type == "cuda" else None
    if done is not None:
        done.record()
    return read_back(s.d2h_pinned, done)


def _owner_of_rows(tokens: torch.Tensor, repeats: torch.Tensor) -> torch.Tensor:
    """Each output row's token: a library call that hides a sync."""
    return torch.repeat_interleave(tokens, repeats)  # sync: the output size is read on the host


def _owner_of_rows_padded(tokens: torch.Tensor, repeats: torch.Tensor, bound: int) -> torch.Tensor:
    """`_owner_of_rows` without reading the output size on the host: `bound` rows (a static upper
    bound on sum(repeats)); row r belongs to the first token whose running total of repeats passes r,
    and the rows past the real total hold PAD_OWNER."""
    ends = torch.cumsum(repeats, 0)
    rows = torch.arange(bound, device=tokens.device, dtype=ends.dtype)
    owner = torch.searchsorted(ends, rows, right=True)  # rows at or past ends[-1] get tokens.numel()
    real = owner < tokens.numel()
    return torch.where(real, tokens[owner.clamp(max=tokens.numel() - 1)], PAD_OWNER)


def _count_accepted(s: State) -> int:
    """Accepted tokens this step, for the scheduler's statistics."""
    return int(s.accept.sum().item())  # sync: the GPU is already idle here: one round trip


def decode_step_slow(s: State) -> tuple:
    h = target_verify(s)
    positions = torch.tensor(s.seq_lens_cpu.tolist(), device=s.device)  # sync: a blocking copy behind the forward
    _host_work(s, METADATA_HOST_FACTOR)
    owner = _owner_of_rows(_sample(s, h), s.accept.sum(1) + 1)  # accepted tokens plus the bonus token
    _host_work(s, EXPAND_HOST_FACTOR)
    lens = _accept_lens(s)
    n_accepted = _count_accepted(s)
    draft(s, h)
    return positions + 1, owner, lens, n_accepted


def decode_step_fixed(s: State) -> tuple:
    h = target_verify(s)
    src = torch.tensor(s.seq_lens_cpu.tolist(), pin_memory=s.device.type == "cuda")
    positions = src.to(s.device, non_blocking=True)  # pinned, non-blocking: the host goes on at once
    _host_work(s, METADATA_HOST_FACTOR)
    bound = s.accept.shape[0] * (s.accept.shape[1] + 1)  # every draft token accepted, plus the bonus
    owner = _owner_of_rows_padded(_sample(s, h), s.accept.sum(1) + 1, bound)  # no output size to read back
    _host_work(s, EXPAND_HOST_FACTOR)
    lens = _accept_lens(s)
    n_accepted = _count_accepted(s)  # kept: the GPU has nothing queued here
    draft(s, h)
    return positions + 1, owner, lens, n_accepted


def _factory(fn: Callable[[State], tuple]) -> Callable[[], Callable[[], tuple]]:
    def make() -> Callable[[], tuple]:
        state = make_state(scale_name=default_scale())
        return lambda: fn(state)

    return make


slow_step = _factory(decode_step_slow)
slow_step.__name__ = slow_step.__qualname__ = "slow_step"
fixed_step = _factory(decode_step_fixed)
fixed_step.__name__ = fixed_step.__qualname__ = "fixed_step"
