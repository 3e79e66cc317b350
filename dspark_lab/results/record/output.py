"""Writing a derived file (the HTML report) without ever harming recorded data.

`write_text_safely(path, text)` refuses to overwrite a run file (*.jsonl, or any file whose first
line is a run header, or too long to tell) or to write into a runs folder (named runs/, or the data
dir's runs folder), refuses
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
from typing import Optional

from dspark_lab.printable import one_line
from dspark_lab.results.record.paths import resolved_parent, runs_dir
from dspark_lab.results.record.records import RUN_SUFFIX
from dspark_lab.results.record.regular_files import open_regular


class OutputError(Exception):
    """The output cannot or must not be written; `refused` is True when writing would harm data."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(one_line(message))  # a path may hold a newline or an escape: the error stays one line
        self.refused = refused


HEADER_PEEK = 1 << 16  # the first line is read this far to tell whether a file is a run file


def run_file_reason(path: Path) -> Optional[str]:
    """Why `path` is (or may be) a run file, or None: a *.jsonl name, a first line that parses as a
    run header, or a first line longer than HEADER_PEEK that opens a JSON object (it cannot be told
    apart from a header without reading it whole: treated as one, never overwritten)."""
    if path.suffix == RUN_SUFFIX:
        return "is a run file"
    try:
        with open_regular(path) as f:
            first = f.readline(HEADER_PEEK + 1)
    except OSError:
        return None
    if len(first) > HEADER_PEEK and not first.endswith(b"\n"):
        opens = first.lstrip(b"\xef\xbb\xbf \t\r").startswith(b"{")
        return f"may be a run file (its first line is over {HEADER_PEEK} bytes and opens a JSON object)" if opens else None
    try:
        rec = json.loads(first.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        return None
    return "is a run file" if isinstance(rec, dict) and rec.get("kind") == "header" else None


def is_run_file(path: Path) -> bool:
    """A *.jsonl file, or any file whose first line is (or may be) a run header record."""
    return run_file_reason(path) is not None


def is_runs_folder(folder: Path) -> bool:
    """A folder named runs/ (data/runs/ and $DSPARK_DATA/runs are), or the data dir's runs folder
    wherever it resolves. A folder that merely holds run files is not one: a report or a record
    written beside the run files it reads harms none of them (the loader reads only *.jsonl, and a
    run file itself is never overwritten)."""
    if folder.name == "runs":
        return True
    try:
        return folder.resolve() == Path(os.path.realpath(runs_dir()))
    except (OSError, RuntimeError, ValueError):  # an unusable DSPARK_DATA is said by the commands that read it
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
    if "\0" in str(path):  # no file name holds one (the OS would refuse it as a ValueError)
        raise OutputError(f"{_short(Path(str(path).replace(chr(0), '?')))}: a path holds no NUL byte")
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
    why = run_file_reason(path) if path.suffix == RUN_SUFFIX or path.is_file() else None
    if why is not None:
        raise OutputError(f"{path}: {why}; refusing to overwrite recorded data", refused=True)
    parent = path.parent
    for p in [parent, *parent.parents]:  # the folder it lands in, or the one its missing folders would be made in
        if p.exists():
            if not p.is_dir():
                raise OutputError(f"{path}: {p} is a file, not a folder")
            if is_runs_folder(p):
                raise OutputError(f"{path}: {p} is a runs folder; write the report elsewhere (e.g. out/)", refused=True)
            break


def _temporary_prefix(name: str) -> str:
    """The temporary file's name before mkstemp's 8 random characters and ".tmp": the target's name
    while the whole stays within the 255 bytes a file name may take, else a fixed one (a 255-byte
    target name is fine, its temporary must be too)."""
    return f".{name}." if len(os.fsencode(name)) <= 200 else ".dspark-lab-output."


def write_text_safely(path: Path, text: str) -> Path:
    path = _landing(path)  # folders made below are the ones the check saw
    check_output(path)  # checked again just before the rename below replaces it
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{path}: cannot create its folder ({e.strerror or e})") from None
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path.name), suffix=".tmp", dir=path.parent)
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
