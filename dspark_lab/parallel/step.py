"""One rank's decode step: the lab's step (workload.LabStep) on a process group, with this rank's
own strategy, an added host delay and random host jitter in its host prep.

The delay and jitter are host work inside `dspark:host_prep` (spun, like the preset's host cost),
so they show in the breakdown as prep, and they push back when this rank reaches the MoE's
collectives: the other ranks then wait for it there.
"""
from __future__ import annotations

import random
from typing import Optional

from dspark_lab.config import LabConfig
from dspark_lab.model.workload import LabStep


class RankStep(LabStep):
    def __init__(self, cfg: LabConfig, strategy: str, *, group=None, dispatch: str = "allreduce",
                 bucket: Optional[int] = None, host_delay_ms: float = 0.0, host_jitter_ms: float = 0.0,
                 jitter_seed: int = 0, share_with: Optional["RankStep"] = None):
        if host_delay_ms < 0:
            raise ValueError(f"host_delay_ms must be >= 0; got {host_delay_ms!r}")
        if host_jitter_ms < 0:
            raise ValueError(f"host_jitter_ms must be >= 0; got {host_jitter_ms!r}")
        super().__init__(cfg, strategy, share_with=share_with, group=group, dispatch=dispatch, bucket=bucket)
        self.host_delay_ms = float(host_delay_ms)
        self.host_jitter_ms = float(host_jitter_ms)
        self._rng = random.Random(jitter_seed)  # seeded: a rerun draws the same jitter sequence

    def _host_prep(self, us: float) -> None:
        extra_ms = self.host_delay_ms + (self._rng.uniform(0.0, self.host_jitter_ms) if self.host_jitter_ms else 0.0)
        super()._host_prep(us + extra_ms * 1e3)
