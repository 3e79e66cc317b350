"""A profiled pass analysed in a worker process, while the measuring process goes on timing.

Turning a trace into counts, the breakdown and a timeline (profile.analyse_strategies) is pure
Python and pandas: about 0.4-0.9 s for the live panel's five strategies on an H200's host, the
largest part of a live update after the timed steps (studies/live_panel/where_time_goes.py). In a thread it
would take the GIL from the timed steps and inflate their host time; in its own process it runs on
another core. run.live starts one worker per backend; run.point.measure_point sends it the trace's
file after the profiled pass and collects the result after the remaining timed rounds.

The worker is a fresh interpreter (`python -m dspark_lab.measure.analysis_worker FD`: no CUDA
state inherited, and unlike multiprocessing's spawn it never re-runs the caller's main script)
serving one job at a time over a multiprocessing pipe;
every reply carries its job's id, so a result the measuring process gave up on (a cancelled
setting) is dropped, never taken for the next job's. `close()` ends it (the panel's close); a
worker that died or answers with an error makes `result` raise WorkerFailed, and the caller
analyses in its own process.
"""
from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Optional, Sequence

READY = "ready"


def _stop(proc: subprocess.Popen, conn, timeout: float = 5.0) -> None:
    try:
        conn.send(None)
    except (OSError, ValueError):
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait(timeout)
    conn.close()


class WorkerFailed(RuntimeError):
    """The worker could not give this job's result (dead, too slow, or its analysis failed)."""


def _serve(conn) -> None:
    """The worker's loop: (job id, trace path, strategy names) in, (job id, "ok", result) or
    (job id, "error", text) out; None ends it."""
    # Ctrl-C (a notebook's interrupt, a shutdown) goes to the whole process group: the parent ends
    # this worker itself, so it neither dies mid-job nor prints a KeyboardInterrupt of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from dspark_lab.measure import profile  # imported here: the parent need not wait for it

    conn.send((None, READY, None))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        job_id, path, names = job
        try:
            conn.send((job_id, "ok", profile.analyse_strategies(path, list(names))))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which analyses itself
            conn.send((job_id, "error", f"{type(e).__name__}: {e}"))


class Job:
    """One submitted analysis; `result(timeout)` waits for it."""

    def __init__(self, worker: "AnalysisWorker", job_id: int):
        self.worker, self.id = worker, job_id

    def result(self, timeout: float) -> dict:
        return self.worker._wait(self.id, timeout)


class AnalysisWorker:
    """One analysis process, started at once: it imports pandas and the kit's trace readers (not
    torch), and takes jobs once it says it is ready; one submitted before is refused (WorkerFailed),
    and the caller analyses that one itself."""

    def __init__(self):
        self._conn, child = mp.Pipe()
        root = str(Path(__file__).resolve().parents[2])  # where dspark_lab is imported from here
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self._proc = subprocess.Popen([sys.executable, "-m", "dspark_lab.measure.analysis_worker", str(child.fileno())],
                                      pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL)
        child.close()
        # Ended by close(), or when this object is collected; and the worker ends by itself when
        # this process's end of the pipe closes (this process exits): nothing outlives the kit.
        self._stop = weakref.finalize(self, _stop, self._proc, self._conn)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ready = False  # its imports done (its first message)
        self.closed = False

    @property
    def alive(self) -> bool:
        return not self.closed and self._proc.poll() is None

    def submit(self, path: str, names: Sequence[str]) -> Job:
        """Send one trace file (profile.profile_strategies(..., keep_file=True)) to be analysed."""
        with self._lock:
            if not self.alive:
                raise WorkerFailed("the analysis worker is not running")
            try:
                ready = self._read_ready(0.0)
            except (OSError, EOFError):
                raise WorkerFailed("the analysis worker's pipe closed") from None
            if not ready:  # still importing: a job would wait behind that
                raise WorkerFailed("the analysis worker is still starting")
            job_id = next(self._ids)
            try:
                self._conn.send((job_id, str(path), list(names)))
            except (OSError, ValueError) as e:
                raise WorkerFailed(f"the analysis worker cannot take a job: {e}") from None
        return Job(self, job_id)

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the worker's imports; True when it takes jobs."""
        with self._lock:
            try:
                return self._read_ready(timeout)
            except (OSError, EOFError):
                return False

    def _read_ready(self, timeout: float) -> bool:
        """Take the worker's READY message if it comes within `timeout` s (under the lock)."""
        deadline = time.monotonic() + timeout
        while not self._ready and self.alive and self._conn.poll(max(deadline - time.monotonic(), 0.0)):
            self._ready = self._conn.recv()[1] == READY
        return self._ready

    def _wait(self, job_id: int, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                left = deadline - time.monotonic()
                if not self.alive:
                    raise WorkerFailed("the analysis worker ended")
                try:
                    ready = self._conn.poll(max(left, 0.0))
                except (OSError, EOFError):
                    raise WorkerFailed("the analysis worker's pipe closed") from None
                if not ready:
                    raise WorkerFailed(f"no result from the analysis worker within {timeout:g} s")
                try:
                    got_id, status, payload = self._conn.recv()
                except (OSError, EOFError):
                    raise WorkerFailed("the analysis worker's pipe closed") from None
                if got_id != job_id:  # a job given up on (its setting was cancelled): dropped. (READY
                    continue  # never comes here: submit takes it before it sends a job.)
                if status != "ok":
                    raise WorkerFailed(f"the analysis worker failed: {payload}")
                return payload

    def close(self) -> None:
        """End the worker: asked first, then terminated; nothing is left running."""
        self.closed = True
        self._stop()  # not under the lock: a wait in progress then fails, and its caller analyses

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid


if __name__ == "__main__":  # the worker process: its pipe's file descriptor is the argument
    _serve(Connection(int(sys.argv[1])))
