"""Reading a file the kit did not necessarily make: only a regular file, and only up to a size bound.

A FIFO would block a read forever, a device such as /dev/zero (or a symlink to it) would be read
until memory runs out, and a file that keeps growing likewise. `read_regular(path, limit)` opens
without blocking (O_NONBLOCK: opening a FIFO returns at once), checks what the open descriptor is
(so a symlink swapped in between a check and the open changes nothing) and reads at most `limit`
bytes. Every refusal is an OSError whose strerror says why, so callers that already turn an OSError
into one line ("cannot read it (...)") say it without a change.
"""
from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MiB = 1 << 20
RUN_FILE_LIMIT = 1024 * MiB  # a run file: a long sweep's rows and timelines are tens of MiB
CACHE_ENTRY_LIMIT = 2048 * MiB  # a cache bundle holds every row of a load (500 runs: ~100 MiB)
JSON_FILE_LIMIT = 64 * MiB  # a card, an inspect record, calibration.json: a few KiB to a few MiB
SIDECAR_LIMIT = 4096  # a hash in hex


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")


@contextmanager
def open_regular(path: str | os.PathLike) -> Iterator:
    """A binary file object of `path`, opened without blocking; OSError when it is not a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"is {_kind(mode)}, not a regular file", os.fspath(path))
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of the regular file `path`, or OSError: not a regular file, or more than `limit` bytes."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise OSError(errno.EFBIG, f"is {size} bytes, more than the {limit} read", os.fspath(path))
        data = f.read(limit + 1)
    if len(data) > limit:  # grew while read
        raise OSError(errno.EFBIG, f"holds more than the {limit} bytes read", os.fspath(path))
    return data


def read_regular_text(path: str | os.PathLike, limit: int = JSON_FILE_LIMIT) -> str:
    """read_regular decoded as UTF-8 (UnicodeDecodeError, a ValueError, when it is not)."""
    return read_regular(path, limit).decode("utf-8")


def lexists_not_regular(path: Path) -> bool:
    """Something is at `path` (never followed) and it is not a regular file."""
    try:
        return not stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
