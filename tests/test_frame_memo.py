"""The per-frame memo of the trace's derived tables (measure/frame_memo.py) changes no number: every
committed H200 trace read with it and without it gives the same counts, charges, wait table and
timeline, and a caller that changes what it was given cannot change what the next caller gets."""
import json
from pathlib import Path

import pandas as pd
import pytest

from dspark_lab.measure import breakdown, frame_memo, syncs, trace

FIXTURES = Path(__file__).parent / "fixtures"
ROUNDTRIP = Path(__file__).parents[1] / "data" / "trace" / "traces-20261204-194209"
# One of each shape: a sync in a copy call, an event wait, a size read back, two syncs a step, a
# pageable D2H, the draft step with stacks on real ranks' strategies, the kit's own draft step.
TRACES = [FIXTURES / "known_idle_h200" / f"{name}.json.gz"
          for name in ("wait_cpu", "wait_pinned_event", "wait_repeat_interleave", "two_syncs", "wait_pageable_d2h")] \
    + [FIXTURES / "traces" / "sglang_profile_ep1_device_direct_stacks.rank0.json.gz",
       ROUNDTRIP / "draft_step.inspect.json.gz"]


def _everything(ev: pd.DataFrame) -> str:
    """What a record reads from one trace frame, as text (NaN-safe, exact)."""
    calls = syncs.sync_calls(ev)
    out = {"summary": breakdown.summary(ev, skip_first=1, calls=calls),
           "charges": breakdown.wait_charges(ev, calls).to_json(double_precision=15),
           "per_step": breakdown.per_step(ev, calls).to_json(double_precision=15),
           "counts": syncs.counts_per_step(ev, calls),
           "timeline": breakdown.timeline(ev, calls=calls)}
    return json.dumps(out, default=str, sort_keys=True)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name + "/" + p.name)
def test_a_trace_reads_the_same_with_and_without_the_memo(path, monkeypatch):
    memoised = _everything(trace.events(path))
    monkeypatch.setattr(frame_memo, "ENABLED", False)
    assert _everything(trace.events(path)) == memoised


def test_the_traces_are_there():
    assert all(p.is_file() for p in TRACES)


def test_a_caller_changing_its_copy_leaves_the_next_callers_alone():
    ev = trace.events(TRACES[0])
    first = syncs.host_waits(ev)
    first["dur"] = -1.0
    first.iloc[0, first.columns.get_loc("ts")] = -5.0
    wins = syncs.step_windows(ev)
    wins.clear()
    again = syncs.host_waits(ev)
    assert len(again) > 0 and (again.dur > 0).all() and (again.ts > 0).all()
    assert syncs.step_windows(ev)


def test_the_memo_goes_with_its_frame():
    ev = trace.events(TRACES[0])
    syncs.host_events(ev)
    assert id(ev) in syncs.host_events.memo
    key = id(ev)
    del ev
    assert key not in syncs.host_events.memo
