"""What the command line prints: text that came from run files (run names, GPU fields, error
strings, file names) cleaned before it reaches a terminal, where an escape sequence in a run file
could retitle the window, clear the screen or hide lines."""
from __future__ import annotations

import sys

from dspark_lab.printable import one_line, printable  # noqa: F401 -- the one escaping function, re-exported


def say(text: object, file=None) -> None:
    print(printable(text), file=file if file is not None else sys.stdout, flush=True)


def err(msg: object) -> None:
    """One error or warning line on stderr, prefixed with the program's name: one line, a newline
    inside it (from a file name, a run's name) shown as \\n."""
    print(one_line(f"dspark-lab: {msg}"), file=sys.stderr, flush=True)
