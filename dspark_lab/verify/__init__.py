"""`dspark-lab verify`: the kit checks itself against truths it builds, on this machine.

Eight groups (results.record.verify_record.GROUPS): sync counts and lines of step functions whose
syncs are known (verify.known_syncs); the cost rule on steps whose caused idle is known
(gallery.known_idle); the card's verdict rule on cells whose answer is known; the hazards (the
race reproduces, each fix gives 0); the katas' reference solutions; the clocks; the guard, the
counts and the cost rule on torch.compile'd code (verify.compiled); the guard's capture witness on
the sync zoo (verify.capture). Each check's
verdict comes from results.analyses.verification, where its rule is tested on CPU.

    from dspark_lab.verify import run
    rec = run()                  # a verify record (results.record.verify_record), CUDA needed
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Callable, Optional, Sequence

import torch

from dspark_lab.measure import probe
from dspark_lab.results.analyses import verification as V
from dspark_lab.results.record import verify_record as VR
from dspark_lab.verify.checks import GROUP_RUNNERS


def run(groups: Optional[Sequence[str]] = None, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Run the asked groups (default: all) and return the record; without CUDA, one not-checked line
    per group saying why."""
    groups = list(groups or VR.GROUPS)
    bad = [g for g in groups if g not in VR.GROUPS]
    if bad:
        raise ValueError(f"groups must be among {', '.join(VR.GROUPS)}; got {', '.join(map(repr, bad))}")
    t0 = time.perf_counter()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if not torch.cuda.is_available():
        checks = [c for c in V.without_cuda("no CUDA device is visible here") if c.group in groups]
        return VR.record(checks, probe.fingerprint(), now, time.perf_counter() - t0)
    checks = []
    for g in groups:
        t = time.perf_counter()
        got = GROUP_RUNNERS[g]()
        checks += got
        progress(f"{g}: {sum(c.passed is True for c in got)} of {len(got)} passed ({time.perf_counter() - t:.1f} s)")
    return VR.record(checks, probe.fingerprint(), now, time.perf_counter() - t0)
