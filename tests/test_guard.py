"""The guard `dspark_lab.guard.no_host_syncs`: its API on CPU (witnesses fed synthetic evidence), and on
CUDA that each witness sees what it should and that it catches every gallery case and passes every fix."""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from dspark_lab import guard
from dspark_lab.gallery import get, make_state, names
from dspark_lab.gallery import compiled_cases
from dspark_lab.pytest_plugin import no_host_syncs  # noqa: F401  (the plugin's fixture, without installing)

ROOT = Path(__file__).resolve().parents[1]

SITE = "gallery/cases.py:116 seq_lens_sum_item"


# --- synthetic evidence ------------------------------------------------------------------------
def _x(name, cat, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def synthetic_trace(with_block=True):
    """A block running one function that makes a stream sync (with its CUPTI record), a blocking
    pageable copy (no sync in its op), a `.item()`-like copy with its own sync, and an event wait
    that is a device-side wait (ignored). A sync after the block must not count."""
    ev = [
        _x("/u/pkg/hot.py(10): step", "python_function", 0, 100),
        _x("/u/pkg/hot.py(40): helper", "python_function", 50, 40),
        _x("/venv/torch/tensor.py(1): item", "python_function", 12, 8),
        # a stream sync from a library, with CUPTI's record on the GPU lane
        _x("cudaStreamSynchronize", "cuda_runtime", 14, 4, correlation=1),
        _x("Stream Sync", "cuda_sync", 14, 4, pid=0, tid=7, correlation=1),
        # a non-blocking copy into pageable memory: its op made no sync call
        _x("aten::copy_", "cpu_op", 55, 10),
        _x("cudaMemcpyAsync", "cuda_runtime", 56, 8, correlation=2),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 60, 1, pid=0, tid=7, correlation=2),
        # .item(): copy and sync inside one op, counted as the sync, not as a pageable copy
        _x("aten::_local_scalar_dense", "cpu_op", 70, 10),
        _x("cudaMemcpyAsync", "cuda_runtime", 71, 2, correlation=3),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 72, 1, pid=0, tid=7, correlation=3),
        _x("cudaStreamSynchronize", "cuda_runtime", 74, 4, correlation=4),
        _x("Stream Sync", "cuda_sync", 74, 4, pid=0, tid=7, correlation=4),
        _x("Stream Wait Event", "cuda_sync", 80, 1, pid=0, tid=7, correlation=5),
        _x("cudaStreamWaitEvent", "cuda_runtime", 80, 1, correlation=5),
        # after the block: the guard's own synchronize
        _x("cudaDeviceSynchronize", "cuda_runtime", 300, 5, correlation=9),
        _x("Context Sync", "cuda_sync", 300, 5, pid=0, tid=7, correlation=9),
    ]
    if with_block:
        ev.append(_x(guard.GUARD_RANGE, "user_annotation", 0, 200))
    return {"traceEvents": ev}


def test_from_trace_sees_cupti_syncs_and_blocking_pageable_copies_in_the_block_only():
    found = guard.from_trace(synthetic_trace())
    assert [(s.kind, s.seen_by) for s in found] == [("stream", guard.CUPTI), ("pageable_copy", guard.TRACE), ("stream", guard.CUPTI)]
    # attributed to the innermost Python frame outside torch, in "file:line function" form
    assert [s.site for s in found] == ["pkg/hot.py:10 step", "pkg/hot.py:40 helper", "pkg/hot.py:40 helper"]


def test_unsynced_pageable_d2h_skips_copies_whose_op_syncs():
    from dspark_lab.measure import trace

    calls = guard.unsynced_pageable_d2h(trace.events(synthetic_trace()))
    assert calls.correlation.tolist() == [2]


@pytest.mark.parametrize("api, seen", [("cudaEventQuery", False), ("cuEventQuery", False), ("cudaEventSynchronize", True)])
def test_a_cupti_event_record_under_a_query_is_not_a_host_sync(api, seen):
    tr = synthetic_trace()
    tr["traceEvents"] += [_x(api, "cuda_runtime", 90, 1, correlation=6), _x("Event Sync", "cuda_sync", 90, 1, pid=0, tid=7, correlation=6)]
    kinds = [s.kind for s in guard.from_trace(tr)]
    assert kinds == ["stream", "pageable_copy", "stream"] + (["event"] if seen else [])


def test_cupti_sync_without_a_recorded_call_is_attributed_by_time():
    tr = synthetic_trace()
    tr["traceEvents"] = [e for e in tr["traceEvents"] if e["args"].get("correlation") != 1 or e["cat"] == "cuda_sync"]
    found = guard.from_trace(tr)
    assert found[0].kind == "stream" and found[0].site == "pkg/hot.py:10 step"


@pytest.mark.parametrize("pattern, allowed", [
    ("helper", True), ("step", False), ("pkg/hot.py:40", True), ("*/hot.py:*", True), ("pkg/hot.py:40 helper", True),
    ("pkg/other.py:*", False), ("help*", False)])
def test_allow_list_by_function_name_or_file_line_pattern(pattern, allowed):
    assert guard.is_allowed("pkg/hot.py:40 helper", [pattern]) is allowed


def test_allow_list_applies_to_every_witness():
    rep = guard.SyncReport(guard.from_debug_sites([SITE, "pkg/hot.py:40 helper"], allow=["helper"])
                           + guard.from_trace(synthetic_trace(), allow=["helper"]), (guard.DEBUG_MODE, guard.CUPTI, guard.TRACE))
    assert [s.site for s in rep.violations] == [SITE, "pkg/hot.py:10 step"]
    assert rep.count(allowed=True) == 3


def test_error_message_names_the_first_sync_preferring_the_exact_line():
    rep = guard.SyncReport(guard.from_trace(synthetic_trace()) + guard.from_debug_sites([SITE, SITE]),
                           (guard.DEBUG_MODE, guard.CUPTI, guard.TRACE))
    msg = rep.error_message()
    assert msg.splitlines()[0] == f"host sync at {SITE} (sync, seen by {guard.DEBUG_MODE})"
    assert f"5 host syncs not allowed (2 by {guard.DEBUG_MODE}, 2 by {guard.CUPTI}, 1 by {guard.TRACE})" in msg
    assert "pkg/hot.py:40 helper (blocking pageable copy, seen by trace copies)" in msg
    assert guard.SyncReport([], ()).error_message() == ""


def _item_trace(marks=1):
    """One `.item()` in `hot.py`'s `step`: the D2H copy, the stream sync (with CUPTI's record) and,
    just after the call returned, the guard's mark for sync debug mode's report of it."""
    ev = [
        _x(guard.GUARD_RANGE, "user_annotation", 0, 200),
        _x("/u/pkg/hot.py(10): step", "python_function", 0, 100),
        _x("aten::_local_scalar_dense", "cpu_op", 20, 10),
        _x("cudaMemcpyAsync", "cuda_runtime", 21, 2, correlation=3),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 22, 1, pid=0, tid=7, correlation=3),
        _x("cudaStreamSynchronize", "cuda_runtime", 24, 4, correlation=4),
        _x("Stream Sync", "cuda_sync", 24, 4, pid=0, tid=7, correlation=4),
    ]
    ev += [_x(guard.DEBUG_MARK, "user_annotation", 31 + k, 0) for k in range(marks)]
    return {"traceEvents": ev}


def test_one_item_seen_by_two_witnesses_is_one_record_with_the_exact_line_and_both_witnesses():
    tr = _item_trace()
    syncs = guard.one_record_per_sync(guard.from_debug_sites(["pkg/hot.py:12 step"]), guard.debug_marks(tr),
                                      guard.sightings(tr))
    rep = guard.SyncReport(syncs, (guard.DEBUG_MODE, guard.CUPTI, guard.TRACE))
    assert len(rep.violations) == 1 and rep.count() == 1
    s = rep.syncs[0]
    assert (s.site, s.kind, s.witnesses) == ("pkg/hot.py:12 step", "stream", (guard.DEBUG_MODE, guard.CUPTI))
    assert s.witness_sites == ((guard.DEBUG_MODE, "pkg/hot.py:12 step"), (guard.CUPTI, "pkg/hot.py:10 step"))
    assert rep.count(guard.DEBUG_MODE) == rep.count(guard.CUPTI) == 1 and rep.count(guard.TRACE) == 0
    assert rep.summary().splitlines()[0].startswith(f"1 host sync not allowed (1 by {guard.DEBUG_MODE}, 1 by {guard.CUPTI}")
    assert "CUDA sync events at pkg/hot.py:10 step" in rep.summary()


def test_a_witness_allowing_either_line_allows_the_merged_sync():
    tr = _item_trace()
    syncs = guard.one_record_per_sync(guard.from_debug_sites(["pkg/hot.py:12 step"], allow=["pkg/hot.py:12"]),
                                      guard.debug_marks(tr), guard.sightings(tr))
    assert [s.allowed for s in syncs] == [True]


def test_marks_that_do_not_match_the_debug_records_merge_nothing_so_no_sync_is_dropped():
    tr = _item_trace(marks=2)  # two marks, one debug record: the evidence does not line up
    syncs = guard.one_record_per_sync(guard.from_debug_sites(["pkg/hot.py:12 step"]), guard.debug_marks(tr),
                                      guard.sightings(tr))
    assert [s.witnesses for s in syncs] == [(guard.DEBUG_MODE,), (guard.CUPTI,)]


def test_a_debug_record_merges_only_with_a_sync_made_since_the_threads_previous_mark():
    tr = _item_trace()
    tr["traceEvents"].append(_x(guard.DEBUG_MARK, "user_annotation", 60, 0))  # a second report, no call since
    syncs = guard.one_record_per_sync(guard.from_debug_sites(["pkg/hot.py:12 step", "pkg/hot.py:14 step"]),
                                      guard.debug_marks(tr), guard.sightings(tr))
    assert [(s.site, s.witnesses) for s in syncs] == [("pkg/hot.py:12 step", (guard.DEBUG_MODE, guard.CUPTI)),
                                                      ("pkg/hot.py:14 step", (guard.DEBUG_MODE,))]


def test_two_syncs_in_one_call_reported_after_it_merge_with_both_of_its_sightings():
    tr = _item_trace(marks=0)
    tr["traceEvents"] += [_x("cudaStreamSynchronize", "cuda_runtime", 29, 1, correlation=5),
                          _x("Stream Sync", "cuda_sync", 29, 1, pid=0, tid=7, correlation=5),
                          _x(guard.DEBUG_MARK, "user_annotation", 31, 0), _x(guard.DEBUG_MARK, "user_annotation", 32, 0)]
    syncs = guard.one_record_per_sync(guard.from_debug_sites(["pkg/hot.py:12 step"] * 2), guard.debug_marks(tr),
                                      guard.sightings(tr))
    assert [s.witnesses for s in syncs] == [(guard.DEBUG_MODE, guard.CUPTI)] * 2


# --- the context manager's control flow, with a simulated CUDA and a simulated witness -------------
@pytest.fixture
def fake_cuda(monkeypatch):
    """CUDA 'available' and sync debug mode replaced by a witness that reports `fired` sites."""
    fired: list = []

    @contextlib.contextmanager
    def fake_sites(on_sync=None):
        c = Counter()
        yield c
        for site in fired:
            c[site] += 1
            if on_sync is not None:
                on_sync(site)

    monkeypatch.setattr(guard.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(guard._syncs, "sync_debug_sites", fake_sites)
    return fired


def test_guard_fails_with_the_first_site(fake_cuda):
    fake_cuda += [SITE, "pkg/hot.py:40 helper"]
    with pytest.raises(guard.HostSyncError, match=r"^host sync at gallery/cases.py:116 seq_lens_sum_item "):
        with guard.no_host_syncs(cupti=False):
            pass


def test_guard_counting_mode_reports_instead_of_failing(fake_cuda):
    fake_cuda += [SITE, SITE]
    with guard.no_host_syncs(count=True, cupti=False) as rep:
        pass
    assert len(rep.violations) == 2 and rep.checked == (guard.DEBUG_MODE,)
    assert "2 host syncs not allowed" in rep.summary()


def test_guard_passes_allowed_syncs_and_clean_blocks(fake_cuda):
    fake_cuda.append("gallery/cases.py:290 read_back")
    with guard.no_host_syncs(allow=["read_back"], cupti=False) as rep:
        pass
    assert rep.count(allowed=True) == 1 and not rep.violations


def test_guard_lets_the_blocks_own_exceptions_through(fake_cuda):
    fake_cuda.append(SITE)
    with pytest.raises(KeyError):
        with guard.no_host_syncs(cupti=False):
            raise KeyError("mine")


def test_without_cuda_the_guard_warns_that_nothing_was_checked(monkeypatch):
    monkeypatch.setattr(guard.torch.cuda, "is_available", lambda: False)
    ran = []
    with pytest.warns(guard.NoCudaWarning, match="nothing was checked"):
        with guard.no_host_syncs() as rep:
            ran.append(1)
    assert ran == [1] and rep.checked == () and rep.summary() == guard.NO_CUDA_MESSAGE


def test_without_cuda_strict_fails(monkeypatch):
    monkeypatch.setattr(guard.torch.cuda, "is_available", lambda: False)
    with pytest.raises(guard.NoCudaError, match="no CUDA device"):
        with guard.no_host_syncs(strict=True):
            pass


def test_the_pytest_fixture_is_the_guard(no_host_syncs, monkeypatch):  # noqa: F811
    monkeypatch.setattr(guard.torch.cuda, "is_available", lambda: False)
    with pytest.warns(guard.NoCudaWarning):
        with no_host_syncs():
            pass
    with pytest.raises(guard.NoCudaError):
        with no_host_syncs(strict=True):
            pass


_PLUGIN_USER = """
from dspark_lab import guard


def test_the_fixture_is_the_guard_with_the_option(no_host_syncs):
    assert no_host_syncs.func is guard.no_host_syncs and no_host_syncs.keywords == {"strict": True}
"""


def test_the_declared_entry_point_gives_pytest_the_fixture_and_its_option(tmp_path):
    """The module pyproject declares under pytest11, loaded by pytest itself in a fresh process."""
    import tomllib

    pp = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugin = pp["project"]["entry-points"]["pytest11"]["dspark_lab"]
    (tmp_path / "test_user.py").write_text(_PLUGIN_USER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # only the declared one
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", plugin, "-p", "no:cacheprovider",
                        "--no-host-syncs-strict", str(tmp_path / "test_user.py")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr


# --- on a GPU ----------------------------------------------------------------------------------------
@pytest.mark.cuda
def test_sync_debug_mode_names_the_exact_line_of_an_item():
    x = torch.ones(4, device="cuda")
    with guard.no_host_syncs(count=True, cupti=False) as rep:
        x.sum().item(); line = _line()  # noqa: E702
    assert [s.site for s in rep.syncs] == [f"tests/test_guard.py:{line} test_sync_debug_mode_names_the_exact_line_of_an_item"]


def _line() -> int:
    import inspect

    return inspect.currentframe().f_back.f_lineno


@pytest.mark.cuda
def test_one_item_is_one_sync_naming_the_exact_line_seen_by_two_witnesses():
    x = torch.ones(4, device="cuda")
    x.sum().item()  # warm up outside the guard
    with guard.no_host_syncs(count=True) as rep:
        x.sum().item(); line = _line()  # noqa: E702
    assert len(rep.violations) == 1 and rep.count() == 1, rep.summary()
    s = rep.syncs[0]
    assert s.site == f"tests/test_guard.py:{line} test_one_item_is_one_sync_naming_the_exact_line_seen_by_two_witnesses"
    assert s.witnesses == (guard.DEBUG_MODE, guard.CUPTI) and s.kind == "stream"


@pytest.mark.cuda
def test_cupti_sees_a_driver_sync_that_sync_debug_mode_cannot():
    torch.cuda.init()
    torch.ones(1, device="cuda")
    libcuda = ctypes.CDLL("libcuda.so.1")
    with guard.no_host_syncs(count=True, cupti=False) as blind:
        assert libcuda.cuCtxSynchronize() == 0
    with guard.no_host_syncs(count=True, debug_mode=False) as seen:
        assert libcuda.cuCtxSynchronize() == 0
    assert blind.syncs == []
    assert [(s.kind, s.seen_by) for s in seen.syncs] == [("device", guard.CUPTI)]
    assert seen.syncs[0].site.endswith("test_cupti_sees_a_driver_sync_that_sync_debug_mode_cannot")


GALLERY_SITE = re.compile(r"gallery/\w+\.py:")  # a line of the gallery's case modules
# Compiled code: the read runs in Dynamo's frame of the function, or (capture_scalar_outputs) in the
# module Inductor generated, so only the count is checked there, not the line.
COMPILED = {d["name"] for d in compiled_cases.COMPILED_CASES}


def _sites_are_the_cases(name: str, syncs) -> bool:
    return name in COMPILED or all(GALLERY_SITE.match(x.site) for x in syncs)


@pytest.mark.cuda
@pytest.mark.parametrize("name", names())
def test_guard_catches_each_gallery_case_and_passes_its_fix(name):
    """The guard fails on a case that syncs, naming its line, and passes its fix (with the fix's
    by-design sites allowed). A counter-example whose step makes no sync (a race whose fix adds the
    wait) passes the guard as it stands, and its fix's waits are the ones the guard finds; one whose fix
    keeps its wait (defers it) fails on the case, and the guard finds the fix's wait too."""
    case = get(name)
    s = make_state("cuda", "smoke")
    case.step(s), case.fix(s)  # warm up outside the guard
    if case.expected_syncs == 0:
        with guard.no_host_syncs(allow=case.allow):
            case.step(s)
        with guard.no_host_syncs(count=True) as rep:  # the fix's wait is by design (allowed), but made
            case.fix(s)
        assert rep.count(allowed=False) == case.fix_expected_syncs, rep.summary()
        return
    with pytest.raises(guard.HostSyncError) as err:
        with guard.no_host_syncs(allow=case.allow):
            case.step(s)
    assert name in COMPILED or GALLERY_SITE.search(str(err.value).splitlines()[0])
    # The fix's waits are its by-design (allowed) sites, unless it is a counter-example that keeps the case's
    # wait (defers it, allowing nothing): then the guard finds each of them.
    with guard.no_host_syncs(allow=case.allow, count=True) as rep:
        case.fix(s)
    assert rep.count(allowed=False) == (0 if case.allow else case.fix_expected_syncs), rep.summary()
    if case.allow:
        with guard.no_host_syncs(count=True) as rep:  # without the allow-list: only the by-design sites
            case.fix(s)
        assert all(x.site.split(" ")[-1] in case.allow for x in rep.syncs)


@pytest.mark.cuda
@pytest.mark.parametrize("name", names())
def test_guard_counts_each_gallery_sync_once_however_many_witnesses_saw_it(name):
    case = get(name)
    s = make_state("cuda", "smoke")
    case.step(s)  # warm up outside the guard
    with guard.no_host_syncs(count=True, allow=case.allow) as rep:
        case.step(s)
    assert rep.count(allowed=False) == case.expected_syncs, rep.summary()  # a by-design read-back is not documented
    assert _sites_are_the_cases(name, rep.syncs), rep.summary()


@pytest.mark.cuda
def test_a_fresh_pinned_tensor_per_step_is_no_host_sync_though_cupti_files_an_event_record():
    """The caching host allocator polls earlier copies' events (cudaEventQuery) when a pinned tensor
    is made; CUPTI may file that poll as an "Event Sync". The host does not wait: the queued work is
    still running after the loop, and the guard reports nothing."""
    from dspark_lab.measure import probe, trace

    def steps() -> bool:
        done = torch.cuda.Event()
        probe.busy_kernel(20.0)
        for k in range(4):
            torch.tensor([1, 2, 3, k], pin_memory=True).to("cuda", non_blocking=True)
        done.record()
        return not done.query()

    probe.calibrate_sleep()
    steps()
    with guard.no_host_syncs(count=True) as rep:
        still_running = steps()
    assert still_running and rep.count() == 0, rep.summary()
    with trace.profiled() as out:
        assert steps()
    ev = trace.events(out["trace"])
    api = ev[ev.cat.isin(trace.HOST_API_CATS)]
    name_of = dict(zip(api.correlation, api.name))
    records = ev[(ev.cat == "cuda_sync") & ev.name.str.contains("Event Sync")]
    assert {name_of.get(c, "no call recorded") for c in records.correlation} <= guard.NON_BLOCKING_QUERIES, records
