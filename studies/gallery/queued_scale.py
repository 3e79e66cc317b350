"""Record the gallery at the scale where a sync waits (cases.GPU_SCALE: several ms of GPU work queued
ahead of each case's sync) and print, per case, the caused idle (notebook 01's rule), the blocked time
and the step-time change split as report.SPLIT_RULE says (the case's waits, the fix's own waits, GPU
idle charged to no wait, the fix's other changes).

    python -m studies.gallery.queued_scale [--steps 20] [--rounds 10] [--scale queued]

Writes <root>/data/gallery/<gpu>-gallery-<scale>-<yyyymmdd>.json (root: $OUT when set, else the
repository) with the machine's fingerprint; notebook 04 reads the newest file there. Each case as
scripts/gpu_gallery.py measures it (report.measure_case: the profiled passes, then paired rounds, about
6 s a case on an H200). Without CUDA
it records the smoke scale, where nothing can sync, and says so.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def out_path(rec: dict) -> Path:
    from dspark_lab.results.record.paths import machine_file_name

    root = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT
    return root / "data" / "gallery" / machine_file_name(rec["fingerprint"], rec["recorded_at"], f"gallery-{rec['scale']}")


def split_table(rec: dict):
    """Per case: blocked, caused idle (case and fix), the step change and its split (ms per step)."""
    import pandas as pd

    from dspark_lab.gallery import report

    rows = []
    for c in rec["cases"]:
        a, b = c["variants"]["case"], c["variants"]["fix"]
        sp = report.split(a, b, report.change_ms(c))
        rows.append({"case": c["name"], "GPU busy": a.get("gpu_busy_ms"), "blocked": a["host_blocked_ms"],
                     "caused idle": a.get("gpu_idle_sync_caused_ms"), "caused idle fix": b.get("gpu_idle_sync_caused_ms"),
                     "step": a["step_ms"], "step fix": b["step_ms"], "change": sp["step_change_ms"],
                     "the case's waits": sp["case_waits_ms"], "the fix's own waits": sp["fix_waits_ms"],
                     "idle charged to no wait": sp["no_wait_idle_ms"], "other changes": sp["other_changes_ms"],
                     "launches": sp["launch_change_ms"], "host work": sp["host_work_change_ms"]})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--scale", default=None, help="a gallery scale (default: cases.default_scale of the device)")
    a = ap.parse_args(argv)
    import pandas as pd

    from dspark_lab.gallery import report

    t0 = time.perf_counter()
    rec = report.record(scale=a.scale, steps=a.steps, rounds=a.rounds)
    rec["wall_s"] = round(time.perf_counter() - t0, 1)
    path = report.save(rec, out_path(rec))
    bad = report.check(rec)
    print(f"wrote {path} in {rec['wall_s']} s on {rec['fingerprint'].get('gpu')} (scale {rec['scale']})")
    print(report.SPLIT_RULE)
    for m in bad:
        print(f"MISMATCH {m}")
    if rec["device"] != "cuda":
        print("no CUDA: nothing can synchronize, every count and idle is zero by construction")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        print(split_table(rec).to_string(index=False))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
