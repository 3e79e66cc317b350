"""Text that came from a file (a run file's names, a source line, a `# sync-ok:` reason, a file
name) made safe for a terminal, where an escape sequence could retitle the window, clear the screen
or hide lines. Standard library only, below every layer: the command line (cli/terminal.py) and the
torch-free static finder (lint/command.py) print through the same function."""
from __future__ import annotations

import re

# C0 controls but tab and newline (carriage return included: it overwrites a line), DEL, and C1
# controls (0x9b alone starts a sequence on some terminals).
# Bidi overrides and isolates (U+202E reverses what follows) and zero-width marks too.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def printable(text: object) -> str:
    """`text` with control characters shown as \\xNN and lone surrogates (a file name that is not
    valid UTF-8) as \\udcNN, so printing it neither drives the terminal nor raises UnicodeEncodeError."""
    s = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                     str(text))
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


# On one line every control is shown: newline, tab and carriage return too, by their usual escapes.
_ONE_LINE_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: object) -> str:
    """`text` made safe and kept on one line (a file name, a run's name, a field echoed in a warning,
    where a newline would start a line of its own, such as a forged "dspark-lab: ..."): every control
    and reordering character shown as an escape (\\n, \\t, \\x1b, \\u202e), lone surrogates as \\udcNN."""
    s = _ONE_LINE_UNSAFE.sub(lambda m: _NAMED.get(m.group()) or (
        f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"), str(text))
    return s.encode("utf-8", "backslashreplace").decode("utf-8")
