"""Ctrl-C while the command is still starting, or already ending: one line and exit 130 while it
starts, nothing while it ends (its status stands), never a traceback.

The console script imports the package, then the command line (torch with it: seconds on a GPU
host), before `main` and its KeyboardInterrupt handler run. `guard_start` runs first of all, from the
package's own __init__ (this module imports only what the interpreter has loaded already), and
answers SIGINT in that window with one line and exit 130; nothing has been started yet, so there is
nothing to clean up. `main` hands SIGINT back with `started` as soon as it runs and calls `finished`
on its way out: the work is done and its status said, so a Ctrl-C while the interpreter exits (a
`--help` on its way out, the last output flushed) changes nothing. Only when this process is the
dspark-lab command: importing the package from a notebook, a test or another `python -m` never
changes their SIGINT. A SIGINT inherited as ignored (a background job) stays ignored. What comes
before the package's first line (the interpreter's own start, its site-packages) is Python's.
"""
from __future__ import annotations

import os
import signal
import sys

COMMAND = "dspark-lab"
COMMAND_MODULE = "dspark_lab.cli"  # python -m dspark_lab.cli
EXIT_INTERRUPTED = 130  # cli.exits.EXIT_INTERRUPTED (not imported here: this module stays import-free)
LINE = b"dspark-lab: interrupted while starting; nothing was done\n"


def _interrupted_at_start(signum, frame) -> None:
    os.write(2, LINE)
    os._exit(EXIT_INTERRUPTED)


def is_command() -> bool:
    """This process runs `dspark-lab` (the console script) or `python -m dspark_lab.cli` (sys.argv
    is ["-m"] while runpy imports the package; the original command line names the module)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-m":
        orig = getattr(sys, "orig_argv", [])  # the interpreter's own -m comes first
        return "-m" in orig and orig[orig.index("-m") + 1:][:1] == [COMMAND_MODULE]
    return os.path.basename(argv0) == COMMAND


def _swap(previous, handler) -> None:
    """Install `handler` for SIGINT where `previous` is the one in place (main thread only)."""
    try:
        if signal.getsignal(signal.SIGINT) is previous:
            signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: its SIGINT is not this import's to change
        pass


def guard_start() -> None:
    if is_command():
        _swap(signal.default_int_handler, _interrupted_at_start)


def started() -> None:
    """From here on Ctrl-C is a KeyboardInterrupt again, which the commands handle (cleanup, then 130)."""
    _swap(_interrupted_at_start, signal.default_int_handler)


def finished() -> None:
    """The command has done its work and has its status: a Ctrl-C from here to the exit is let pass."""
    if is_command():
        _swap(signal.default_int_handler, signal.SIG_IGN)
