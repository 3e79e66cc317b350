"""Does `dspark-lab trace` read a trace the way `inspect` measures the step? On a CUDA machine, for
steps of known cost (gallery/known_idle.py: host 1 ms, GPU 4 ms, the wait, host 2 ms, with three
forms of wait; and two_syncs, two syncs in a row) and the kit's draft step (model/workload.LabStep, the baseline strategy), ROUNDS rounds
each of:

1. `inspect`'s record of the step (run/inspect.inspect_step), its own profiled trace kept and read
   back through `trace` (measure.foreign_read / foreign_record): the same trace, so the same numbers;
2. a trace recorded the way a user records one (torch.profiler.profile with a schedule and
   prof.step(): ProfilerStep#N ranges, no kit range) with the kit's profiler settings (Python stacks,
   memory, CUDA sync events), read through `trace`: its charge per step against inspect's, with a 95%
   CI over inspect's captures (verify's: Student's t over the captures' means, never narrower than the
   steps' CI; captures can move more than one capture's steps say), and the difference of the two with its own
   95% CI by Welch's t (each way varies from capture to capture; a bootstrap of 3 captures a side covers
   less than 95%);
3. the same with torch.profiler's defaults and Python stacks only: the charge's
   difference to inspect's, beside the kit-settings trace's (the two differ only in the profiler's settings).

Writes $OUT/data/trace/<gpu>-known-cost-roundtrip-<stamp>.json (the comparison) and the first round's
traces under $OUT/data/trace/traces-<stamp>/ (a record made before per-stamp folders has them in
traces/), and prints a table last; scripts/device_round.sh allows it 240 s.

    OUT=/tmp/o python3 -m studies.trace.known_cost_roundtrip            # CUDA
    python3 -m studies.trace.known_cost_roundtrip --dry-run             # CPU: read-back and comparison on
                                                                        # the committed H200 kit traces
    python3 -m studies.trace.known_cost_roundtrip --analyse RECORD      # CPU: a record's table, today's CIs
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
from dspark_lab.results.analyses.verification import charge_over_captures
from dspark_lab.results.record.paths import gpu_slug
from dspark_lab.results.rules.stats import mean_ci, welch_difference_ci

CASES = ("wait_item", "wait_cpu", "wait_pageable_d2h", "two_syncs")
DRAFT = "draft_step"
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "known_idle_h200"
KEYS = ("gpu_idle_sync_caused_ms", "host_blocked_ms", "gpu_idle_ms")
ROUNDS = 3


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


def capture_charge(per_step: list) -> float:
    """One kit capture's charge per step from its per_step_charges: the mean over its steps after the
    first, as inspect's."""
    return float(sum(per_step) / len(per_step)) if per_step else 0.0


def compare(name: str, inspect_parts: dict, kit_traces: list, user_traces: list, default_traces: list = ()) -> dict:
    """One case: inspect's parts, `trace` on inspect's own first trace (must be equal), and `trace` on the
    user-style traces (kit settings) against a 95% CI over inspect's captures (the per-step CI of one
    capture where there is one capture); the default-settings traces' difference beside it."""
    per_capture = [per_step_charges(p) for p in kit_traces]  # each trace read once
    kit = [capture_charge(per) for per in per_capture]
    if len(kit) > 1:  # the kit's CI over captures (verify's): t over the captures' means, at least the steps'
        mean, lo, hi = charge_over_captures(per_capture)
    else:
        per = per_capture[0]
        mean, lo, hi = mean_ci(per) if len(per) > 1 else (per[0], per[0], per[0])
    own = read_back(kit_traces[0])
    row = {"case": name, "inspect": {k: inspect_parts.get(k) for k in KEYS}, "inspect_charge_ci": [mean, lo, hi],
           "inspect_captures": kit, "ci_over": "captures" if len(kit) > 1 else "steps of one capture",
           "trace_of_inspects_trace": own,
           "same_trace_equal": all(own[k] is not None and abs(own[k] - inspect_parts[k]) < 1e-9 for k in KEYS
                                   if inspect_parts.get(k) is not None)}
    for key, paths in (("user", user_traces), ("default", default_traces)):
        reads = [read_back(p) for p in paths]
        charges = [r["gpu_idle_sync_caused_ms"] for r in reads if r["gpu_idle_sync_caused_ms"] is not None]
        if not reads:
            continue
        row[f"trace_of_{key}_trace"] = reads[0]
        row.update(against_inspect(key, charges, kit, (mean, lo, hi)))
    return row


def against_inspect(key: str, charges: list, kit: list, ci: tuple) -> dict:
    """The user-style charges against inspect's: their mean inside inspect's CI, and their difference with
    its own 95% CI (Welch's t: both ways vary from capture to capture) where each side has two captures."""
    mean, lo, hi = ci
    m = sum(charges) / len(charges) if charges else None
    out = {f"{key}_charges": charges, f"{key}_trace_within_ci": m is not None and lo <= m <= hi,
           f"{key}_minus_inspect_ms": None if m is None else m - mean}
    if len(charges) > 1 and len(kit) > 1:
        d, dlo, dhi = welch_difference_ci(charges, kit)
        out[f"{key}_minus_inspect_ci"] = [d, dlo, dhi]
        out[f"{key}_equal_within_difference_ci"] = dlo <= 0 <= dhi
    return out


def reanalysed(record: dict) -> list[dict]:
    """A recorded round trip's rows with today's CIs, from the captures' charges it holds (the means of
    inspect's captures stand for their steps: the t part of the CI over captures)."""
    rows = []
    for r in record["rows"]:
        kit = r["inspect_captures"]
        ci = charge_over_captures([[v] for v in kit]) if len(kit) > 1 else tuple(r["inspect_charge_ci"])
        row = {"case": r["case"], "inspect_charge_ci": list(ci), "same_trace_equal": r["same_trace_equal"]}
        for key in ("user", "default"):
            if f"{key}_charges" in r:
                row.update(against_inspect(key, r[f"{key}_charges"], kit, ci))
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    out = [f"{'case':<18} {'inspect ms':>10} {'95% CI':>13} {'own':>5} {'user(kit settings)':>18} {'in CI':>5} "
           f"{'user-inspect [95% CI]':>24} {'user(defaults)-inspect':>22}"]
    for r in rows:
        m, lo, hi = r["inspect_charge_ci"]
        u = r.get("user_minus_inspect_ms")
        d = r.get("default_minus_inspect_ms")
        out.append(f"{r['case']:<18} {m:>10.3f} {f'{lo:.3f}-{hi:.3f}':>13} {str(r['same_trace_equal']):>5} "
                   f"{'n/a' if u is None else f'{m + u:.3f}':>18} {str(r.get('user_trace_within_ci', 'n/a')):>5} "
                   f"{_difference(r.get('user_minus_inspect_ci')):>24} {'n/a' if d is None else f'{d:+.3f}':>22}")
    return "\n".join(out)


def _difference(ci) -> str:
    return "n/a (one capture)" if not ci else f"{ci[0]:+.3f} [{ci[1]:+.3f}, {ci[2]:+.3f}]"


def dry_run() -> int:
    """On CPU: the read-back and the comparison on the committed H200 kit traces (inspect's parts
    are the kit's own summary of the same trace here)."""
    rows = []
    for name in CASES[:2] + ("two_syncs",):
        path = str(FIXTURES / f"{name}.json.gz")
        ev = trace.events(path)
        rows.append(compare(name, breakdown.summary(ev, calls=syncs.sync_calls(ev)), [path], [path]))
    print(table(rows))
    return 0 if all(r["same_trace_equal"] for r in rows) else 1


def _user_trace(step, path: Path, steps: int, kit_settings: bool) -> None:
    """`steps` steps recorded as a user does: torch.profiler with a schedule, prof.step() per step; with
    `kit_settings` the options the kit's own capture uses (measure/trace.py profiled), else torch's
    defaults with Python stacks."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    extra = {}
    if kit_settings:
        extra = dict(profile_memory=True, record_shapes=False)
        cfg = trace._experimental_config()
        if cfg is not None:
            extra["experimental_config"] = cfg
    sched = schedule(wait=1, warmup=2, active=steps, repeat=1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched, with_stack=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path)), **extra) as prof:
        for _ in range(steps + 3):
            step()
            prof.step()
    torch.cuda.synchronize()


def _inspect_keeping_trace(fn, label: str, out: Path, steps: int) -> tuple[dict, Path]:
    """inspect_step's record of `fn`, and the profiled trace it was computed from (kept by an
    observer of inspect's PointRun), written to `out`."""
    from dspark_lab.parallel.orchestrator import PointObserver
    from dspark_lab.run.inspect import inspect_step

    class KeepTrace(PointObserver):
        def on_done(self, result) -> None:
            self.trace = result.reports[label].trace

    kept = KeepTrace()
    rec = inspect_step(fn, label=label, steps=steps, trials=3, warmup=3, observers=[kept])
    path = out / f"{label}.inspect.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(kept.trace, f)
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


def _case(name: str, step, traces: Path, steps: int, rounds: int) -> dict:
    """ROUNDS rounds of the three captures, interleaved; the first round's traces kept (gzipped), the
    others removed once read."""
    kit, user, default, first = [], [], [], None
    for k in range(rounds):
        rec, kit_path = _inspect_keeping_trace(step, name if k == 0 else f"{name}.{k}", traces, steps)
        first = first or rec
        kit.append(str(kit_path))
        for kind, paths, kit_settings in (("profiler", user, True), ("defaults", default, False)):
            path = traces / f"{name}{'' if k == 0 else f'.{k}'}.{kind}.json"
            _user_trace(step, path, steps, kit_settings)
            with open(path, "rb") as src, gzip.open(str(path) + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            path.unlink()
            paths.append(str(path) + ".gz")
    row = compare(name, first["parts"], kit, user, default)
    for p in kit[1:] + user[1:] + default[1:]:
        Path(p).unlink()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU: read back the committed H200 kit traces only")
    ap.add_argument("--analyse", metavar="RECORD", help="CPU: a recorded round trip's table with today's CIs")
    ap.add_argument("--steps", type=int, default=8, help="profiled steps per trace (default 8)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"captures of each kind per case (default {ROUNDS})")
    a = ap.parse_args(argv)
    if a.dry_run:
        return dry_run()
    if a.analyse:
        print(table(reanalysed(json.loads(Path(a.analyse).read_text()))))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("known_cost_roundtrip: needs CUDA (run with --dry-run on CPU)", file=sys.stderr)
        return 6
    out = Path(os.environ.get("OUT", "out")) / "data" / "trace"
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    traces = out / f"traces-{stamp}"
    traces.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, step in _steps():
        rows.append(_case(name, step, traces, a.steps, a.rounds))
    doc = {"kind": "trace_known_cost_roundtrip", "recorded_at": stamp, "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "steps": a.steps, "rounds": a.rounds, "rows": rows}
    (out / f"{gpu_slug(doc['gpu'])}-known-cost-roundtrip-{stamp}.json").write_text(json.dumps(doc, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
