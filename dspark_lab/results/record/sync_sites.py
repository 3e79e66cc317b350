"""Sync sites by line: parse the two forms a measurement names a site in, and count each line once.

Sync debug mode names the exact line ("dir/file.py:LINE function"); the trace's attribution and the
guard's CUDA-sync-event witness name the enclosing function's `def` line ("dir/file.py(LINE):
function"). One host sync can therefore be named twice, at two lines. A *site* here is one line:
the exact lines first, and a function-level name only where no exact line of the same function
was seen (a sync only the trace saw, e.g. a blocking pageable copy). This holds however many
records per sync a witness gives (the guard may give one per witness, or one per sync).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

# "path(line): function" (trace attribution) or "path:line function" (sync debug mode).
SITE = re.compile(r"^(?P<path>[^():]+?)(?:\((?P<line>\d+)\):|:(?P<line2>\d+))\s*(?P<func>.*)$")


@dataclass(frozen=True)
class Site:
    path: str  # as recorded: the last two path parts
    line: int
    function: str
    exact: bool  # True: the line that synced (sync debug mode); False: the function's def line

    @property
    def key(self) -> str:
        """"dir/file.py:LINE function": one spelling for both forms."""
        return f"{self.path}:{self.line} {self.function}".rstrip()

    @property
    def where(self) -> tuple[str, str]:
        return self.path, self.function


def parse_site(text: str) -> Site:
    """A Site from either recorded form; ValueError naming the text when it is neither."""
    m = SITE.match(str(text).strip())
    if not m:
        raise ValueError(f"sync site must read 'path:LINE function' or 'path(LINE): function'; got {text!r}")
    return Site(m["path"], int(m["line"] or m["line2"]), m["func"].strip(), exact=m["line2"] is not None)


def try_parse(text: str):
    """parse_site, or None for a name in neither form (an op name where the trace had no stack)."""
    try:
        return parse_site(text)
    except ValueError:
        return None


def same_file(a: str, b: str) -> bool:
    """Two recorded paths of one file: equal, or one a tail of the other ("FILE.py" and
    "SUB/FILE.py": a record made before both witnesses named files one way, or read where the
    file's folder cannot be found)."""
    a, b = a.replace("\\", "/"), b.replace("\\", "/")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def same_function(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """(path, function) pairs naming one function."""
    return a[1] == b[1] and same_file(a[0], b[0])


def merge_sites(exact: Mapping[str, float], function_level: Mapping[str, float]) -> dict[str, float]:
    """Per-step counts by line, each line once: every exact site, then each function-level site
    whose function has no exact site (its count kept apart: it is a sync the exact witness missed).
    Unparseable names are kept as they are (a site is never dropped from a count)."""
    out: dict[str, float] = {}
    exact_sites = {text: try_parse(text) for text in exact}
    seen_functions = [s.where for s in exact_sites.values() if s is not None]
    tagged = [(t, n, True) for t, n in exact.items()] + [(t, n, False) for t, n in function_level.items()]
    for text, n, is_exact in tagged:
        s = exact_sites[text] if is_exact else try_parse(text)
        if not is_exact and s is not None and any(same_function(s.where, w) for w in seen_functions):
            continue  # a function-level name of a sync already counted at its exact line
        key = s.key if s is not None else text
        out[key] = out.get(key, 0.0) + n
    return out


def distinct_lines(records: Iterable[tuple[str, bool]]) -> list[str]:
    """The distinct sync lines among (site, exact) records from several witnesses (the guard's:
    exact for sync debug mode's, function-level for the others'): exact lines, and function-level
    names only for functions without an exact line; exact lines first, each in first-seen order."""
    records = list(records)
    exact = {s: 1.0 for s, is_exact in records if is_exact}
    return list(merge_sites(exact, {s: 1.0 for s, is_exact in records if not is_exact}))
