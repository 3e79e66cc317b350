"""Diagnostic: the profiled traces of the known-idle cases whose charge misses (two and three syncs per
step) and of the step of known cost with each form of wait (wait_cpu, wait_pageable_d2h, ...), written to $OUT/known_idle_traces/<case>.json.gz for the charging rule to be read on CPU
(tests/fixtures/known_idle_h200/ holds the H200's; studies.known_idle.recheck reads them).

    OUT=/tmp/o python -m studies.known_idle.traces [CASE ...]    # on a CUDA machine
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402

from dspark_lab.gallery import known_idle  # noqa: E402
from dspark_lab.measure import breakdown, probe, trace  # noqa: E402
from dspark_lab.measure.step import as_step  # noqa: E402

DEFAULT_CASES = ("two_syncs", "three_syncs", "one_mid", *(f"wait_{form}" for form in known_idle.WAIT_FORMS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", default=list(DEFAULT_CASES), help="known-idle cases (default: %(default)s)")
    cases = ap.parse_args(argv).cases
    out = Path(os.environ.get("OUT", "out")) / "known_idle_traces"
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        sys.exit("needs CUDA")
    probe.calibrate_sleep()
    for name in cases:
        case = known_idle.get(name)
        step = as_step(known_idle.make_step(case.ops, wait=case.wait))
        tr = trace.capture(step, 6, warmup=2, sync=torch.cuda.synchronize)
        with gzip.open(out / f"{name}.json.gz", "wt") as f:
            json.dump(tr, f)
        ev = trace.events(tr)
        per = breakdown.per_step(ev).iloc[1:]
        kinds = sorted(set(breakdown.wait_charges(ev).wait))
        print(f"{name}: charged {per.gpu_idle_sync_caused_ms.mean():.3f} ms, blocked {per.host_blocked_ms.mean():.3f} ms, "
              f"waits {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
