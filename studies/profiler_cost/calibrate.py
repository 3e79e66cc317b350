"""On a GPU: the profiler's own host time per recorded event (measure.profiler_cost), with and
without Python stacks, three rounds each, so the record shows how far one cost per event holds
across loop bodies and rounds.

    OUT=/tmp/o python -m studies.profiler_cost.calibrate

Expected: about 15 s on an H200. File: $OUT/data/machines/<gpu>-profiler-cost-<stamp>.json
{"kind": "dspark_profiler_cost", "fingerprint", "rounds": [calibrate(...) per round and stack setting]}.
Without CUDA it stops with a message (exit 2).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from dspark_lab.measure import profiler_cost, probe  # noqa: E402

ROUNDS = 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per stack setting (default {ROUNDS})")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("studies.profiler_cost.calibrate: needs CUDA (no GPU here)")
        return 2
    t0 = time.perf_counter()
    rounds = [calibrate_round(stack, k) for k in range(a.rounds) for stack in (False, True)]
    fp = probe.fingerprint()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M")
    gpu = "h200" if "H200" in torch.cuda.get_device_name() else "gpu"
    path = Path(os.environ.get("OUT", ".")) / "data" / "machines" / f"{gpu}-profiler-cost-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"kind": "dspark_profiler_cost", "fingerprint": fp, "rounds": rounds,
                                "wall_s": time.perf_counter() - t0}, indent=1, default=str))
    print(f"{'stack':>5} {'round':>5} {'body':>10} {'us/event':>9} {'[min,max]':>15} {'events/it':>9} {'free us/it':>10} {'prof us/it':>10}")
    for r in rounds:
        for name, b in r["bodies"].items():
            print(f"{str(r['with_stack']):>5} {r['round']:>5} {name:>10} {b['us_per_event']:9.3f} "
                  f"[{b['min']:6.3f},{b['max']:6.3f}] {b['events_per_iter']:9.2f} {b['host_us_per_iter_free']:10.2f} "
                  f"{b['host_us_per_iter_profiled']:10.2f}")
    print(f"profiler cost: {path} ({time.perf_counter() - t0:.1f} s)")
    return 0


def calibrate_round(stack: bool, k: int) -> dict:
    out = profiler_cost.calibrate(with_stack=stack)
    out["round"] = k
    return out


if __name__ == "__main__":
    sys.exit(main())
