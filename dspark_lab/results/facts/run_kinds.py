"""The run kinds: what each recorded run is, stated by the code that starts it and written in its header
(`run_kind`, checked by the writer). One row per kind; every view, the CLI and the writer read this table.

Order: how the run dropdown and tables group runs.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunKind:
    key: str
    name: str        # what views call it
    used_by: str     # the views that pick it (README "Recorded runs, by kind")
    grid: bool = False  # its runs hold a grid the panel's sliders can move over
    ep: bool = False    # a part of an EP recording (real ranks, a prediction, the one-GPU twin)


RUN_KINDS = (
    RunKind("default_sweep", "default sweep", "the recorded panel opens on the latest; notebook 02's stand-in; "
            "the sweeps in notebook 03 and the report", grid=True),
    RunKind("quick_sweep", "quick sweep", "what notebook 02 records live (`sweep.QUICK_SWEEP`)", grid=True),
    RunKind("sweep", "sweep", "a custom grid (`dspark-lab sweep`); drawn as sweeps", grid=True),
    RunKind("reference", "reference", "the headline (the most recent per machine); the featured point in notebook "
            "03 and the report"),
    RunKind("sync_cost", "sync cost", "notebook 01's three cost numbers and its timeline model across gpu_bound / "
            "host_bound"),
    RunKind("preset_check", "preset check", "the sglang_profile preset checked at EP 1 and 8"),
    RunKind("ep_real", "EP real", "notebook 01's real-rank section (a2a_fixed first; every dispatch mode of one "
            "recording)", ep=True),
    RunKind("ep_predicted", "EP predicted", "notebook 01's predicted EP 4 and 8 table (a model's numbers)", ep=True),
    RunKind("ep_one_gpu", "EP one-GPU twin", "the one-process input of the EP prediction", ep=True),
    RunKind("gallery", "gallery", "notebook 04"),
    RunKind("live", "live", "a live panel's measurements, when saved"),
    RunKind("inspect", "inspect", "`dspark-lab inspect` records (notebook 05)"),
    RunKind("single_point", "one point", "one point; a table row"),
)

KINDS = {k.key: k.name for k in RUN_KINDS}
USED_BY = {k.key: k.used_by for k in RUN_KINDS}
# The grid kinds, the richest first (the panel opens on the first it finds).
GRID_KINDS = ("default_sweep", "sweep", "quick_sweep")
EP_KINDS = tuple(k.key for k in RUN_KINDS if k.ep)
assert set(GRID_KINDS) == {k.key for k in RUN_KINDS if k.grid}


def check_kind(kind: object) -> str:
    """`kind` when it is a known run kind; otherwise a ValueError naming the allowed ones."""
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(f"run_kind {kind!r} is not known; allowed: {', '.join(KINDS)}")
    return kind
