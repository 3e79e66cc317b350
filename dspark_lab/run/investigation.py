"""Record a worked investigation (notebook 06): a slow step and its fix inspected together (trials
interleaved, so the diff is paired) and the guard's verdict on each under the CI allow-list; the record is
results.record.investigation's format. The steps are passed in: the notebook and the study hand it
the gallery's decode step (dspark_lab.gallery.decode_step)."""
from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Callable, Iterable, Optional

from dspark_lab.measure import probe
from dspark_lab.results.record import investigation
from dspark_lab.run.inspect import inspect_pair


def record(before: Callable[[], object], after: Callable[[], object], *, targets: tuple[str, str],
           allow: Iterable[str] = (), steps: int = 20, trials: int = 10, warmup: int = 3,
           source_root: Optional[Path] = None) -> dict:
    """The investigation record of `before` (the slow step) and `after` (its fix)."""
    allow = tuple(allow)
    a, b = inspect_pair(before, after, targets=targets, labels=tuple(t.rsplit(":", 1)[-1] for t in targets),
                        steps=steps, trials=trials, warmup=warmup, source_roots=(source_root, source_root), allow=allow)
    return investigation.validate({
        "kind": investigation.KIND, "schema": investigation.SCHEMA, "fingerprint": probe.fingerprint(),
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "before": a, "after": b,
        # The guard with the CI allow-list: the lines it would fail on, each step (empty without CUDA).
        "guard": {"allow": list(allow), "before": a["guard"]["violations"], "after": b["guard"]["violations"],
                  "note": a["guard"].get("note", "")},
    })
