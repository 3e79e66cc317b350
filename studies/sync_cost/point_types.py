"""GPU stage: what a sync costs at three point types, measured two ways.

  python -m studies.sync_cost.point_types [--smoke]

Measures EP 8, batch 8, gamma 4 with the workloads sglang_profile, gpu_bound and host_bound
(run.point.measure_point, all strategies), writes the three points into one run file under $OUT
(default out/gpu) via store.RunWriter with the machine's fingerprint in the header, keeps the first
5 profiled steps of each strategy's trace under $OUT/traces/ (test fixtures), and prints a table
last: per point type, device_direct's GPU idle charged to its sync (profiled) against its measured
step-time loss vs the best sync-free strategy (profiler-free, paired per trial round, 95% CI) and
the GPU idle difference. `--smoke` runs the tiny model with a few steps (a CPU check of the code
path: on CPU nothing synchronizes, so the table says so).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# Multi-GPU safety on the device machines (this stage uses one GPU; kept for any child process).
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from dspark_lab.results.loading import load as run_load  # noqa: E402
from dspark_lab.results.record import store  # noqa: E402
from dspark_lab.config import LabConfig  # noqa: E402
from dspark_lab.measure import probe, trace  # noqa: E402
from dspark_lab.results.analyses import sync_cost  # noqa: E402
from dspark_lab.run.point import measure_point, point_id  # noqa: E402
from dspark_lab.measure.ranges import STEP_RANGE  # noqa: E402

POINT_TYPES = ("sglang_profile", "gpu_bound", "host_bound")
FULL = dict(steps=30, warmup=5, trials=6)
SMOKE = dict(model="tiny", steps=3, warmup=1, trials=2)
FIXTURE_STEPS = 5


def configs(smoke: bool) -> list[LabConfig]:
    sizes = SMOKE if smoke else FULL
    return [LabConfig(ep_size=8, batch_size=8, gamma=4, workload=w, **sizes) for w in POINT_TYPES]


def table(rows) -> list[str]:
    """Per point type: device_direct's charged idle, measured loss (CI) and idle difference."""
    cost = sync_cost.for_points(rows, keys=["workload", "point_id"])
    head = (f"{'point type':<16}{'strategy':<15}{'vs':<15}{'charged idle':>13}{'idle diff':>11}"
            f"{'host blocked':>14}{'loss (no profiler)':>20}{'95% CI':>18}{'ratio':>7}")
    lines = [head]
    for w in POINT_TYPES:
        t = cost[cost.workload == w]
        if not (rows.workload == w).any():
            lines.append(f"{w:<16}not measured")
        elif t.empty:
            lines.append(f"{w:<16}no strategy synchronizes here (device {rows[rows.workload == w].device.iloc[0]})")
            continue
        for r in t.itertuples():
            lines.append(f"{w:<16}{r.strategy:<15}{r.baseline:<15}{r.charged_idle_ms:>10.2f} ms{r.idle_diff_ms:>8.2f} ms"
                         f"{r.host_blocked_ms:>11.2f} ms{r.loss_ms:>+17.2f} ms"
                         f"{f'{r.loss_ci_low_ms:+.2f} to {r.loss_ci_high_ms:+.2f}':>18}{r.ratio:>7.2f}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model, few steps (a CPU check of the code path)")
    args = ap.parse_args(argv)
    out = Path(os.environ.get("OUT", "out/gpu"))
    traces_dir = out / "traces"
    traces_dir.mkdir(parents=True, exist_ok=True)
    fp = probe.fingerprint()
    cfgs = configs(args.smoke)
    run_id = store.new_run_id()
    label = "sync-cost-smoke" if args.smoke else "sync-cost"
    timings = {}
    with store.RunWriter.create(out / f"{label}-{run_id}.jsonl", fingerprint=fp, run_id=run_id, run_kind="sync_cost",
                                sweep={"points": [c.to_dict() for c in cfgs], "stage": "gpu_sync_cost"}) as writer:
        for cfg in cfgs:
            t0 = time.time()
            r = measure_point(cfg)
            writer.write_point(point_id(cfg), r.rows, r.timelines)
            for name, tr in r.traces.items():
                trace.export(trace.trim(tr, STEP_RANGE, FIXTURE_STEPS),
                             traces_dir / f"{cfg.workload}_ep{cfg.ep_size}_{name}.rank0.json.gz")
            timings[cfg.workload] = round(time.time() - t0, 1)
            print(f"{cfg.workload}: measured in {timings[cfg.workload]} s, outputs identical: {r.outputs_identical}", flush=True)
        path = writer.path
    rows = run_load.load([path]).rows
    lines = table(rows)
    (out / f"{label}-table.txt").write_text("\n".join(lines) + "\n")
    (out / f"{label}-timings.json").write_text(json.dumps({"fingerprint": fp, "seconds": timings, "run": str(path)}, indent=1))
    print(f"run file: {path}")
    print(f"GPU idle charged to a sync (profiled) vs the step-time loss it causes, {fp['gpu']}, torch {fp['torch']}:")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
