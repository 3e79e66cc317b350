"""The ranks' waits: a rank that is stopped (SIGSTOP) or killed ends the parent's wait with
a WorkerError naming it, and a rank that never answers ends it at the timeout; never a hang."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from dspark_lab.parallel.workers import WorkerError, WorkerGroup, is_stopped

SILENT_RANK = "import sys; sys.stdin.buffer.read()"  # reads its requests, never answers


@pytest.fixture
def silent_group():
    """A group of two rank processes that never answer (no torch: the wait is what is tested)."""
    group = WorkerGroup(2, "gloo")
    group.procs = [subprocess.Popen([sys.executable, "-c", SILENT_RANK], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                   for _ in range(2)]
    yield group
    for p in group.procs:
        p.kill()
        p.wait(10)


def test_case7_a_stopped_rank_ends_the_wait_with_its_name(silent_group):
    victim = silent_group.procs[1]
    victim.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(WorkerError, match=rf"^rank 1 \(pid {victim.pid}\) is stopped \(SIGSTOP or a debugger\)"):
            silent_group._collect(timeout_s=600)
        assert is_stopped(victim.pid)
    finally:
        victim.send_signal(signal.SIGCONT)


def test_case7_a_killed_rank_ends_the_wait_with_its_exit_code(silent_group):
    victim = silent_group.procs[1]
    victim.kill()
    victim.wait(10)
    with pytest.raises(WorkerError, match=r"^rank 1 stopped answering \(it exited with -9\)"):
        silent_group._collect(timeout_s=600)


def test_case7_ranks_that_never_answer_end_the_wait_at_its_timeout(silent_group):
    with pytest.raises(TimeoutError, match=r"^ranks did not answer within 0.2 s$"):
        silent_group._collect(timeout_s=0.2)
