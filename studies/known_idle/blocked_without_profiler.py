"""Diagnostic: each known-idle case's profiler-free loss, its syncs' host time timed without a profiler
(perf_counter around each `.item()`), and its profiled trace, in repeats, so the charging rule's cap
(the time the host spent in the syncs) can be compared on CPU with what the host spent in them
when nothing was watching. Writes $OUT/known_idle_blocked/summary.json and one trace per case and
repeat (<case>-<repeat>.json.gz).

    OUT=/tmp/o python -m studies.known_idle.blocked_without_profiler [--repeats 3] [CASE ...]   # CUDA
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np  # noqa: E402
import torch  # noqa: E402

from dspark_lab.gallery import known_idle as ki  # noqa: E402
from dspark_lab.measure import breakdown, probe, trace  # noqa: E402
from dspark_lab.measure.step import as_step  # noqa: E402
from dspark_lab.verify.checks import steady_loss, sync_host_times_s  # noqa: E402


def sync_host_ms(case: ki.KnownIdleCase, steps: int = 20) -> list:
    """Median host time (ms) of each sync of the step, by its place in the step, no profiler."""
    times, n = sync_host_times_s(case, steps), case.syncs_per_step
    return [float(np.median(times[i::n]) * 1e3) for i in range(n)] if n else []


def one(case: ki.KnownIdleCase, out: Path, repeat: int) -> dict:
    w, f = as_step(ki.make_step(case.ops, wait=case.wait)), as_step(ki.make_step(case.sync_free()))
    loss, lo, hi = steady_loss(w, f)
    free_ms = sync_host_ms(case)
    tr = trace.capture(w, 12, warmup=1, sync=torch.cuda.synchronize)
    with gzip.open(out / f"{case.name}-{repeat}.json.gz", "wt") as fh:
        json.dump(tr, fh)
    per = breakdown.per_step(trace.events(tr)).iloc[1:]
    return {"case": case.name, "repeat": repeat, "loss_ms": loss, "loss_ci": [lo, hi],
            "sync_host_ms_free": free_ms, "charged_ms": float(per.gpu_idle_sync_caused_ms.mean()),
            "host_blocked_ms": float(per.host_blocked_ms.mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", default=[c.name for c in ki.CASES])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs CUDA")
    out = Path(os.environ.get("OUT", "out")) / "known_idle_blocked"
    out.mkdir(parents=True, exist_ok=True)
    probe.calibrate_sleep()
    rows = []
    for r in range(a.repeats):
        for name in a.cases:
            rows.append(one(ki.get(name), out, r))
            x = rows[-1]
            print(f"{name:<14} {r} loss {x['loss_ms']:.3f} charged {x['charged_ms']:.3f} blocked "
                  f"{x['host_blocked_ms']:.3f} syncs free {sum(x['sync_host_ms_free']):.3f}", flush=True)
    (out / "summary.json").write_text(json.dumps({"kind": "known_idle_blocked", "fingerprint": probe.fingerprint(),
                                                  "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
