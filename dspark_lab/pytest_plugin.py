"""pytest plugin: the `no_host_syncs` fixture, so a test can assert that a hot path is sync-free, and
the `races` fixture, so a test can assert that a fix removing a sync did not make a race.

    def test_decode_step_is_sync_free(no_host_syncs):
        step()  # warm up outside the guard (first calls allocate, compile, autotune)
        with no_host_syncs(allow=["read_back"]):
            step()

Registered through the `pytest11` entry point when dspark-lab is installed; without installing,
add `pytest_plugins = ["dspark_lab.pytest_plugin"]` to your top-level conftest.py.
The `--no-host-syncs-strict` option makes the fixture fail on machines without CUDA instead of
warning that nothing was checked.

    def test_fix_has_no_race(races):
        races(make_step)  # a factory: each run gets a fresh step; the step takes no argument or the step index

`races` runs the step under queued GPU work against a synchronized reference (dspark_lab.measure.races)
and fails the test on any output that differs, naming the step, the output and the copy; it returns the
report. `--races-strict` makes it fail without CUDA instead of warning that nothing was checked.
"""
from __future__ import annotations

import functools
import warnings

import pytest

from dspark_lab.guard import no_host_syncs as _guard
from dspark_lab.measure import races as _races


def pytest_addoption(parser):
    parser.addoption("--no-host-syncs-strict", action="store_true", default=False,
                     help="no_host_syncs fixture: fail without CUDA instead of warning that nothing was checked")
    parser.addoption("--races-strict", action="store_true", default=False,
                     help="races fixture: fail without CUDA instead of warning that nothing was checked")


@pytest.fixture
def no_host_syncs(request):
    """The guard `dspark_lab.guard.no_host_syncs`, with strict=... from --no-host-syncs-strict by default."""
    strict = bool(request.config.getoption("--no-host-syncs-strict", default=False))
    return functools.partial(_guard, strict=strict)


def check_races(make_step, *, steps: int = 40, hooks=None, queued_ms: float = _races.DEFAULT_QUEUED_MS,
                strict: bool = False) -> dict:
    """measure.races.check, failing (RaceError) on a race; without CUDA and hooks: warns, or with
    strict=True fails, that nothing was checked."""
    rep = _races.check(make_step, steps=steps, hooks=hooks, queued_ms=queued_ms)
    if not rep["checked"]:
        if strict:
            pytest.fail(rep["note"])
        warnings.warn(rep["note"], _races.NoCudaRaceWarning, stacklevel=2)
    elif rep["races"]:
        raise _races.RaceError(_races.describe(rep))
    return rep


@pytest.fixture
def races(request):
    """check_races, with strict=... from --races-strict by default."""
    strict = bool(request.config.getoption("--races-strict", default=False))
    return functools.partial(check_races, strict=strict)
