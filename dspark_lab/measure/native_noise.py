"""The profiler's own native messages, kept out of progress bars and notebook output.

Starting and stopping torch.profiler prints from C++ straight to file descriptor 2 lines a newcomer
reads as errors, though none is: "USDT ... profiler_start" probes, a CPUAllocator notice, and CUPTI's
"ERROR: External init callback must run in same thread as registerClient" (CUPTI is initialised on
the profiler's thread; the trace is complete). Python's warnings cannot catch them, so fd 2 is
redirected while the profiler starts and stops (never around the user's own code), the known lines
are dropped and every other line is written back to stderr unchanged.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

KNOWN_NOISE = (
    re.compile(r"USDT"),
    re.compile(r"CPUAllocator"),
    re.compile(r"External init callback must run in same thread as registerClient"),
)


def is_noise(line: str) -> bool:
    return any(p.search(line) for p in KNOWN_NOISE)


@contextlib.contextmanager
def native_stderr_filtered() -> Iterator[None]:
    """Inside the block, what is written to fd 2 is collected; on exit every line that is not
    KNOWN_NOISE is written back to stderr."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stderr without a descriptor: nothing native reaches it
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode(errors="replace").splitlines(keepends=True) if not is_noise(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
