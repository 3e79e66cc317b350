"""The command line's exit statuses, said once (every command returns one of these; --help lists them)."""
from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_FAILED = 1  # some point failed, nothing recorded to report, or a rank failed
EXIT_USAGE = 2  # bad arguments or settings, or a run file that cannot be resumed / read
EXIT_BUSY = 3  # the run file is being written by another process (one writer per file)
EXIT_REFUSED = 4  # the output would overwrite a run file, go into a runs folder or replace a non-regular file
EXIT_CANNOT_WRITE = 5  # the output cannot be written (a directory, a parent that is a file, no permission, full disk)
EXIT_INTERRUPTED = 130
EXIT_CODES_HELP = (
    "exit status: 0 ok; 1 some point failed, a rank failed, or nothing recorded to report; 2 bad arguments "
    "or settings (DSPARK_DATA, DSPARK_CACHE), or a run file that cannot be resumed; 3 the run file is being "
    "written by another process; 4 the output would overwrite a run file, go into a runs folder or replace "
    "something that is not a regular file (refused); 5 the output cannot be written (a directory, a parent "
    "that is a file, no permission, a name too long, a full disk); 130 interrupted."
)


def hold_interrupts() -> None:
    """After the first Ctrl-C: a second one while shutting down must not turn exit 130 into a
    traceback or a death by SIGINT."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to hold
        pass
