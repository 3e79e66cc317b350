"""`# sync-ok: <reason>`: a line's sync is there by design, and the comment says why. A bare
`# sync-ok` (no reason) exempts nothing and is itself a finding: an allowed sync without a why is
the allow-list entry nobody can review; so is a reason of only blanks, zero-width or other characters
that print nothing. The runtime guard reads the same comment (`reason_at`)."""
from __future__ import annotations

import io
import re
import tokenize
from typing import Optional

SYNC_OK = re.compile(r"#\s*sync-ok\b(?P<colon>\s*:)?(?P<reason>.*)$")


def parse(comment: str) -> Optional[str]:
    """The reason of a `# sync-ok: <reason>` comment; "" for a bare `# sync-ok`; None when it is none."""
    m = SYNC_OK.search(comment)
    if not m:
        return None
    reason = m["reason"].strip() if m["colon"] else ""
    return reason if any(c.isprintable() and not c.isspace() for c in reason) else ""


def comments(source: str) -> dict[int, str]:
    """line -> the text of the comment on it (tokenize: a '#' inside a string is not a comment)."""
    out = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string
    except (tokenize.TokenError, IndentationError):
        pass  # the parser reports the error; comments read so far stand
    return out


def marks(source: str) -> dict[int, str]:
    """line -> the reason of its `# sync-ok` ("" for a bare one)."""
    out = {}
    for line, text in comments(source).items():
        reason = parse(text)
        if reason is not None:
            out[line] = reason
    return out


def reason_at(line_text: str) -> str:
    """The reason a source line's `# sync-ok: <reason>` gives ("" when it has none or no comment),
    for one line read on its own (the runtime guard's case: a string's '#' may be mistaken there)."""
    i = line_text.find("#")
    return (parse(line_text[i:]) or "") if i >= 0 else ""
