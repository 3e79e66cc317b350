"""The command line's exit statuses, said once (every command returns one of these; --help lists them)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

EXIT_OK = 0
EXIT_FAILED = 1  # some point failed, nothing recorded to report, or a rank failed
EXIT_USAGE = 2  # bad arguments or settings, or a run file that cannot be resumed / read
EXIT_BUSY = 3  # the run file is being written by another process (one writer per file)
EXIT_REFUSED = 4  # the output would overwrite a run file, go into a runs folder or replace a non-regular file
EXIT_CANNOT_WRITE = 5  # the output cannot be written (a directory, a parent that is a file, no permission, full disk)
EXIT_NOT_CHECKED = 6  # nothing could be measured or checked here: no CUDA device (verify, sweep, ep); lint: a file was skipped
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM: ended by `timeout`, Slurm or kill, cleaned up as after Ctrl-C
EXIT_CODES_HELP = (
    "exit status: 0 ok; 1 some point failed, a rank failed, or nothing recorded to report; 2 bad arguments "
    "or settings (DSPARK_DATA, DSPARK_CACHE), or a run file that cannot be resumed; 3 the run file is being "
    "written by another process; 4 the output would overwrite a run file, go into a runs folder or replace "
    "something that is not a regular file (refused); 5 the output cannot be written (a directory, a parent "
    "that is a file, no permission, a name too long, a full disk); 6 nothing could be measured here (no CUDA "
    "device: `sweep` without --device cpu, `ep` without --backend gloo; one line, nothing written); 130 "
    "interrupted; 143 terminated (SIGTERM)."
)


def output_status(error) -> int:
    """The status of an output that was not written (results.record.output.OutputError): refused
    (a run file, a runs folder, a node: 4) or could not be written (5)."""
    return EXIT_REFUSED if getattr(error, "refused", False) else EXIT_CANNOT_WRITE


def hold_interrupts() -> None:
    """After the first Ctrl-C (or SIGTERM): a second one while shutting down must not turn exit 130
    into a traceback or a death by the signal."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to hold
        pass


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, as Ctrl-C is: every cleanup that an interrupt runs
    (a run file with no point removed, ranks stopped) runs for it too."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated("terminated (SIGTERM)")


@contextmanager
def sigterm_as_interrupt():
    """Within the block SIGTERM raises Terminated (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
