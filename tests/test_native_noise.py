"""The profiler's native messages are dropped from stderr; every other line written to fd 2 passes."""
from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import os, sys
from dspark_lab.measure.native_noise import native_stderr_filtered
with native_stderr_filtered():
    os.write(2, b"STAGE:2026-12-01 12:00:00 USDT probe profiler_start\n")
    os.write(2, b"[W CPUAllocator.cpp:249] Memory block of unknown size was allocated before the profiling started\n")
    os.write(2, b"ERROR: External init callback must run in same thread as registerClient (1 != 2)\n")
    os.write(2, b"a real problem the user must see\n")
print("stdout untouched")
sys.stderr.write("after the block\n")
"""


def test_known_profiler_noise_is_dropped_and_every_other_line_kept():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "stdout untouched\n"
    assert r.stderr == "a real problem the user must see\nafter the block\n"


def test_the_profiled_block_filters_its_own_start_and_stop_only():
    from dspark_lab.measure import trace

    with trace.profiled() as out:
        sum(range(1000))
    assert "trace" in out and out["trace"].get("traceEvents") is not None
