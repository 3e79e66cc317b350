"""GPU stage "gallery": measure every gallery case and its fix on one state per case (the profiled
passes, then paired rounds that give both step times and the fix's change: gallery/report.py's
measure_case), check the counts against the documented ones, write
$OUT/data/gallery/<gpu>-gallery-<stamp>.json (the format notebook 04 reads from data/gallery/), run
verify's compiled-code and capture-witness groups into $OUT/data/verify/<gpu>-verify-compiled-<stamp>.json,
and print a table last (case, syncs as expected?, charge, change [CI], net charge against the saving
and its verdict, group). Runs on CPU too (tiny sizes; every count is zero there by construction, and
verify's groups say they need CUDA).

    python scripts/gpu_gallery.py [--scale queued|gpu|smoke] [--steps 20] [--rounds 10] [--cases a,b]

On an H200 at the defaults: the gallery's 24 cases in wall_s 116.5 and 123.8 s
(data/gallery/h200-gallery-20261204-1952.json and -1939.json, 10 paired rounds of 20 steps a case), saved
before verify's two groups run (wall_s 64.6 in data/verify/h200-verify-compiled-20261204.json, the record
holding both; the compiled group alone took 79.9 s in -0318.json, so verify's time varies): about 180-190 s
in all on those records. Exit status 1
when a measured count differs from the documented one or a verify check fails (on CUDA only).
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

from dspark_lab.gallery import SCALES, names, step_change  # noqa: E402
from dspark_lab.gallery.cases import default_scale  # noqa: E402
from dspark_lab.gallery import report  # noqa: E402
from dspark_lab.measure import probe  # noqa: E402
from dspark_lab.results.analyses import charge_accounting, sync_cost_groups  # noqa: E402
from dspark_lab.results.record.paths import machine_file_name  # noqa: E402


def say_case(c: dict) -> None:
    ch = c["change"] or {}
    print(f"[{time.perf_counter() - T0:6.1f} s] {c['name']}: {ch.get('difference', 'not measured')}", flush=True)


def record(chosen, scale: str, steps: int, rounds: int) -> dict:
    return report.record(chosen, scale=scale, steps=steps, rounds=rounds, progress=say_case)


def verify_groups(out: Path, fp: dict) -> list:
    """verify's compiled and capture groups, written as a verify record; [] of checks without CUDA."""
    from dspark_lab.verify import run

    rec = run(["compiled", "capture"], progress=lambda s: print(f"[{time.perf_counter() - T0:6.1f} s] verify {s}", flush=True))
    path = out / "data" / "verify" / machine_file_name(fp, rec.get("recorded_at") or rec.get("recorded") or "", "verify-compiled")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=1, default=str))
    print(f"verify -> {path}")
    return rec.get("checks", [])


def _change_text(ch: dict) -> str:
    if not ch:
        return "n/a"
    ms = f"{ch['ms']:+.3f} ms [{ch['ms_low']:+.3f}, {ch['ms_high']:+.3f}] " if ch.get("ms") is not None else ""
    return f"{ms}{ch['pct']:+.1f}% [{ch['ci_low']:+.1f}, {ch['ci_high']:+.1f}]"


def _accounting_text(r: dict) -> str:
    if r.get("net charge ms") is None or r["net charge ms"] != r["net charge ms"]:
        return r["verdict"]
    off = "" if not r["off by ms"] or r["off by ms"] != r["off by ms"] else f" by {r['off by ms']:+.3f}"
    work = f" (work {r['work removed ms']:+.3f} off)" if r["work taken off"] and r["work removed ms"] else ""
    return (f"net {r['net charge ms']:.3f} vs {r['wait saving ms']:.3f} [{r['wait saving CI low ms']:.3f}, "
            f"{r['wait saving CI high ms']:.3f}]{work}: {r['verdict']}{off}")


def table_text(rec: dict) -> str:
    """The stage's last table: counts, charge, the paired change (ms and %), the net charge against
    the saving (charge_accounting.RULE) with its verdict, and the group; the accounting's summary last."""
    g = sync_cost_groups.groups(rec).set_index("case")
    acc = charge_accounting.table(rec).set_index("case")
    lines = [f"{'case':24s} {'syncs ok?':13s} {'charge ms':>9s}  {'change fix-case ms [95% CI], %':48s} "
             f"{'net charge vs saving ms [95% CI]: verdict':58s} group"]
    for c in rec["cases"]:
        a, b = c["variants"]["case"], c["variants"]["fix"]
        ok = "n/a (no CUDA)" if a["matches"] is None else "yes" if a["matches"] and b["matches"] else (
            f"NO {a['host_syncs_per_step']}/{b['host_syncs_per_step']}")
        charge = a.get("gpu_idle_sync_caused_ms")
        lines.append(f"{c['name']:24s} {ok:13s} {'n/a' if charge is None else f'{charge:.3f}':>9s}  "
                     f"{_change_text(c.get('change') or {}):48s} {_accounting_text(acc.loc[c['name']].to_dict()):58s} "
                     f"{g.loc[c['name'], 'group']}")
    return "\n".join(lines + [charge_accounting.summary(rec)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default=default_scale(), choices=sorted(SCALES))
    ap.add_argument("--steps", type=int, default=step_change.STEPS, help="steps per trial of the paired rounds")
    ap.add_argument("--rounds", type=int, default=step_change.ROUNDS,
                    help="paired rounds per case: both step times and the fix's change")
    ap.add_argument("--cases", default="", help=f"comma-separated subset of: {', '.join(names())}")
    ap.add_argument("--no-verify", action="store_true", help="skip verify's compiled and capture groups")
    a = ap.parse_args(argv)
    chosen = [c for c in a.cases.split(",") if c] or None
    out = Path(os.environ.get("OUT", "out/gpu"))
    fp = probe.fingerprint()
    print(f"fingerprint: {fp.get('gpu')} · torch {fp.get('torch')} · CUDA {fp.get('cuda')}; scale {a.scale}", flush=True)
    for c in chosen or []:
        if c not in names():
            ap.error(f"--cases: {c!r} is not a case; allowed: {', '.join(names())}")
    rec = record(chosen, a.scale, a.steps, a.rounds)
    rec["wall_s"] = round(time.perf_counter() - T0, 1)
    path = report.save(rec, out / "data" / "gallery" / machine_file_name(fp, rec["recorded_at"], "gallery", with_time=True))
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
    print(f"accounting rule: {charge_accounting.RULE}")
    print(table_text(rec))
    failed = [ch for ch in checks if ch["passed"] is False]
    return 1 if torch.cuda.is_available() and (bad or failed) else 0


T0 = time.perf_counter()

if __name__ == "__main__":
    sys.exit(main())
