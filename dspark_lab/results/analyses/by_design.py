"""The by-design syncs of a step's record, with why each is allowed (the guard's allow entry
"PATTERN: REASON" or the line's `# sync-ok: <reason>`): the lines `inspect` prints."""
from __future__ import annotations

from typing import Optional

NO_REASON = "(no reason given: write the allow entry as 'PATTERN: REASON' or mark the line '# sync-ok: <reason>')"


def lines(guard: Optional[dict]) -> list[str]:
    """One line per allowed sync site of the guard record; none when nothing was allowed or checked."""
    g = guard or {}
    reasons = g.get("reasons") or {}
    allowed = list(dict.fromkeys(list(g.get("allowed") or []) + list(reasons)))
    if not allowed:
        return []
    return ["by-design syncs (allowed):"] + [f"  {site}: {reasons.get(site) or NO_REASON}" for site in allowed]
