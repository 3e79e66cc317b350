"""Sync accounting and the breakdown, checked on real traces recorded on an H200 (tests/fixtures).

Each fixture is the first 5 profiled steps of the `sglang_profile` preset (batch 8, gamma 4),
exported by scripts/gpu_session.py. The expectations are what those traces hold, counted here
independently of the code under test where that is possible (raw event names).
"""
import gzip
import json

import pytest

from dspark_lab.measure import breakdown, syncs, trace
from dspark_lab.results.record.schema import GPU_PARTS, HOST_PARTS
from dspark_lab.measure.ranges import STEP_RANGE

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"

T = FIXTURES / "traces"


def fixture(name):
    return T / f"sglang_profile_{name}.rank0.json.gz"


def raw(name):
    with gzip.open(fixture(name), "rt") as f:
        return json.load(f)


def ev(name):
    return trace.events(fixture(name))


ALL = ["ep1_device_direct", "ep1_non_blocking", "ep1_on_demand", "ep1_persistent_fill", "ep8_on_demand_pinned"]


def test_fixtures_come_from_an_h200_with_versions():
    d = raw("ep1_device_direct")
    assert d["deviceProperties"][0]["name"] == "NVIDIA H200"
    assert d["cuda_driver_version"] and d["cuda_runtime_version"]
    assert d["distributedInfo"]["rank"] == 0  # loadable by Holistic Trace Analysis


def test_device_direct_one_stream_sync_per_step_attributed_to_its_strategy():
    e = ev("ep1_device_direct")
    calls = syncs.sync_calls(e)
    steps = len(syncs.step_windows(e))
    step_syncs = calls[~calls.readback]
    # Exactly one per step, each a cudaStreamSynchronize.
    assert sorted(step_syncs.step) == list(range(steps))
    assert set(step_syncs.name) == {"cudaStreamSynchronize"}
    # Independent count from the raw events: stream syncs on the host inside the scalar's phase.
    d = raw("ep1_device_direct")["traceEvents"]
    phase = [(x["ts"], x["ts"] + x["dur"]) for x in d if x.get("name") == "dspark:num_token_non_padded" and x.get("cat") == "user_annotation"]
    raw_syncs = [x for x in d if x.get("name") == "cudaStreamSynchronize" and any(a <= x["ts"] < b for a, b in phase)]
    assert len(raw_syncs) == steps == len(phase)
    c = syncs.counts_per_step(e)
    assert c["syncs_per_step"] == c["stream_syncs_per_step"] == 1.0
    assert c["h2d_pageable_per_step"] == 1.0 and c["h2d_pinned_per_step"] == 0.0
    # Without Python stacks the site is the ATen op and the phase it ran in.
    assert c["sync_site"] == "aten::to in dspark:num_token_non_padded"


def test_with_python_stacks_the_sync_is_attributed_to_the_file_and_function():
    c = syncs.counts_per_step(ev("ep1_device_direct_stacks"))
    assert c["syncs_per_step"] == 1.0
    assert c["sync_site"].startswith("dspark_lab/strategies.py(") and c["sync_site"].endswith("): device_direct")


@pytest.mark.parametrize("name", ["ep1_non_blocking", "ep1_on_demand", "ep1_persistent_fill", "ep8_on_demand_pinned"])
def test_other_strategies_have_no_step_sync(name):
    c = syncs.counts_per_step(ev(name))
    assert c["syncs_per_step"] == 0 and c["sync_site"] == ""
    assert c["readback_syncs_per_step"] > 0  # the by-design readback is there, and counted apart


def test_copies_and_allocations_by_strategy():
    nb, od, pf, pinned = (syncs.counts_per_step(ev(n)) for n in ("ep1_non_blocking", "ep1_on_demand", "ep1_persistent_fill", "ep8_on_demand_pinned"))
    assert nb["h2d_pageable_per_step"] == 1 and nb["allocs_per_step"] == 1
    # EP 1: on-demand makes nothing at all; the workload around it allocates nothing per step.
    assert od["h2d_pageable_per_step"] == od["h2d_pinned_per_step"] == od["allocs_per_step"] == 0
    assert pf["h2d_pageable_per_step"] == pf["h2d_pinned_per_step"] == pf["allocs_per_step"] == 0
    assert pinned["h2d_pinned_per_step"] == 1 and pinned["h2d_pageable_per_step"] == 0


@pytest.mark.parametrize("name", ALL)
def test_breakdown_parts_add_up_to_each_steps_wall_time(name):
    df = breakdown.per_step(ev(name))
    assert len(df) == 5
    for _, r in df.iterrows():
        host = sum(r[p] for p in HOST_PARTS)
        gpu = sum(r[p] for p in GPU_PARTS)
        assert abs(host - r.wall_ms) <= 0.05 * r.wall_ms
        assert abs(gpu - r.wall_ms) <= 0.05 * r.wall_ms
        assert r.gpu_idle_after_sync_ms <= r.gpu_idle_ms + 1e-9


def test_blocked_time_is_the_sync_calls_duration():
    e = ev("ep1_device_direct")
    df = breakdown.per_step(e)
    calls = syncs.sync_calls(e)
    per_step = calls[~calls.readback].groupby("step").dur.sum() / 1e3
    assert df.host_blocked_ms.round(6).tolist() == per_step.round(6).tolist()
    # The stall leaves the GPU idle afterwards: device-direct shows idle-after-sync, others none.
    assert (df.gpu_idle_after_sync_ms > 0).all()
    assert (breakdown.per_step(ev("ep1_non_blocking")).gpu_idle_after_sync_ms == 0).all()


def test_timeline_marks_each_sync_with_its_blocked_span():
    e = ev("ep1_device_direct")
    segs = breakdown.timeline(e, first_step=1, n_steps=3)
    sync_segs = [s for s in segs if s[1] == "sync"]
    steps = [s for s in segs if s[1] == "step"]
    assert len(sync_segs) == len(steps) == 3
    calls = syncs.sync_calls(e)
    durs = sorted(calls[~calls.readback & calls.step.between(1, 3)].dur / 1e3)
    assert sorted(round(s[3] - s[2], 6) for s in sync_segs) == [round(d, 6) for d in durs]


def test_trim_and_export_round_trip(tmp_path):
    d = raw("ep1_non_blocking")
    t = trace.trim(d, STEP_RANGE, 2)
    p = trace.export(t, tmp_path / "x.rank0.json.gz")
    e = trace.events(p)
    assert len(syncs.step_windows(e)) == 2
    assert trace.load_json(p)["distributedInfo"]["rank"] == 0


def test_holistic_trace_analysis_loads_the_export(tmp_path):
    hta = pytest.importorskip("hta.trace_analysis")
    trace.export(raw("ep1_device_direct"), tmp_path / "lab.rank0.json.gz")
    a = hta.TraceAnalysis(trace_dir=str(tmp_path))
    tb = a.get_temporal_breakdown(visualize=False)
    assert tb["rank"].tolist() == [0]
    # HTA parsed the same GPU and runtime events that the lab counts.
    df = a.t.get_trace(0)
    cats = df["cat"].map(lambda i: a.t.symbol_table.sym_table[i]).value_counts()
    e = ev("ep1_device_direct")
    for cat in ("kernel", "gpu_memcpy", "cuda_runtime", "cuda_sync"):
        assert cats[cat] == (e.cat == cat).sum()


@pytest.mark.parametrize("name", ALL)
def test_summary_parts_add_up_to_the_mean_profiled_step(name):
    from dspark_lab.measure.breakdown import summary

    s = summary(ev(name))
    assert sum(s[p] for p in HOST_PARTS) == pytest.approx(s["profiled_step_ms"], rel=0.05)
    assert sum(s[p] for p in GPU_PARTS) == pytest.approx(s["profiled_step_ms"], rel=0.05)


def test_trim_keeps_gpu_work_of_kept_steps_that_ran_after_the_cut():
    d = raw("ep1_non_blocking")
    t = trace.trim(d, STEP_RANGE, 3)
    e = trace.events(t)
    wins = syncs.step_windows(e)
    assert len(wins) == 3
    # Every kept host memcpy call has its GPU copy, wherever the GPU ran it.
    calls = e[e.name == "cudaMemcpyAsync"]
    copies = e[e.cat == "gpu_memcpy"]
    assert set(calls.correlation) <= set(copies.correlation)


@pytest.mark.parametrize("name", ["ep1_device_direct", "ep1_non_blocking"])
def test_cupti_sync_events_agree_with_the_counted_api_calls(name):
    # The trace's CUDA sync events (CUPTI, the profiler's enable_cuda_sync_events option) are a
    # second, independent record: each blocking API call the lab counts has one, by correlation.
    e = ev(name)
    calls = syncs.sync_calls(e)
    cupti = e[e.cat == "cuda_sync"]
    kinds = {"Stream Sync": "stream", "Event Sync": "event", "Context Sync": "device"}
    assert sorted(kinds[k] for k in cupti.name) == sorted(calls.kind)
    assert set(cupti.correlation) == set(calls.correlation)


def test_attribution_skips_torch_frames_named_relative_to_site_packages():
    """The profiler may name torch's files relative to site-packages ("torch/cuda/streams.py"):
    such a frame is torch's own, and the site is the caller's (seen on the H200: an event sync inside
    torch.cuda.Event.synchronize was attributed to torch/cuda/streams.py)."""
    import pandas as pd

    from dspark_lab.measure import syncs

    host = pd.DataFrame([
        dict(name="dspark_lab/gallery/cases.py(287): read_back", cat="python_function", ts=0.0, end=10.0),
        dict(name="torch/cuda/streams.py(245): synchronize", cat="python_function", ts=1.0, end=9.0),
        dict(name="cudaEventSynchronize", cat="cuda_runtime", ts=2.0, end=8.0),
    ])
    assert syncs.attribute(host, host.iloc[2]) == "gallery/cases.py(287): read_back"
