"""Where every host wait of a step went after a fix: one row per sync site of either step (the kind of
wait, the host's wait and the GPU idle it was charged, before and after), a row for the by-design
read-back (the kit counts it apart from the sync sites, `host_readback_ms`, and charges it to no
site), and the step's totals. Read beside `step_diff`'s verdict on the same pair (`wait_moves`): a
wait that moved shows as a row whose wait grew. Torch-free: it reads two inspect records.
"""
from __future__ import annotations

import pandas as pd

from dspark_lab.results.analyses import step_diff

READBACK_ROW = "the by-design read-back (not a sync site)"
TOTAL_ROW = "all sync sites"
_ms = step_diff._val  # a number, or None for a missing or NaN one
COLUMNS = ["where", "wait", "status", "host wait before ms", "host wait after ms",
           "charged idle before ms", "charged idle after ms"]


def ledger(before: dict, after: dict) -> pd.DataFrame:
    """Per site, then the by-design read-back, then the totals: host wait and charged GPU idle, ms per
    step, before and after (None where a step has no such site or the record no such part)."""
    sites = step_diff.site_changes(before, after)
    rows = [[r.site, r.wait, f"{r.status} (allowed)" if r.allowed else r.status, r.before_blocked_ms,
             r.after_blocked_ms, r.before_idle_ms, r.after_idle_ms] for r in sites.itertuples()]
    pb, pa = before["parts"], after["parts"]
    rows.append([READBACK_ROW, "the result wait", "by design", _ms(pb.get("host_readback_ms")),
                 _ms(pa.get("host_readback_ms")), None, None])
    rows.append([TOTAL_ROW, "", "", _ms(pb.get("host_blocked_ms")), _ms(pa.get("host_blocked_ms")),
                 _ms(pb.get("gpu_idle_sync_caused_ms")), _ms(pa.get("gpu_idle_sync_caused_ms"))])
    return pd.DataFrame(rows, columns=COLUMNS).astype({c: float for c in COLUMNS[3:]})  # None: NaN


def grown(table: pd.DataFrame, floor_ms: float = step_diff.GAIN_FLOOR_MS) -> list[str]:
    """The rows (sites and the by-design read-back, not the totals) whose host wait grew by more than
    `floor_ms`: where a wait went to, if it moved."""
    out = []
    for r in table[table["where"] != TOTAL_ROW].itertuples(index=False):
        b, a = (_ms(v) or 0.0 for v in (r[3], r[4]))
        if a - b > floor_ms:
            out.append(f"{r[0]} (+{a - b:.3f} ms)")
    return out
