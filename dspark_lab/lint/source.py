"""Reading and parsing one source file within bounds: a file the finder cannot take in is skipped
with one line saying why, and the other files are still linted.

Only a regular file is read (a FIFO would block the read forever, /dev/zero or a link to it would be
read until memory runs out), opened without blocking, checked on the open descriptor, and never
more than SIZE_LIMIT + 1 bytes of it. Its encoding is Python's (a UTF-8 BOM, a coding line). A tree
nested deeper than DEPTH_LIMIT (a 5,000-term `a + a + ...` chain, `f(f(f(...)))`) is skipped too:
the parser and the rules' walk would otherwise end in a RecursionError or MemoryError. Real code
stays far below it (171 levels is the deepest module of this environment's site-packages).
"""
from __future__ import annotations

import ast
import io
import os
import stat
import tokenize

from dspark_lab.lint.findings import LintInputError

SIZE_LIMIT = 8 << 20  # bytes: the largest hand-written modules are a few hundred KiB
DEPTH_LIMIT = 200  # AST levels; CPython's own parser refuses 200 nested brackets
BOM = "\ufeff"


class SkippedFile(LintInputError):
    """A file lint did not read: over a limit, or not a regular file. Its message names the file
    and the limit; lint_paths goes on with the other files when it is given a list to note it in."""


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _read_bounded(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):  # a link to nothing
        raise SkippedFile(f"{path}: is a link to nothing, not a regular file; not linted") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SkippedFile(f"{path}: is {_kind(mode)}, not a regular file; not linted")
        data = f.read(SIZE_LIMIT + 1)
    if len(data) > SIZE_LIMIT:
        raise SkippedFile(f"{path}: is larger than the {SIZE_LIMIT >> 20} MiB lint reads; not linted")
    return data


def read_source(path: str) -> str:
    """The text of the Python file `path`, decoded as Python decodes it. SkippedFile when it is not a
    regular file or is over SIZE_LIMIT; LintInputError when it cannot be read or decoded."""
    try:
        data = _read_bounded(path)
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except SkippedFile:
        raise
    except (OSError, SyntaxError, LookupError, UnicodeDecodeError) as e:  # SyntaxError: a bad coding line
        raise LintInputError(f"{path}: cannot be read as Python source ({type(e).__name__})") from None


def _depth(tree: ast.AST) -> int:
    """The deepest level of the tree, counted without recursion (stops once past DEPTH_LIMIT)."""
    stack, deepest = [(tree, 1)], 0
    while stack and deepest <= DEPTH_LIMIT:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return deepest


def too_deep(path: str) -> SkippedFile:
    return SkippedFile(f"{path}: is nested deeper than the {DEPTH_LIMIT} levels lint reads; not linted")


def parse(source: str, path: str) -> ast.Module:
    """The module's tree. SkippedFile when it is nested past DEPTH_LIMIT; LintInputError when it does
    not parse (a syntax error, a NUL byte)."""
    try:
        tree = ast.parse(source.removeprefix(BOM), filename=path)
    except (RecursionError, MemoryError):  # the parser's own stack: nesting far past the limit
        raise too_deep(path) from None
    except SyntaxError as e:
        raise LintInputError(f"{path}:{e.lineno}: cannot lint a file that does not parse ({e.msg})") from None
    except ValueError as e:  # a NUL byte (a SyntaxError from Python 3.12 on)
        raise LintInputError(f"{path}: cannot lint a file that does not parse ({e})") from None
    if _depth(tree) > DEPTH_LIMIT:
        raise too_deep(path)
    return tree
