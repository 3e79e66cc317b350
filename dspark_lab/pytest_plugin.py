"""pytest plugin: the `no_host_syncs` fixture, so a test can assert that a hot path is sync-free.

    def test_decode_step_is_sync_free(no_host_syncs):
        step()  # warm up outside the guard (first calls allocate, compile, autotune)
        with no_host_syncs(allow=["read_back"]):
            step()

Registered through the `pytest11` entry point when dspark-lab is installed; without installing,
add `pytest_plugins = ["dspark_lab.pytest_plugin"]` to your top-level conftest.py.
The `--no-host-syncs-strict` option makes the fixture fail on machines without CUDA instead of
warning that nothing was checked.
"""
from __future__ import annotations

import functools

import pytest

from dspark_lab.guard import no_host_syncs as _guard


def pytest_addoption(parser):
    parser.addoption("--no-host-syncs-strict", action="store_true", default=False,
                     help="no_host_syncs fixture: fail without CUDA instead of warning that nothing was checked")


@pytest.fixture
def no_host_syncs(request):
    """The guard `dspark_lab.guard.no_host_syncs`, with strict=... from --no-host-syncs-strict by default."""
    strict = bool(request.config.getoption("--no-host-syncs-strict", default=False))
    return functools.partial(_guard, strict=strict)
