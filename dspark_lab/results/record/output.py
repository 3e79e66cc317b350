"""Writing a derived file (the HTML report) without ever harming recorded data.

`write_text_safely(path, text)` refuses to overwrite a run file (*.jsonl, or any file whose first
line is a run header) or to write into a runs folder (one holding run files, or named runs/), refuses
to replace anything that is not a regular file (a device node such as /dev/null or /dev/full, a
FIFO, a socket, a symlink: renaming over it would replace the node), judges the path where it lands
(its folder resolved, "..", symlinks and folders yet to be made included), and
turns every OS failure (a name too long included) (a directory in the way, a parent that is a file, no permission, a
read-only or full disk) into one OutputError naming the path. Missing parent folders are created.
The text is written to a temporary file beside the target and renamed over it, so a full disk
never leaves half a report.
"""
from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

from dspark_lab.results.record.paths import resolved_parent
from dspark_lab.results.record.records import RUN_SUFFIX


class OutputError(Exception):
    """The output cannot or must not be written; `refused` is True when writing would harm data."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


def is_run_file(path: Path) -> bool:
    """A *.jsonl file, or any file whose first line parses as a run header record."""
    if path.suffix == RUN_SUFFIX:
        return True
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 16)
        rec = json.loads(first.decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(rec, dict) and rec.get("kind") == "header"


def is_runs_folder(folder: Path) -> bool:
    """A folder named runs/, or one that holds a run file."""
    if folder.name == "runs":
        return True
    try:
        return any(is_run_file(p) for p in folder.glob(f"*{RUN_SUFFIX}") if p.is_file())
    except OSError:
        return False


def _not_regular(path: Path):
    """What `path` is when it exists and is not a regular file (never followed: a symlink is one), else None."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there (a parent that is a file: said later)
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kinds = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def check_output(path: Path) -> None:
    """Raise OutputError if `path` must not or cannot be written (before any work is done); the
    path is judged where it lands (paths.resolved_parent), never through a folder yet to be made."""
    path = _landing(path)
    try:
        _check_output(path)
    except OSError as e:  # ENAMETOOLONG, EACCES on a parent, ELOOP: cannot be written
        raise OutputError(f"{_short(path)}: cannot write it ({e.strerror or e})") from None


def _landing(path) -> Path:
    path = Path(path)
    if path.name in ("", ".", ".."):
        raise OutputError(f"{path}: names a folder; give a file name such as {path / 'report.html'}")
    try:
        return resolved_parent(path)
    except (OSError, RuntimeError, ValueError) as e:  # a loop, a NUL byte
        raise OutputError(f"{_short(path)}: cannot be resolved ({getattr(e, 'strerror', None) or e})") from None


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 200 else text[:100] + "..." + text[-60:]


def _check_output(path: Path) -> None:
    odd = _not_regular(path)
    if odd is not None:
        raise OutputError(f"{path}: is {odd}; refusing to replace it (give a regular file path)", refused=True)
    if path.is_dir():
        raise OutputError(f"{path}: is a directory; give a file name such as {path / 'report.html'}")
    if path.suffix == RUN_SUFFIX or (path.is_file() and is_run_file(path)):
        raise OutputError(f"{path}: is a run file; refusing to overwrite recorded data", refused=True)
    parent = path.parent
    for p in [parent, *parent.parents]:
        if p.exists():
            if not p.is_dir():
                raise OutputError(f"{path}: {p} is a file, not a folder")
            break
    if parent.is_dir() and is_runs_folder(parent):
        raise OutputError(f"{path}: {parent} is a runs folder; write the report elsewhere (e.g. out/)", refused=True)


def write_text_safely(path: Path, text: str) -> Path:
    path = _landing(path)  # folders made below are the ones the check saw
    check_output(path)  # checked again just before the rename below replaces it
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{path}: cannot create its folder ({e.strerror or e})") from None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
        odd = _not_regular(path)  # made a node while the text was written? still never replaced
        if odd is not None:
            raise OutputError(f"{path}: is {odd}; refusing to replace it (give a regular file path)", refused=True)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise OutputError(f"{_short(path)}: cannot write it ({e.strerror or e})") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path
