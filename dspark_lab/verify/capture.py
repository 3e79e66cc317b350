"""verify's capture group: the guard's fourth witness, CUDA graph capture, on the sync zoo
(verify.known_syncs): each step that syncs must fail its capture, recorded at a line that syncs;
each sync-free step must capture cleanly. About 2 s on an H200."""
from __future__ import annotations

import torch

from dspark_lab import guard
from dspark_lab.results.record import sync_sites
from dspark_lab.results.record.verify_record import Check
from dspark_lab.verify import known_syncs as KS

GROUP = "capture"


def capture_check(name: str, per_step: int, kinds: list, lines: list, want_lines: list) -> Check:
    """The verdict on one step (pure): caught iff it syncs, at one of its syncing lines where it has any."""
    caught = bool(kinds)
    at_line = not per_step or any(line in want_lines for line in lines)
    passed = caught == bool(per_step) and at_line
    what = (f"capture failed: {', '.join(kinds)} at line(s) {lines}" if caught else "captured cleanly")
    want = f"{per_step} sync(s) per step at line(s) {want_lines}" if per_step else "no sync"
    return Check(GROUP, name, bool(passed), f"{what} (the step makes {want})",
                 {"kinds": list(kinds), "lines": list(lines), "per_step": per_step})


def _line(site: str) -> int:
    parsed = sync_sites.try_parse(site)
    return parsed.line if parsed else -1


def capture_checks(mode: str = "global") -> list[Check]:
    s = KS.State(torch.device("cuda"))
    out = []
    for case in KS.CASES:
        case.fn(s)  # warm-up outside the capture, as any capture needs
        torch.cuda.synchronize()
        with guard.no_host_syncs(count=True, capture=True, debug_mode=False, cupti=False,
                                 capture_error_mode=mode) as g:
            case.fn(s)
        out.append(capture_check(case.name, case.per_step, [r.kind for r in g.syncs],
                                 [_line(r.site) for r in g.syncs], case.lines()))
    return out
