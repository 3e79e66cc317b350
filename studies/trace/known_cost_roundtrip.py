"""Does `dspark-lab trace` read a trace the way `inspect` measures the step? On a CUDA machine, for
steps of known cost (gallery/known_idle.py: host 1 ms, GPU 4 ms, the wait, host 2 ms, with a few
forms of wait) and the kit's draft step (model/workload.LabStep, the baseline strategy):

1. `inspect`'s record of the step (run/inspect.inspect_step), its own profiled trace kept and read
   back through `trace` (measure.foreign_read / foreign_record): the same trace, so the same numbers;
2. a trace recorded the way a user records one (torch.profiler.profile with a schedule and
   prof.step(): ProfilerStep#N ranges, no kit range), read through `trace`: its charge per step
   against inspect's, with a 95% CI of inspect's per-step charges (bootstrap of the mean).

Writes $OUT/data/trace/h200-known-cost-roundtrip-<stamp>.json (the comparison) and the traces under
$OUT/data/trace/traces/, and prints a table last. About 60 s on an H200 (budget 80 s).

    OUT=/tmp/o python3 -m studies.trace.known_cost_roundtrip            # CUDA
    python3 -m studies.trace.known_cost_roundtrip --dry-run             # CPU: read-back and comparison on
                                                                        # the committed H200 kit traces
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import os
import shutil
import sys
from pathlib import Path

from dspark_lab.measure import breakdown, foreign_read, foreign_record, syncs, trace
from dspark_lab.results.rules.stats import mean_ci

CASES = ("wait_item", "wait_cpu", "wait_pageable_d2h", "two_syncs")
DRAFT = "draft_step"
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "known_idle_h200"
KEYS = ("gpu_idle_sync_caused_ms", "host_blocked_ms", "gpu_idle_ms")


def per_step_charges(path: str) -> list[float]:
    """The kit's per-step sync-caused idle of a kit trace (steps after the first, as inspect averages)."""
    ev = trace.events(path)
    return breakdown.per_step(ev, syncs.sync_calls(ev)).gpu_idle_sync_caused_ms.tolist()[1:]


def read_back(path: str) -> dict:
    """`trace`'s numbers for a file: its parts, steps accounted, abstentions, GPU share."""
    found, rec = foreign_record.record(foreign_read.read(path))
    parts = {k: (rec["parts"].get(k) if rec else None) for k in KEYS}
    return {"file": Path(path).name, "step_source": found["step_source"], "steps_accounted": len(found["steps_accounted"]),
            "abstained": [a["reason"] for a in found["abstained"]], "gpu_share": found["gpu_share"], **parts}


def compare(name: str, inspect_parts: dict, kit_trace: str, user_trace: str | None) -> dict:
    """One case: inspect's parts, `trace` on inspect's own trace (must be equal), `trace` on the
    user-style trace against inspect's CI of the per-step charge."""
    per = per_step_charges(kit_trace)
    mean, lo, hi = mean_ci(per) if len(per) > 1 else (per[0], per[0], per[0])
    own = read_back(kit_trace)
    row = {"case": name, "inspect": {k: inspect_parts.get(k) for k in KEYS}, "inspect_charge_ci": [mean, lo, hi],
           "inspect_steps": len(per), "trace_of_inspects_trace": own,
           "same_trace_equal": all(own[k] is not None and abs(own[k] - inspect_parts[k]) < 1e-9 for k in KEYS
                                   if inspect_parts.get(k) is not None)}
    if user_trace is not None:
        user = read_back(user_trace)
        charge = user["gpu_idle_sync_caused_ms"]
        row.update(trace_of_user_trace=user, user_trace_within_ci=charge is not None and lo <= charge <= hi,
                   user_minus_inspect_ms=None if charge is None else charge - mean)
    return row


def table(rows: list[dict]) -> str:
    out = [f"{'case':<20} {'inspect ms':>10} {'CI':>15} {'trace(own)':>10} {'equal':>5} {'trace(user)':>11} {'in CI':>5}"]
    for r in rows:
        m, lo, hi = r["inspect_charge_ci"]
        user = r.get("trace_of_user_trace") or {}
        u = user.get("gpu_idle_sync_caused_ms")
        out.append(f"{r['case']:<20} {r['inspect']['gpu_idle_sync_caused_ms']:>10.3f} {f'{lo:.3f}-{hi:.3f}':>15} "
                   f"{r['trace_of_inspects_trace']['gpu_idle_sync_caused_ms']:>10.3f} {str(r['same_trace_equal']):>5} "
                   f"{'n/a' if u is None else f'{u:.3f}':>11} {str(r.get('user_trace_within_ci', 'n/a')):>5}")
    return "\n".join(out)


def dry_run() -> int:
    """On CPU: the read-back and the comparison on the committed H200 kit traces (inspect's parts
    are the kit's own summary of the same trace here)."""
    rows = []
    for name in CASES[:2] + ("two_syncs",):
        path = str(FIXTURES / f"{name}.json.gz")
        ev = trace.events(path)
        rows.append(compare(name, breakdown.summary(ev, calls=syncs.sync_calls(ev)), path, path))
    print(table(rows))
    return 0 if all(r["same_trace_equal"] for r in rows) else 1


def _user_trace(step, path: Path, steps: int) -> None:
    """`steps` steps recorded as a user does: torch.profiler with a schedule, prof.step() per step."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    sched = schedule(wait=1, warmup=2, active=steps, repeat=1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched, with_stack=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(steps + 3):
            step()
            prof.step()
    torch.cuda.synchronize()


def _inspect_keeping_trace(fn, label: str, out: Path, steps: int) -> tuple[dict, Path]:
    """inspect_step's record of `fn`, and the profiled trace it was computed from, written to `out`."""
    from dspark_lab.run import inspect as inspect_mod

    kept: dict = {}
    measure = inspect_mod.measure_step

    def keeping(*a, **k):
        report = measure(*a, **k)
        kept["trace"] = report.trace
        return report
    inspect_mod.measure_step = keeping
    try:
        rec = inspect_mod.inspect_step(fn, label=label, steps=steps, trials=3, warmup=3)
    finally:
        inspect_mod.measure_step = measure
    path = out / f"{label}.inspect.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(kept["trace"], f)
    return rec, path


def _steps():
    """(name, zero-argument step) for each case, made on CUDA. Bare steps: inspect marks each call with
    the kit's step range itself (a step wrapped here too would hold two nested ranges per step, which the
    kit's per-step split counts twice), and the user-style trace is marked by the profiler's own
    ProfilerStep#N, as a user's is."""
    from dspark_lab.config import LabConfig
    from dspark_lab.gallery import known_idle
    from dspark_lab.measure import probe
    from dspark_lab.model.workload import LabStep

    probe.calibrate_sleep()
    for name in CASES:
        case = known_idle.get(name)
        yield name, known_idle.make_step(case.ops, wait=case.wait)
    lab = LabStep.warmed(LabConfig())
    yield DRAFT, lab.step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU: read back the committed H200 kit traces only")
    ap.add_argument("--steps", type=int, default=8, help="profiled steps per trace (default 8)")
    a = ap.parse_args(argv)
    if a.dry_run:
        return dry_run()
    import torch

    if not torch.cuda.is_available():
        print("known_cost_roundtrip: needs CUDA (run with --dry-run on CPU)", file=sys.stderr)
        return 6
    out = Path(os.environ.get("OUT", "out")) / "data" / "trace"
    traces = out / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, step in _steps():
        rec, kit_path = _inspect_keeping_trace(step, name, traces, a.steps)
        user_path = traces / f"{name}.profiler.json"
        _user_trace(step, user_path, a.steps)
        rows.append(compare(name, rec["parts"], str(kit_path), str(user_path)))
        with open(user_path, "rb") as src, gzip.open(str(user_path) + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        user_path.unlink()
        rows[-1]["trace_of_user_trace"]["file"] += ".gz"
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    doc = {"kind": "trace_known_cost_roundtrip", "recorded_at": stamp, "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "steps": a.steps, "rows": rows}
    (out / f"h200-known-cost-roundtrip-{stamp}.json").write_text(json.dumps(doc, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
