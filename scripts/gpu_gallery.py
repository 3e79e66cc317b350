"""GPU stage "gallery": measure every gallery case and its fix, check the counts against the
documented ones, write $OUT/gallery.json (the format notebook 04 reads from data/gallery/) and print
a table last. Runs on CPU too (tiny sizes; every count is zero there by construction).

    python scripts/gpu_gallery.py [--scale queued|gpu|smoke] [--steps 20] [--trials 3] [--cases a,b]

Exit status 1 when a measured count differs from the documented one (on CUDA only).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from dspark_lab.gallery import SCALES, names  # noqa: E402
from dspark_lab.gallery.cases import default_scale  # noqa: E402
from dspark_lab.gallery import report  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default=default_scale(), choices=sorted(SCALES))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--cases", default="", help=f"comma-separated subset of: {', '.join(names())}")
    a = ap.parse_args(argv)
    chosen = [c for c in a.cases.split(",") if c] or None
    out = Path(os.environ.get("OUT", "out/gpu"))
    t0 = time.perf_counter()
    rec = report.record(chosen, scale=a.scale, steps=a.steps, trials=a.trials)
    rec["wall_s"] = round(time.perf_counter() - t0, 1)
    path = report.save(rec, out / "gallery.json")
    bad = report.check(rec)
    for c in rec["cases"]:
        print(report.case_text(rec, c["name"]), end="\n\n")
    print(f"wrote {path} in {rec['wall_s']} s on {rec['fingerprint']['gpu']} (scale {a.scale})")
    for b in bad:
        print(f"MISMATCH {b}")
    if rec["device"] != "cuda":
        print("no CUDA: counts are zero by construction; the documented counts were not checked")
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 3):
        print(report.table(rec).to_string(index=False))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
