"""Ctrl-C while the command is still starting: one line and exit 130, never a traceback.

The console script imports the command line (torch with it: seconds on a GPU host) before `main`
and its KeyboardInterrupt handler run. `guard_start` (called from cli/__init__.py, before anything
heavy is imported) answers SIGINT in that window with one line and exit 130; nothing has been
started yet, so there is nothing to clean up. `main` hands SIGINT back with `started` as soon as it
runs. Only when this process is the dspark-lab command: importing the package from a notebook or
a test never changes their SIGINT.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

COMMAND = "dspark-lab"
EXIT_INTERRUPTED = 130  # cli.exits.EXIT_INTERRUPTED (not imported here: this module stays import-free)
LINE = b"dspark-lab: interrupted while starting; nothing was done\n"


def _interrupted_at_start(signum, frame) -> None:
    os.write(2, LINE)
    os._exit(EXIT_INTERRUPTED)


def is_command() -> bool:
    """This process runs `dspark-lab` (the console script) or `python -m dspark_lab.cli` (sys.argv
    is ["-m"] while runpy imports the package)."""
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(argv0) == COMMAND or argv0 == "-m"


def guard_start() -> None:
    if not is_command() or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_at_start)


def started() -> None:
    """From here on Ctrl-C is a KeyboardInterrupt again, which the commands handle (cleanup, then 130)."""
    if signal.getsignal(signal.SIGINT) is _interrupted_at_start:
        signal.signal(signal.SIGINT, signal.default_int_handler)
