"""A named target inspected in a worker process that a time limit can stop.

`inspect_target("file.py:step")` and `diff_targets(a, b)` start a fresh interpreter (spawn: CUDA
cannot be forked, and a target stuck in a loop or a C call can only be stopped by killing its
process), load the target(s) there, measure them with run/inspect.py, and hand back the records.
The time limit covers loading and measuring the targets (the measurement's own imports
included), not the interpreter's start. Every failure comes back as one TargetError line naming
the target; nothing is written here.

This module imports only run/target.py: the worker loads the target before torch and the
measurement are imported, so a target that does not import fails fast.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from typing import Iterable

from dspark_lab.run import target as _target

DEFAULT_TIME_LIMIT_S = 300.0
WORKER_START_S = 120.0  # the interpreter's start, not counted in the time limit


class WorkerTargetError(_target.TargetError):
    """A TargetError whose line was made in the worker (it already names the target)."""

    def __init__(self, line: str):
        Exception.__init__(self, line)
        self.target, self.reason = "", line


def _load(text: str):
    t = _target.parse(text)
    return t, _target.load_step(t), t.source_root()


def _load_factory(text: str):
    t = _target.parse(text)
    return t, _target.load_factory(t), None


def _measure(kind: str, loaded: list, opts: dict) -> tuple:
    from dspark_lab.run import inspect as inspect_run  # torch: only once the targets have loaded

    if kind == "inspect":
        (t, fn, root), = loaded
        return (inspect_run.inspect_step(fn, target=t.text, label=t.label, source_root=root, **opts),)
    if kind == "headroom":
        from dspark_lab.run import headroom  # torch: only once the target has loaded
        (t, fn, root), = loaded
        return (headroom.headroom(fn, target=t.text, label=t.label, source_root=root, **opts),)
    if kind == "races":
        from dspark_lab.measure import races  # torch: only once the target has loaded
        (t, (make, fresh), _), = loaded
        return ({**races.check(make, **opts), "target": t.text, "fresh_state": fresh},)
    (ta, fa, ra), (tb, fb, rb) = loaded
    labels = (ta.label, tb.label) if ta.label != tb.label else ("before", "after")
    return inspect_run.inspect_pair(fa, fb, targets=(ta.text, tb.text), labels=labels, source_roots=(ra, rb), **opts)


SEND_FAILED = 3  # the worker's exit status when it cannot send its answer (its pipe closed under it)


def _answer(kind: str, texts, opts: dict) -> tuple:
    """("ok", records) or ("error", line): whatever the target raises, KeyboardInterrupt and
    SystemExit included, is one line (the worker never prints a traceback above the parent's error)."""
    try:
        load = _load_factory if kind == "races" else _load
        return ("ok", _measure(kind, [load(x) for x in texts], opts))
    except _target.TargetError as e:
        return ("error", str(e))
    except BaseException as e:  # noqa: BLE001 -- measuring the target failed: say so in one line
        why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return ("error", f"target {' / '.join(texts)!r}: measuring it failed: {why}")


def _worker(conn, job: tuple) -> None:
    """In the worker: load the target(s), measure, send ("ok", records) or ("error", line)."""
    kind, texts, opts = job
    try:
        conn.send(("ready",))
        answer = _answer(kind, texts, opts)
        conn.send(answer)
        conn.close()
    except BaseException:  # noqa: BLE001 -- the pipe is gone (a target closed the descriptors): the exit status says it
        os._exit(SEND_FAILED)


def run_job(job: tuple, time_limit_s: float) -> tuple:
    """Run one job in a worker; its records, or WorkerTargetError / TargetError (one line)."""
    if not time_limit_s > 0:
        raise ValueError(f"time_limit_s must be > 0 seconds; got {time_limit_s!r}")
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(theirs, job), daemon=True)
    proc.start()
    theirs.close()
    names = " / ".join(job[1])
    try:
        if not ours.poll(WORKER_START_S):
            raise _target.TargetError(names, f"the worker process did not start within {WORKER_START_S:g} s")
        ours.recv()
        if not ours.poll(time_limit_s):
            raise _target.TargetError(names, f"ran past the time limit of {time_limit_s:g} s (stopped)")
        status, payload = ours.recv()
    except EOFError:
        proc.join(10)
        if proc.exitcode == SEND_FAILED:
            raise _target.TargetError(names, "the worker could not send its result back (did the target close "
                                      "file descriptors it did not open?)") from None
        raise _target.TargetError(names, f"the worker process died (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(10)
    if status != "ok":
        raise WorkerTargetError(payload)
    return payload


def inspect_target(text: str, *, steps: int = 20, trials: int = 5, warmup: int = 3, allow: Iterable[str] = (),
                   time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> dict:
    """The inspect record of a target, measured in a worker; TargetError (one line) when the target
    is bad or runs past `time_limit_s`."""
    _target.parse(text)  # a malformed name fails here, before any process starts
    opts = dict(steps=steps, trials=trials, warmup=warmup, allow=tuple(allow))
    return run_job(("inspect", (text,), opts), time_limit_s)[0]


def headroom_target(text: str, *, steps: int = 20, trials: int = 5, warmup: int = 3,
                    time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> dict:
    """The headroom record of a target (run/headroom.py), measured in a worker."""
    _target.parse(text)
    return run_job(("headroom", (text,), dict(steps=steps, trials=trials, warmup=warmup)), time_limit_s)[0]


def races_target(text: str, *, steps: int = 20, time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> dict:
    """The race check of a target (measure.races.check; a factory target gives each run a fresh step)."""
    _target.parse(text)
    return run_job(("races", (text,), dict(steps=steps)), time_limit_s)[0]


def diff_targets(before: str, after: str, *, steps: int = 20, trials: int = 5, warmup: int = 3,
                 allow: Iterable[str] = (), time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> tuple[dict, dict]:
    """Both targets' records from one worker, their trials interleaved (paired per round)."""
    _target.parse(before), _target.parse(after)
    opts = dict(steps=steps, trials=trials, warmup=warmup, allow=tuple(allow))
    a, b = run_job(("diff", (before, after), opts), time_limit_s)
    return a, b
