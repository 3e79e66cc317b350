"""The measurement path run for real: on CPU here (sync counts NaN with a note: nothing can block
the host on a GPU, so a zero would be unmeasured), and on CUDA where a device exists (marked `cuda`)."""
import inspect
import math

import pytest
import torch

from dspark_lab import strategies
from dspark_lab.config import LabConfig
from dspark_lab.measure import probe, syncs
from dspark_lab.measure.step import measure_step
from dspark_lab.run.point import measure_point, point_id
from dspark_lab.results.record.schema import HOST_PARTS, ROW_COLUMNS


def test_any_callable_on_cpu_reports_syncs_as_not_measurable():
    x = torch.randn(64, 64)

    def my_step():
        return (x @ x).sum().item()  # an .item(): a sync on CUDA, nothing on CPU

    r = measure_step(my_step, steps=5, trials=2, warmup=1, profile_steps=4)
    assert r.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert len(r.timing) == 2 and all(t.step_ms > 0 for t in r.timing)
    assert len(r.breakdown) == 4
    if not torch.cuda.is_available():
        for c in syncs.SYNC_COUNT_COLUMNS:
            assert math.isnan(r.counts[c]), c
        assert r.counts["sync_note"] == "not measurable without CUDA"
        assert r.counts["sync_count_mismatch"] is None and r.debug_sites == {}
        text = r.summary()
        assert "syncs/step: not measurable without CUDA" in text and "nan" not in text


def test_measure_point_on_cpu_gives_tidy_rows_for_every_strategy():
    cfg = LabConfig(model="tiny", workload="tiny", device="cpu", steps=3, warmup=1, trials=2, batch_size=5, ep_size=2)
    res = measure_point(cfg, profile_steps=4)
    assert res.outputs_identical
    assert len(res.rows) == 5 * 2
    for r in res.rows:
        assert set(ROW_COLUMNS) <= set(r)
        assert r["status"] == "ok" and r["point_id"] == point_id(cfg)
        for c in syncs.SYNC_COUNT_COLUMNS:  # NaN, never a zero nobody measured
            assert math.isnan(r[c]), (r["strategy"], c)
        assert r["sync_note"] == "not measurable without CUDA" and r["sync_count_mismatch"] is None
        assert r["h2d_pageable_per_step"] == 0
        assert r["predicate"] is True and r["num_tokens"] == 20 and r["bucket_batch_size"] == 8
        assert abs(sum(r[p] for p in HOST_PARTS) - r["profiled_step_ms"]) <= 0.05 * r["profiled_step_ms"]
    assert {t["strategy"] for t in res.timelines} == {r["strategy"] for r in res.rows}


def test_probe_without_cuda_says_so():
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    p = probe.run_probe()
    assert p["available"] is False and "no CUDA device" in p["reason"]
    assert probe.fingerprint()["gpu"] == "none"


def _line_of(fn, text: str) -> int:
    """The file line of the first line of `fn` holding `text` (computed, never a literal)."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.cuda
@pytest.mark.parametrize("other, expected", [
    ("on_demand", {"syncs_per_step": 0, "debug_syncs_per_step": 0, "h2d_pageable_per_step": 0, "allocs_per_step": 0}),
    ("non_blocking", {"syncs_per_step": 0, "debug_syncs_per_step": 0}),
])
def test_cuda_device_direct_syncs_once_per_step_at_its_line_and_the_fix_does_not(other, expected):
    cfg = LabConfig(ep_size=1, batch_size=8, gamma=4, workload="sglang_profile", steps=10, warmup=3, trials=2)
    res = measure_point(cfg, ["device_direct", other], profile_steps=6)
    by = {r["strategy"]: r for r in res.rows}
    dd, fix = by["device_direct"], by[other]
    assert dd["stream_syncs_per_step"] == dd["syncs_per_step"] == dd["debug_syncs_per_step"] == 1, dd
    assert {k: fix[k] for k in expected} == expected, fix
    for r in (dd, fix):  # the trace and sync debug mode agree
        assert r["sync_count_mismatch"] is False and r["sync_note"] == "", r
    assert dd["sync_site"] == f"dspark_lab/strategies.py:{_line_of(strategies.device_direct, 'return torch.tensor(')} device_direct"


def _item_step(x):
    def my_step():
        return (x @ x).sum().item()
    return my_step


def _bool_step(x):
    def my_step():
        return bool((x @ x).sum() > 0)
    return my_step


@pytest.mark.cuda
@pytest.mark.parametrize("make, text", [(_item_step, ".item()"), (_bool_step, "bool(")])
def test_cuda_one_sync_in_a_users_step_is_counted_by_both_and_found_at_its_line(make, text):
    my_step = make(torch.randn(256, 256, device="cuda"))
    r = measure_step(my_step, steps=5, trials=2, warmup=1, profile_steps=4)
    # One sync per step: one stream sync in the trace, one synchronizing op in debug mode.
    assert r.counts["syncs_per_step"] == r.counts["debug_syncs_per_step"] == 1, r.counts
    assert r.counts["sync_count_mismatch"] is False and "WARNING" not in r.summary()
    assert list(r.debug_sites) == [f"tests/test_measure_live.py:{_line_of(make, text)} my_step"], r.debug_sites
