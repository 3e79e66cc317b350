"""GPU study: how far ahead of the GPU the host launches, and the GPU idle by cause, for the five
strategies at the reference point and for the known-cost steps.

    python -m studies.run_ahead.reference_point            # on a CUDA machine (about a minute on an H200)
    python -m studies.run_ahead.reference_point --smoke    # tiny model on CPU: the code path only

Per strategy at the reference point (sglang_profile, EP 8, batch 8, gamma 4; one process): the launch
lead (median and minimum, over every launch of the profiled steps after the first), the run-ahead
fraction (launches that found the GPU still busy), the same after each step's first sync (where the
host stands once a sync has drained the queue: device_direct's should be never ahead), and the GPU
idle per step by cause (sync / host-bound / other, summing to the idle; measure/idle_causes.py).
The same for each known-cost step of gallery/known_idle.py (CUDA only). Writes the JSON record with
the machine's fingerprint under data/machines/ (--out), and prints the table last.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402

from dspark_lab.config import LabConfig  # noqa: E402
from dspark_lab.gallery import known_idle  # noqa: E402
from dspark_lab.measure import breakdown, probe, run_ahead, syncs, trace  # noqa: E402
from dspark_lab.measure.profile import profile_strategies, strategy_windows  # noqa: E402
from dspark_lab.measure.step import as_step  # noqa: E402
from dspark_lab.results.facts.strategy_table import BUILTIN_INFO  # noqa: E402
from dspark_lab.run.point import build_steps  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STRATEGIES = tuple(BUILTIN_INFO)
PROFILE_STEPS, WARMUP = 12, 5
KEYS = ("launch_lead_median_ms", "launch_lead_min_ms", "run_ahead_fraction", "gpu_idle_ms",
        "gpu_idle_sync_caused_ms", "gpu_idle_host_bound_ms", "gpu_idle_other_cause_ms", "host_blocked_ms",
        "profiled_step_ms", "launches_per_step")


def numbers(tr: dict) -> dict:
    """The run-ahead and idle-by-cause numbers of one trace (steps after the first)."""
    ev = trace.events(tr)
    calls = syncs.sync_calls(ev)
    s = breakdown.summary(ev, calls=calls)
    out = {k: s[k] for k in KEYS}
    after = run_ahead.after_first_sync(ev, breakdown.launches(ev), calls)
    out.update(after_sync_launches=after["launches"], after_sync_run_ahead_fraction=after["run_ahead_fraction"],
               after_sync_lead_max_ms=after["launch_lead_max_ms"])
    out["syncs_per_step"] = syncs.counts_per_step(ev, calls)["syncs_per_step"]
    return out


def strategies_at_reference(smoke: bool) -> dict:
    cfg = LabConfig(ep_size=8, batch_size=8, gamma=4, workload="sglang_profile", **({"model": "tiny"} if smoke else {}))
    steps = build_steps(cfg, STRATEGIES)
    for s in steps.values():
        for _ in range(WARMUP):
            s.step()
        s.drain()
    whole = profile_strategies(steps, 3 if smoke else PROFILE_STEPS)
    return {n: numbers(w) for n, w in strategy_windows(whole, STRATEGIES).items()}


def known_cost_steps() -> dict:
    probe.calibrate_sleep()
    out = {}
    for case in known_idle.CASES:
        tr = trace.capture(as_step(known_idle.make_step(case.ops, wait=case.wait)), 8, warmup=2, sync=torch.cuda.synchronize)
        out[case.name] = numbers(tr) | {"what": case.what, "documented_syncs_per_step": case.syncs_per_step}
    return out


def table(res: dict) -> list[str]:
    head = (f"{'step':<18}{'syncs':>6}{'lead med':>10}{'lead min':>10}{'run-ahead':>10}{'after sync':>11}"
            f"{'idle':>8}{'sync':>7}{'host-b.':>8}{'other':>7}")
    lines = [head, f"{'':<18}{'/step':>6}{'ms':>10}{'ms':>10}{'fraction':>10}{'max lead':>11}{'ms':>8}  (shares of the idle)"]
    for group, rows in (("reference point", res["strategies"]), ("known-cost steps", res.get("known_idle") or {})):
        lines.append(f"-- {group}")
        for name, r in rows.items():
            idle = r["gpu_idle_ms"] or float("nan")
            share = lambda k: r[k] / idle if idle else float("nan")  # noqa: E731
            lines.append(f"{name:<18}{r['syncs_per_step']:>6.2f}{r['launch_lead_median_ms']:>+10.3f}{r['launch_lead_min_ms']:>+10.3f}"
                         f"{r['run_ahead_fraction']:>10.3f}{r['after_sync_lead_max_ms']:>+11.3f}{idle:>8.3f}"
                         f"{share('gpu_idle_sync_caused_ms'):>7.0%}{share('gpu_idle_host_bound_ms'):>8.0%}"
                         f"{share('gpu_idle_other_cause_ms'):>7.0%}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model, few steps, on CPU: the code path only")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "machines", help="folder for the JSON record")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        sys.exit("needs CUDA (run with --smoke for the code path on CPU)")
    fp = probe.fingerprint()
    res = {"kind": "run_ahead_reference_point", "fingerprint": fp,
           "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "point": {"workload": "sglang_profile", "ep_size": 8, "batch_size": 8, "gamma": 4, "smoke": args.smoke},
           "profiled_steps": PROFILE_STEPS, "strategies": strategies_at_reference(args.smoke),
           "known_idle": known_cost_steps() if cuda else None}
    args.out.mkdir(parents=True, exist_ok=True)
    slug = "-".join(fp["gpu"].lower().replace("nvidia", "").split()) if cuda else "cpu-smoke"
    path = args.out / f"{slug}-run-ahead-{_dt.datetime.now(_dt.timezone.utc):%Y%m%d-%H%M}.json"
    path.write_text(json.dumps(res, indent=1, default=float))
    print(f"wrote {path}")
    print("\n".join(table(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
