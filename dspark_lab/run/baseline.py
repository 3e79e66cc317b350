"""The lone-run baseline: the machine's quietest host work per point, read from the calibration
cache into each new run's header (the baseline that run is judged against when loaded alone,
results.rules.noise.RUN_RULE), and kept lower after each point a run measures."""
from __future__ import annotations

from typing import Iterable

import pandas as pd

from dspark_lab.model import calibration
from dspark_lab.results.rules import noise


def header_fields(fingerprint: dict) -> dict:
    """Header fields for a new run on this machine: {BASELINE_HEADER: point key -> entry} (empty
    when the machine has recorded nothing yet: the run then cannot be judged alone)."""
    return {noise.BASELINE_HEADER: calibration.host_baselines(fingerprint)}


def keep(fingerprint: dict, rows: Iterable[dict]) -> dict:
    """After a point: its quiet host work becomes the machine's baseline there if it is the lowest."""
    df = pd.DataFrame(list(rows))
    if df.empty:
        return calibration.host_baselines(fingerprint)
    return calibration.keep_quietest(fingerprint, noise.quiet_baselines(df))
