"""What the built-in strategies are called and where they come from, without torch.

The strategy functions (strategies.py) need torch; the views only need names, order and one
line each, so those live here and strategies.py registers its functions under them.
"""
from __future__ import annotations

from typing import Iterable

BASELINE = "device_direct"  # the form every fix is compared against

# name -> (one line for widgets and the CLI, the PR or release it comes from); in display order.
BUILTIN_INFO: dict[str, tuple[str, str]] = {
    "device_direct": ("torch.tensor(n, device=cuda): pageable copy + stream sync", "before PR #34782"),
    "non_blocking": ("pageable host tensor .to(cuda, non_blocking=True)", "PR #34782"),
    "on_demand": ("None unless the predicate holds, else non-blocking", "PR #34759"),
    "on_demand_pinned": ("on demand, pinned host tensor, non-blocking copy", "sglang 0.5.23"),
    "persistent_fill": ("persistent device scalar updated with fill_", "sglang 0.5.23 graph buffers"),
}


def strategy_order(present: Iterable[str]) -> list[str]:
    """The present strategies, built-ins in their display order first, others sorted after."""
    present = [p for p in dict.fromkeys(present) if isinstance(p, str)]
    return [s for s in BUILTIN_INFO if s in present] + sorted(s for s in present if s not in BUILTIN_INFO)
