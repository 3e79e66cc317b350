"""A persistent group of rank processes that the Python kernel (or a CLI) talks to.

`WorkerGroup(world_size, backend)` starts one process per rank (`python -m
dspark_lab.parallel.workers`), joined by torch.distributed (NCCL on GPUs, gloo on CPU). The parent
sends every rank the same request `(function, kwargs)` through the rank's stdin (its request
queue), and each rank answers on a private pipe; `call` waits for all ranks, `submit` coalesces
(the latest setting wins: a request still waiting when a newer one arrives is dropped, so all
ranks always run the same sequence of collectives). A request may stream: rank 0 sends
`ctx.emit(obj)` partials ahead of its answer (`call(..., on_partial=)`), and `cancel()` asks the
running request to stop (the ranks agree on it at their next check; parallel.run.live_ranks).

No worker outlives its parent: each worker asks the kernel for SIGKILL when its parent dies
(prctl PR_SET_PDEATHSIG), a watchdog thread polls the parent pid (covers the race before prctl
and non-Linux), stdin closing ends it, and `close()` (also at exit) kills the workers' process
group. The workers are started from a dedicated thread that lives as long as the group, because
PR_SET_PDEATHSIG fires when the *thread* that started the child ends.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import importlib
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

# Kept in every process that may touch NCCL on the lent machines.
NCCL_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
BACKENDS = ("auto", "gloo", "nccl")
_HEADER = struct.Struct("!Q")
PR_SET_PDEATHSIG = 1
# Every wait on the ranks is bounded: a request without its own timeout gets this one,
# and while waiting the ranks are watched, so one that died or was stopped (SIGSTOP) ends the
# wait at once with a WorkerError naming it instead of hanging the parent.
DEFAULT_CALL_TIMEOUT_S = 3600.0
WATCH_EVERY_S = 0.5


def apply_nccl_safe_env(env: Optional[dict] = None) -> dict:
    env = os.environ if env is None else env
    for k, v in NCCL_SAFE_ENV.items():
        env[k] = v
    return env


def _send(f, obj: Any) -> None:
    data = pickle.dumps(obj)
    f.write(_HEADER.pack(len(data)) + data)
    f.flush()


def _recv(f) -> Any:
    head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("pipe closed")
    n = _HEADER.unpack(head)[0]
    data = f.read(n)
    if len(data) < n:
        raise EOFError("pipe closed mid-message")
    return pickle.loads(data)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if backend != "auto":
        return backend
    import torch  # here, not at the top: the parent of the ranks needs no torch until it asks

    return "nccl" if torch.cuda.is_available() else "gloo"


def device_count() -> int:
    """How many ranks can run for real here: one per GPU (CPU-only: gloo ranks on the host)."""
    import torch  # as in resolve_backend

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class WorkerError(RuntimeError):
    """A request failed on a rank; the message carries the rank and its traceback."""


class WorkerGroup:
    def __init__(self, world_size: int, backend: str = "auto", *, start_timeout_s: float = 120.0,
                 log_path: Optional[str] = None):
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer; got {world_size!r}")
        self.world_size = world_size
        self.backend = resolve_backend(backend)
        self.start_timeout_s = start_timeout_s
        self.log_path = log_path
        self.procs: list[subprocess.Popen] = []
        self.info: list[dict] = []
        self._lock = threading.Lock()  # one request in flight
        self._spawned = threading.Event()
        self._closing = threading.Event()
        self._spawn_error: Optional[BaseException] = None
        self._pending: Optional[tuple] = None
        self._pending_cv = threading.Condition()
        self._dispatcher: Optional[threading.Thread] = None
        self.spawner: Optional[threading.Thread] = None  # the workers' parent thread (PR_SET_PDEATHSIG)
        self.pgid: Optional[int] = None
        self._requests = 0  # requests sent; the workers count the same (their ctx.request)
        self._cancel_file: Optional[str] = None

    # -- life cycle ---------------------------------------------------------------------------
    def _rank_env(self) -> dict:
        """The environment every rank process starts with (RANK is added per process)."""
        env = apply_nccl_safe_env(dict(os.environ))
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(self.world_size),
                   DSPARK_BACKEND=self.backend, DSPARK_PARENT_PID=str(os.getpid()),
                   DSPARK_CANCEL_FILE=self._cancel_file)
        return env

    def start(self) -> "WorkerGroup":
        if self.procs:
            return self
        self._closing.clear()  # a restarted group gets a spawner thread that lives again
        self._spawned.clear()
        self._spawn_error = None
        self._dispatcher = None
        fd, self._cancel_file = tempfile.mkstemp(prefix="dspark-cancel-")
        os.close(fd)
        self._requests = 0
        env = self._rank_env()
        log = open(self.log_path, "ab") if self.log_path else None

        def spawn() -> None:
            try:
                for r in range(self.world_size):
                    pg = 0 if r == 0 else self.pgid
                    if sys.version_info >= (3, 11):
                        group_kw = {"process_group": pg}
                    else:  # older Pythons: set the group in the child before exec
                        group_kw = {"preexec_fn": lambda pg=pg: os.setpgid(0, pg)}
                    p = subprocess.Popen(
                        [sys.executable, "-m", "dspark_lab.parallel.workers"], env={**env, "RANK": str(r)},
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, **group_kw)
                    if r == 0:
                        self.pgid = p.pid
                    self.procs.append(p)
            except BaseException as e:  # noqa: BLE001 - reported to start()
                self._spawn_error = e
            self._spawned.set()
            self._closing.wait()  # PR_SET_PDEATHSIG is tied to this thread: keep it alive

        self.spawner = threading.Thread(target=spawn, name="dspark-ep-spawner", daemon=True)
        self.spawner.start()
        if not self._spawned.wait(self.start_timeout_s):
            self._spawn_error = TimeoutError(f"the {self.world_size} rank processes were not started within "
                                             f"{self.start_timeout_s} s")
        if self._spawn_error:
            self.close()
            raise self._spawn_error
        atexit.register(self.close)
        try:
            self.info = self._collect(self.start_timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def close(self, timeout_s: float = 5.0) -> None:
        """Ask the workers to exit, then kill their process group (only ours: its id is our first worker's)."""
        if not self.procs:
            self._closing.set()
            return
        with self._pending_cv:
            self._pending = None
            self._pending_cv.notify_all()
        for p in self.procs:
            try:
                _send(p.stdin, ("exit", None, None))
                p.stdin.close()
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self.procs:
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdout,):
                try:
                    f.close()
                except OSError:
                    pass
        self.procs = []
        self._closing.set()
        if self._cancel_file:
            try:
                os.unlink(self._cancel_file)
            except OSError:
                pass
            self._cancel_file = None
        if self.spawner is not None and self.spawner is not threading.current_thread():
            self.spawner.join(timeout_s)  # it only waits for _closing: a closed group has no spawner left
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self) -> "WorkerGroup":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests -----------------------------------------------------------------------------
    def _collect(self, timeout_s: Optional[float], on_partial: Optional[Callable[[Any], None]] = None) -> list:
        out: list = [None] * len(self.procs)
        errors = []
        box: dict = {}

        def read_all() -> None:
            for r, p in enumerate(self.procs):
                try:
                    out[r] = _recv(p.stdout)
                    while out[r][0] == "partial":  # streamed ahead of the answer, in order
                        if on_partial is not None:
                            on_partial(out[r][1])
                        out[r] = _recv(p.stdout)
                except BaseException as e:  # noqa: BLE001
                    box.setdefault("err", (r, e))
                    return

        t = threading.Thread(target=read_all, daemon=True)
        t.start()
        self._watch(t, DEFAULT_CALL_TIMEOUT_S if timeout_s is None else timeout_s)
        if "err" in box:
            r, e = box["err"]
            codes = [p.poll() for p in self.procs]
            raise WorkerError(f"rank {r} stopped answering ({e}); exit codes {codes}")
        for r, (status, payload) in enumerate(out):
            if status != "ok":
                errors.append(f"rank {r}: {payload}")
        if errors:
            raise WorkerError("\n".join(errors))
        return [payload for _, payload in out]

    def _watch(self, reader: threading.Thread, timeout_s: float) -> None:
        """Wait for `reader` (reading every rank's answer) at most `timeout_s`; WorkerError as soon as
        a rank has exited or is seen stopped on two checks in a row (SIGSTOP, a debugger), TimeoutError
        at the end."""
        deadline = time.monotonic() + timeout_s
        seen_stopped: set = set()
        while reader.is_alive():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"ranks did not answer within {timeout_s} s")
            reader.join(min(WATCH_EVERY_S, left))
            if not reader.is_alive():
                return
            dead = [(r, p.poll()) for r, p in enumerate(self.procs) if p.poll() is not None]
            if dead:  # the others may wait for it in a collective for ever (NCCL does)
                r, code = dead[0]
                raise WorkerError(f"rank {r} stopped answering (it exited with {code}); the group is closed")
            stopped = {r for r, p in enumerate(self.procs) if is_stopped(p.pid)}
            both = stopped & seen_stopped
            if both:
                r = min(both)
                raise WorkerError(f"rank {r} (pid {self.procs[r].pid}) is stopped (SIGSTOP or a debugger) "
                                  "and cannot answer; the group is closed")
            seen_stopped = stopped

    def call(self, fn: Callable, timeout_s: Optional[float] = None, on_partial: Optional[Callable[[Any], None]] = None,
             **kwargs) -> list:
        """Run `fn(ctx, **kwargs)` on every rank (ctx: ranks.RankContext); returns each rank's result.
        Waits at most `timeout_s` (default DEFAULT_CALL_TIMEOUT_S); a dead or stopped rank: WorkerError.
        `on_partial(obj)` gets what the ranks `ctx.emit` before answering (on a reader thread; an
        exception it raises is reported as that rank not answering, so it should not raise)."""
        if not self.alive():
            raise WorkerError("the worker group is not running (start() it, or it has exited)")
        with self._lock:
            self._requests += 1
            for p in self.procs:
                _send(p.stdin, ("call", f"{fn.__module__}:{fn.__qualname__}", kwargs))
            try:
                return self._collect(timeout_s, on_partial)
            except WorkerError as e:
                if "stopped answering" in str(e) or "is stopped" in str(e):
                    self.close()
                raise
            except BaseException:
                # Timeout or interrupt: a late answer would be read as the next one's, so the group is done.
                self.close()
                raise

    def cancel(self) -> None:
        """Ask the request now running to stop: the ranks read its number at their next check
        (ranks.RankContext.cancel_requested) and end it there, all at the same point."""
        if self._cancel_file:
            tmp = self._cancel_file + ".new"
            with open(tmp, "w") as f:
                f.write(str(self._requests))
            os.replace(tmp, self._cancel_file)  # read whole or not at all

    def submit(self, fn: Callable, **kwargs) -> concurrent.futures.Future:
        """Queue a request; a queued one not yet sent is superseded (its future is cancelled)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._pending_cv:
            if self._pending is not None:
                self._pending[2].cancel()
            self._pending = (fn, kwargs, fut)
            self._pending_cv.notify_all()
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(target=self._dispatch_loop, name="dspark-ep-dispatch", daemon=True)
                self._dispatcher.start()
        return fut

    def _dispatch_loop(self) -> None:
        while not self._closing.is_set():
            with self._pending_cv:
                while self._pending is None and not self._closing.is_set():
                    self._pending_cv.wait(0.5)
                if self._closing.is_set():
                    return
                fn, kwargs, fut = self._pending
                self._pending = None
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(self.call(fn, **kwargs))
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)


def is_stopped(pid: int) -> bool:
    """The process is stopped (state T) or traced-stopped (t), from /proc (Linux; elsewhere False)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")


# -- the worker process ---------------------------------------------------------------------------

def die_with_parent(parent: int) -> None:
    """SIGKILL this process when `parent` dies (the ranks of both launchers: WorkerGroup, torchrun)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, name="dspark-parent-watchdog", daemon=True).start()


def _resolve(path: str) -> Callable:
    module, _, name = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def worker_main() -> None:
    die_with_parent(int(os.environ["DSPARK_PARENT_PID"]))
    # The protocol owns the original stdout; anything printed goes to stderr.
    reply = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    # After the death guard: loading torch takes seconds, and the worker must not outlive its parent meanwhile.
    from dspark_lab.parallel.ranks import init_rank

    try:
        ctx = init_rank(os.environ["DSPARK_BACKEND"])
        _send(reply, ("ok", ctx.describe()))
    except BaseException:  # noqa: BLE001
        _send(reply, ("error", traceback.format_exc()))
        return
    ctx.emit = lambda obj: _send(reply, ("partial", obj))
    while True:
        try:
            kind, fn, kwargs = _recv(requests)
        except EOFError:
            break
        if kind == "exit":
            break
        ctx.request += 1  # as the parent counts them (WorkerGroup.cancel names one)
        try:
            _send(reply, ("ok", _resolve(fn)(ctx, **kwargs)))
        except BaseException:  # noqa: BLE001 - reported to the parent, the rank stays up
            _send(reply, ("error", traceback.format_exc()))
    ctx.shutdown()
    os._exit(0)


if __name__ == "__main__":
    worker_main()
