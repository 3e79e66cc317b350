"""Everything one device-machine call needs, in one script: results under $OUT, a table last.

  python scripts/gpu_session.py STAGE [STAGE ...]
    check       fingerprint + probe, the draft step per strategy (graph and eager), the
                sglang_profile preset at EP 1 and 8, trimmed traces for test fixtures
    sweep       the default sweep through the CLI, timed, into $OUT/runs.jsonl
    cuda_tests  pytest -m cuda
    live        time live panel updates (all strategies at one setting) at five settings
    notebooks   notebooks executed headless in live mode (needs the carried wheels): 01 and 02, or
                the comma list in $DSPARK_NOTEBOOKS
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dspark_lab import strategies  # noqa: E402
from dspark_lab.config import LabConfig  # noqa: E402
from dspark_lab.model.draft import INVALID_EXPERT  # noqa: E402
from dspark_lab.measure import probe, timing, trace  # noqa: E402
from dspark_lab.results.rules.stats import compare, median_ci  # noqa: E402
from dspark_lab.measure.profile import analyse  # noqa: E402
from dspark_lab.run.point import measure_point, point_id  # noqa: E402
from dspark_lab.measure.ranges import STEP_RANGE  # noqa: E402
from dspark_lab.model.workload import LabStep  # noqa: E402

OUT = Path(os.environ.get("OUT", "out/gpu"))
OUT.mkdir(parents=True, exist_ok=True)


def dump(name: str, obj) -> None:
    with open(OUT / name, "w") as f:
        json.dump(obj, f, indent=1, default=str)


def draft_check() -> dict:
    """Every strategy, graph replay and eager, EP 8 at a padded batch: outputs and step times."""
    res = {}
    base = LabConfig(ep_size=8, batch_size=5, gamma=4, workload="gpu_bound", steps=30)
    ref = None
    for graph in (True, False):
        for name in strategies.BUILTIN:
            s = LabStep(base.with_(graph=graph), name)
            t = timing.time_trial(s.step, 30, 5, s.drain)
            s.drain()
            ids = s.last_expert_ids
            n = base.num_tokens
            tokens = s.last_output.cpu()
            ref = tokens if ref is None else ref
            res[f"{name}/{'graph' if graph else 'eager'}"] = dict(
                step_ms=t.step_ms, p50=t.p50, tokens_equal_ref=bool(torch.equal(tokens, ref)),
                padded_rows=int(ids.shape[0] - n), padded_rows_no_expert=bool((ids[n:] == INVALID_EXPERT).all().item()),
                real_rows_routed=bool((ids[:n] != INVALID_EXPERT).all().item()),
            )
    return res


def preset(ep: int, tag: str, traces_dir: Path, writer) -> dict:
    """The sglang_profile preset at one EP size: rows into the run file, trimmed traces."""
    cfg = LabConfig(ep_size=ep, batch_size=8, gamma=4, workload="sglang_profile", steps=60, warmup=10, trials=10)
    t0 = time.time()
    r = measure_point(cfg)
    wall = time.time() - t0
    writer.write_point(point_id(cfg), r.rows, r.timelines)
    for name, tr in r.traces.items():
        trace.export(trace.trim(tr, STEP_RANGE, 5), traces_dir / f"{tag}_{name}.rank0.json.gz")
    # With Python stacks: trace-based attribution (file and function) and the tracer's inflation.
    stacked = {}
    for name in ("device_direct", "non_blocking"):
        s = LabStep(cfg, name)
        tr = trace.capture(s.step, 12, warmup=5, sync=s.drain, with_stack=True)
        s.drain()
        trace.export(trace.trim(tr, STEP_RANGE, 5), traces_dir / f"{tag}_{name}_stacks.rank0.json.gz")
        stats, _ = analyse(tr)
        stacked[name] = {"profiled_step_ms": stats["profiled_step_ms"], "host_blocked_ms": stats["host_blocked_ms"], "sync_site": stats["sync_site"]}
    return {"rows": r.rows, "outputs_identical": r.outputs_identical, "wall_s": wall, "with_stack": stacked}


def run_stage_sweep() -> str:
    import subprocess

    t0 = time.time()
    rc = subprocess.call([sys.executable, "-m", "dspark_lab.cli.main", "sweep", "--preset", "default",
                          "--out", str(OUT / "runs.jsonl"), "--no-progress"])
    return f"default sweep: rc {rc}, wall {time.time() - t0:.1f} s"


def run_stage_cuda_tests() -> str:
    import subprocess

    t0 = time.time()
    rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-rs", "-m", "cuda and not sglang",
                          "-p", "no:cacheprovider", "tests"])
    return f"cuda tests: rc {rc}, wall {time.time() - t0:.1f} s"


def run_stage_live() -> str:
    """How long a live panel update takes: all strategies at one setting, measured (the panel's
    redraw is timed on CPU by the tests)."""
    from dspark_lab.run import live  # the panel's backend without plotly (absent on the GPU box)

    b = live.LiveBackend()
    d = b.defaults()
    settings = [d, {**d, "batch_size": 32}, {**d, "gamma": 8}, {**d, "ep_size": 1}, {**d, "batch_size": 1}]
    out, times = [], []
    for s in settings:
        t0 = time.perf_counter()
        point = b.get(s)
        times.append(time.perf_counter() - t0)
        r = point.rows
        dd = r[r.strategy == "device_direct"].step_ms.median()
        out.append(f"live update {s}: {times[-1]:.2f} s (device_direct {dd:.2f} ms/step)")
    dump("live.json", {"settings": settings, "seconds": times})
    return "\n".join(out)


def run_stage_notebooks() -> str:
    import nbformat
    from nbclient import NotebookClient

    lines = []
    # The kernel is another process: it finds the package through PYTHONPATH (not installed here).
    root = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    runs_before = set(Path("data/runs").glob("*.jsonl"))
    nb_out = OUT / "notebooks"
    nb_out.mkdir(exist_ok=True)
    names = os.environ.get("DSPARK_NOTEBOOKS", "01_onboarding.ipynb,02_tuning_new_gpu.ipynb").split(",")
    for name in names:
        nb = nbformat.read(Path("notebooks") / name, as_version=4)
        t0 = time.time()
        client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "notebooks"}})
        try:
            client.execute()
            status = "ok"
        except Exception as e:  # noqa: BLE001 - report and go on to the next notebook
            status = f"FAILED: {type(e).__name__}: {str(e)[:300]}"
        nbformat.write(nb, nb_out / name)
        lines.append(f"notebook {name}: {status}, wall {time.time() - t0:.1f} s")
    for run in set(Path("data/runs").glob("*.jsonl")) - runs_before:  # notebook 02's sweep
        (nb_out / run.name).write_bytes(run.read_bytes())
    with tarfile.open(OUT / "notebooks.tar.gz", "w:gz") as tf:
        tf.add(nb_out, arcname="notebooks")
    for p in nb_out.iterdir():
        p.unlink()
    nb_out.rmdir()
    return "\n".join(lines)


def run_stage_check() -> str:
    dc = draft_check()
    traces_dir = OUT / "traces"
    traces_dir.mkdir(exist_ok=True)
    from dspark_lab.results.record import store

    with store.RunWriter.create(OUT / "presets.jsonl", fingerprint=probe.fingerprint(), run_kind="preset_check",
                                sweep={"preset": "sglang_profile", "ep_size": [1, 8], "batch_size": [8], "gamma": [4]},
                                probe=probe.run_probe(), draft_check=dc) as writer:
        summary = {ep: preset(ep, f"sglang_profile_ep{ep}", traces_dir, writer) for ep in (1, 8)}
    dump("presets_extra.json", {ep: {k: v for k, v in res.items() if k != "rows"} for ep, res in summary.items()})
    with tarfile.open(OUT / "traces.tar.gz", "w:gz") as tf:
        tf.add(traces_dir, arcname="traces")
    for p in traces_dir.iterdir():
        p.unlink()
    traces_dir.rmdir()
    out = ["== draft step (EP 8, batch 5 -> bucket 8, gpu_bound workload)"]
    for k, v in dc.items():
        out.append(f"{k:28s} {v['step_ms']:7.3f} ms  tokens==ref {v['tokens_equal_ref']}  padded {v['padded_rows']} "
                   f"no-expert {v['padded_rows_no_expert']}")
    for ep, res in summary.items():
        out.append(f"== sglang_profile preset, EP {ep}, batch 8, gamma 4 (wall {res['wall_s']:.1f} s, "
                   f"outputs identical {res['outputs_identical']})")
        by: dict = {}
        for row in res["rows"]:
            by.setdefault(row["strategy"], []).append(row)
        dd = [r["step_ms"] for r in by["device_direct"]]
        for name, rows in by.items():
            med, lo, hi = median_ci([r["step_ms"] for r in rows])
            r0 = rows[0]
            cmp = compare([r["step_ms"] for r in rows], dd, name, "device_direct")
            out.append(f"{name:17s} {med:6.3f} ms [{lo:.3f},{hi:.3f}] prof {r0['profiled_step_ms']:6.3f} "
                       f"syncs {r0['syncs_per_step']:.2f} (debug {r0['debug_syncs_per_step']:.2f}"
                       f"{', COUNTS DISAGREE' if r0['sync_count_mismatch'] else ''}) h2d {r0['h2d_pageable_per_step']:.1f}/{r0['h2d_pinned_per_step']:.1f} "
                       f"alloc {r0['allocs_per_step']:.1f} blocked {r0['host_blocked_ms']:.2f} "
                       f"idle-after-sync {r0['gpu_idle_after_sync_ms']:.2f} | {cmp['pct']:+.1f}% vs dd  site {r0['sync_site']}")
        for name, st in res["with_stack"].items():
            out.append(f"  with Python stacks: {name:14s} profiled {st['profiled_step_ms']:.3f} ms "
                       f"blocked {st['host_blocked_ms']:.2f} site {st['sync_site']}")
    return "\n".join(out)


STAGES = {"check": run_stage_check, "sweep": run_stage_sweep, "cuda_tests": run_stage_cuda_tests,
          "live": run_stage_live, "notebooks": run_stage_notebooks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stages", nargs="*", default=["check"], metavar="STAGE",
                    help=f"one or more of {', '.join(STAGES)} (default: check)")
    stages = ap.parse_args(argv).stages
    unknown = [s for s in stages if s not in STAGES]
    if unknown:  # checked here: argparse's choices would refuse the default list itself
        ap.error(f"unknown stage(s) {', '.join(unknown)}; stages: {', '.join(STAGES)}")
    t_start = time.time()
    pr = probe.run_probe()
    dump("fingerprint.json", {"fingerprint": probe.fingerprint(), "probe": pr})
    print(probe.describe(pr), flush=True)
    tail = []
    for stage in stages:
        t0 = time.time()
        try:
            tail.append(STAGES[stage]())
        except Exception as e:  # noqa: BLE001 - one failed stage must not lose the others' results
            tail.append(f"stage {stage} FAILED: {type(e).__name__}: {e}")
        tail[-1] += f"\n[{stage}: {time.time() - t0:.1f} s]"
        print(tail[-1], flush=True)
    print("\n==== summary\n" + "\n".join(tail))
    print(f"\ntotal {time.time() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
