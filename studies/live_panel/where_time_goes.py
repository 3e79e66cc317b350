"""Where a live update's seconds go (a diagnosis; studies.live_panel.benchmark is the benchmark): one fresh process,
`LiveBackend` with an empty calibration cache, its warm-up run on the main thread, then three
settings streamed one after the other. Wall time is summed per part (the functions below are
wrapped, no profiler of our own on top), and the second setting is also run under cProfile for
the detail. Prints two tables; writes $OUT/where-time-goes/<n>.txt.

  OUT=/tmp/o python -m studies.live_panel.where_time_goes [--tag first]     # on a CUDA machine
  OUT=/tmp/o python -m studies.live_panel.where_time_goes --cpu-dry-run     # the path on CPU, tiny model
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

T_IMPORT = time.perf_counter()
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["DSPARK_CACHE"] = tempfile.mkdtemp(prefix="dspark-where-cache-")

SPENT: dict = defaultdict(float)  # (phase, part) -> seconds
CALLS: dict = defaultdict(int)
EACH: dict = defaultdict(list)  # (phase, part) -> each call's seconds
PHASE = ["import"]


def wrap(owner, attr: str, part: str) -> None:
    fn = getattr(owner, attr)

    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            d = time.perf_counter() - t
            SPENT[(PHASE[0], part)] += d
            CALLS[(PHASE[0], part)] += 1
            EACH[(PHASE[0], part)].append(d)

    setattr(owner, attr, timed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-dry-run", action="store_true", help="tiny model on CPU: the code path, no GPU numbers")
    ap.add_argument("--tag", default="run", help="the name of this process's table (default: %(default)s)")
    a = ap.parse_args(argv)
    import torch

    from dspark_lab.config import LabConfig
    from dspark_lab.measure import loop, profile, syncs, trace
    from dspark_lab.model import workload
    from dspark_lab.run import live, point

    SPENT[("import", "imports (torch, the kit)")] = time.perf_counter() - T_IMPORT
    from torch.autograd import profiler as autograd_profiler

    from dspark_lab.model import draft

    # (where the name is looked up when called, the name, the part it is summed under)
    for owner, attr, part in (
            (autograd_profiler.profile, "__enter__", "profiler start"),
            (autograd_profiler.profile, "__exit__", "profiler stop"),
            (autograd_profiler.profile, "export_chrome_trace", "trace export"),
            (trace, "load_json", "trace json read (here when no worker)"),
            (trace, "events", "trace -> events frame (here when no worker)"),
            (point, "analyse", "analyse (counts, breakdown, timeline; here when no worker)"),
            (syncs, "debug_sites_per_step", "sync debug mode steps"),
            (point, "build_steps", "build steps"),
            (workload.TargetVerify, "_layers_for", "target verify calibration"),
            (workload.TargetVerify, "_capture", "target verify graph capture"),
            (workload.LabStep, "__init__", "LabStep made (each)"),
            (draft.DraftRunner, "capture", "draft graph capture (each)"),
            (workload.LabStep, "step", "steps (all)"),
            (workload, "_iters_per_us", "spin calibration"),
            (point, "_with_noise_verdict", "noise verdict"),
            (point, "timing_rows", "timing rows (partials)"),
            (loop, "run_rounds", "timed rounds, the profiled pass among them (all)"),
            (point, "profile_strategies", "profiled steps and export (all)")):
        wrap(owner, attr, part)
    base = (LabConfig(model="tiny", workload="tiny", steps=2, warmup=0, trials=2, device="cpu")
            if a.cpu_dry_run else None)
    PHASE[0] = "warm-up"
    t = time.perf_counter()
    b = live.LiveBackend(base, warm=False) if base else live.LiveBackend(warm=False)
    b.warm_up()
    walls = {"warm-up": time.perf_counter() - t}
    settings = [b.defaults(), {**b.defaults(), "batch_size": 32}, {**b.defaults(), "gamma": 8}]
    prof_text = ""
    for i, s in enumerate(settings):
        PHASE[0] = f"setting {i + 1}"
        marks: list = []
        t = time.perf_counter()

        def on_update(u, t=t, marks=marks):
            marks.append((time.perf_counter() - t, u.trials, u.final))

        def on_progress(msg, frac=None, *rest, t=t, marks=marks):
            if msg == "profiling":
                marks.append((time.perf_counter() - t, "profiling starts", None))

        pr = cProfile.Profile() if i == 1 else None
        if pr:
            pr.enable()
        b.stream(s, on_update=on_update, on_progress=on_progress)
        if pr:
            pr.disable()
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(40)
            prof_text = buf.getvalue()
        walls[PHASE[0]] = time.perf_counter() - t
        SPENT[(PHASE[0], "marks")] = 0.0
        walls[PHASE[0] + " marks"] = marks
    b.close()
    lines = [f"[{a.tag}] torch {torch.__version__}, cuda {torch.cuda.is_available()}"]
    for ph in ["import", "warm-up", "setting 1", "setting 2", "setting 3"]:
        wall = walls.get(ph)
        lines.append(f"--- {ph}" + (f": {wall:.3f} s wall" if wall is not None else ""))
        for (p, part), v in sorted(SPENT.items(), key=lambda kv: -kv[1]):
            if p == ph and part != "marks":
                each = EACH[(p, part)]
                detail = ("  [" + " ".join(f"{x:.3f}" for x in each[:8]) + "]") if "(each)" in part else ""
                lines.append(f"  {part:42s} {v:8.3f} s  x{CALLS[(p, part)]}{detail}")
        if ph + " marks" in walls:
            lines.append("  updates: " + ", ".join(f"{m[0]:.2f}s:{m[1]}{'F' if m[2] else ''}" for m in walls[ph + ' marks']))
        lines.append("  warm parts: " + str(b.warm_parts) if ph == "warm-up" else "")
    lines.append("--- cProfile of setting 2 (cumulative, top 40)")
    lines.append(prof_text)
    text = "\n".join(x for x in lines if x is not None)
    out = Path(os.environ.get("OUT", "out")) / "where-time-goes"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.tag}.txt").write_text(text)
    print(text[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
