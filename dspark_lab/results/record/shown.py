"""Text from a recorded file shown as one line: a run's name, a field echoed in a warning.

A run file is not trusted to hold only printable text: a newline would print a fake line under a
summary, a right-to-left override (U+202E) would reorder what follows it, an escape sequence would
drive the terminal. `one_line` shows each such character as an escape (\\n, \\x1b, \\u202e).
"""
from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the Unicode format characters that reorder or hide text (bidi
# embeddings, overrides and isolates, zero-width marks, the line and paragraph separators).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def _escape(ch: str) -> str:
    code = ord(ch)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def one_line(text: object) -> str:
    """`text` with every UNSAFE character shown as an escape (lone surrogates too, as \\udcNN)."""
    s = UNSAFE.sub(lambda m: _escape(m.group()), str(text))
    return s.encode("utf-8", "backslashreplace").decode("utf-8")
