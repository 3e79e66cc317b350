"""GPU stage "gallery": measure every gallery case and its fix, check the counts against the
documented ones, pair the fix's step time against the case's round by round (`change`), write
$OUT/data/gallery/<gpu>-gallery-<stamp>.json (the format notebook 04 reads from data/gallery/), run
verify's compiled-code and capture-witness groups into $OUT/data/verify/<gpu>-verify-compiled-<stamp>.json,
and print a table last (case, syncs as expected?, charge, change [CI], group). Runs on CPU too (tiny
sizes; every count is zero there by construction, and verify's groups say they need CUDA).

    python scripts/gpu_gallery.py [--scale queued|gpu|smoke] [--steps 8] [--trials 2] [--rounds 5] [--cases a,b]

About 135 s on an H200 at the defaults (24 cases, each about 4.5 s; verify's two groups about
15 s). Exit status 1 when a measured count differs from the documented one or a verify check fails
(on CUDA only).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from dspark_lab.gallery import SCALES, names, registry  # noqa: E402
from dspark_lab.gallery import cases as C  # noqa: E402
from dspark_lab.gallery.cases import default_scale  # noqa: E402
from dspark_lab.gallery import report  # noqa: E402
from dspark_lab.measure import probe  # noqa: E402
from dspark_lab.results.analyses import sync_cost_groups  # noqa: E402
from dspark_lab.results.record.paths import machine_file_name  # noqa: E402
from studies.field.record_field import paired_change  # noqa: E402


def record(chosen, scale: str, steps: int, trials: int, rounds: int) -> dict:
    rec = report.record(chosen, scale=scale, steps=steps, trials=trials)
    for c in rec["cases"]:
        c["change"] = paired_change(registry.get(c["name"]), C.make_state(None, scale), steps=steps, rounds=rounds)
        print(f"[{time.perf_counter() - T0:6.1f} s] {c['name']}: {c['change']['difference']}", flush=True)
    return rec


def verify_groups(out: Path, fp: dict) -> list:
    """verify's compiled and capture groups, written as a verify record; [] of checks without CUDA."""
    from dspark_lab.verify import run

    rec = run(["compiled", "capture"], progress=lambda s: print(f"[{time.perf_counter() - T0:6.1f} s] verify {s}", flush=True))
    path = out / "data" / "verify" / machine_file_name(fp, rec.get("recorded_at") or rec.get("recorded") or "", "verify-compiled")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1, default=str))
    print(f"verify -> {path}")
    return rec.get("checks", [])


def table_text(rec: dict) -> str:
    g = sync_cost_groups.groups(rec).set_index("case")
    lines = [f"{'case':26s} {'syncs as expected?':18s} {'charge ms':>9s}  {'change [95% CI]':30s} group"]
    for c in rec["cases"]:
        a, b = c["variants"]["case"], c["variants"]["fix"]
        ok = "n/a (no CUDA)" if a["matches"] is None else "yes" if a["matches"] and b["matches"] else (
            f"NO {a['host_syncs_per_step']}/{b['host_syncs_per_step']}")
        ch = c.get("change") or {}
        change = f"{ch['pct']:+.1f}% [{ch['ci_low']:+.1f}, {ch['ci_high']:+.1f}]" if ch else "n/a"
        charge = a.get("gpu_idle_sync_caused_ms")
        lines.append(f"{c['name']:26s} {ok:18s} {'n/a' if charge is None else f'{charge:.3f}':>9s}  {change:30s} "
                     f"{g.loc[c['name'], 'group']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default=default_scale(), choices=sorted(SCALES))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="paired rounds per case for the fix's step-time change")
    ap.add_argument("--cases", default="", help=f"comma-separated subset of: {', '.join(names())}")
    ap.add_argument("--no-verify", action="store_true", help="skip verify's compiled and capture groups")
    a = ap.parse_args(argv)
    chosen = [c for c in a.cases.split(",") if c] or None
    out = Path(os.environ.get("OUT", "out/gpu"))
    fp = probe.fingerprint()
    print(f"fingerprint: {fp.get('gpu')} · torch {fp.get('torch')} · CUDA {fp.get('cuda')}; scale {a.scale}", flush=True)
    rec = record(chosen, a.scale, a.steps, a.trials, a.rounds)
    rec["wall_s"] = round(time.perf_counter() - T0, 1)
    path = report.save(rec, out / "data" / "gallery" / machine_file_name(fp, rec["recorded_at"], "gallery"))
    print(f"gallery -> {path} in {rec['wall_s']} s")
    checks = [] if a.no_verify else verify_groups(out, fp)
    for ch in checks:
        mark = {True: "PASS", False: "FAIL", None: "n/a "}[ch["passed"]]
        print(f"[{mark}] {ch['group']}/{ch['name']}: {ch['detail']}")
    bad = report.check(rec)
    for b in bad:
        print(f"MISMATCH {b}")
    if rec["device"] != "cuda":
        print("no CUDA: counts are zero by construction; the documented counts were not checked")
    print(f"wall time {time.perf_counter() - T0:.1f} s")
    print(table_text(rec))
    failed = [ch for ch in checks if ch["passed"] is False]
    return 1 if torch.cuda.is_available() and (bad or failed) else 0


T0 = time.perf_counter()

if __name__ == "__main__":
    sys.exit(main())
