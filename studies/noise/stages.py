"""Noise stages for the device machine; each also runs on CPU with --smoke.

  python -m studies.noise.stages [--smoke] reference   the reference point (EP 8, batch 8, gamma 4,
        sglang_profile) in THREE separate runs (one process and one run file each, under
        $OUT/reference/), each adaptive to a headline CI half-width <= 3% or a time cap; prints per
        run the device_direct / non_blocking ratio with its CI, the disturbed trials, the stop
        reason, and whether the three ratios are within ±5% of their mean
  python -m studies.noise.stages [--smoke] live        live updates through LiveBackend.get (no plotly,
        no ipywidgets): a fresh process with an empty calibration cache, then one with the cache
        warm (first update asked at once; then the default setting again and four others), then
        one asking its first update only after the background warm-up has finished
  python -m studies.noise.stages [--smoke] overhead    the per-trial diagnostics' cost: the same trials
        with and without them, interleaved

Results go under $OUT (default out/gpu) as JSON; a short table is printed last.
Expected on an H200: reference ~2.5 min (3 x (<=40 s of trials + start-up)), live ~1.5 min, overhead ~20 s.
"""
from __future__ import annotations

import time

T_PROCESS = time.perf_counter()  # before the heavy imports: a fresh process's first update counts them

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ.get("OUT", "out/gpu"))
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TARGET_CI_PCT = 3.0
AGREE_PCT = 5.0  # the three runs' ratios must lie within ±5% of their mean
REFERENCE = dict(ep_size=8, batch_size=8, gamma=4, workload="sglang_profile")


def sizes(smoke: bool) -> dict:
    """Run sizes: the H200 ones, or tiny CPU ones for --smoke."""
    if smoke:
        return dict(model="tiny", workload="tiny", steps=6, warmup=2, trials=3, cap_s=6.0, device="cpu")
    return dict(model="small", workload="sglang_profile", steps=20, warmup=4, trials=4, cap_s=40.0, device="auto")


def child(args: list[str], env: dict | None = None) -> dict:
    """Run this script's sub-stage in a fresh process; it prints one JSON line last."""
    e = {**os.environ, **SAFE_ENV, **(env or {})}
    p = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=e, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed (rc {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- reference -----------------------------------------------------------------------------------

def reference_one(smoke: bool, index: int) -> dict:
    from dspark_lab.results.record import store
    from dspark_lab.config import LabConfig
    from dspark_lab.measure import probe
    from dspark_lab.results.rules import noise
    from dspark_lab.run.point import measure_point, point_id
    from dspark_lab.run.sweep import SweepSpec

    import pandas as pd

    z = sizes(smoke)
    ref = dict(REFERENCE, workload=z["workload"])
    cfg = LabConfig(**ref, model=z["model"], steps=z["steps"], warmup=z["warmup"], trials=z["trials"], device=z["device"])
    spec = SweepSpec(ep_sizes=(cfg.ep_size,), batch_sizes=(cfg.batch_size,), gammas=(cfg.gamma,), base=cfg)
    folder = OUT / "reference"
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with store.RunWriter.create(folder, fingerprint=probe.fingerprint(), sweep=spec.to_dict(), run_kind="reference",
                                adaptive={"target_ci_pct": TARGET_CI_PCT, "time_cap_s": z["cap_s"]},
                                stage=f"reference run {index + 1} of 3") as w:
        r = measure_point(cfg, target_ci_pct=TARGET_CI_PCT, time_cap_s=z["cap_s"], keep_traces=False)
        w.write_point(point_id(cfg), r.rows, r.timelines)
        path = str(w.path)
    wall = time.perf_counter() - t0
    rows = pd.DataFrame(r.rows)
    h = noise.headline(rows)
    infl = noise.profiler_inflation(rows)
    return {"run": index + 1, "path": path, "wall_s": wall, "stop_reason": rows["stop_reason"].iloc[0],
            "recorded_half_width_pct": rows["ci_half_width_pct"].iloc[0],
            "trials_per_strategy": int(rows.groupby("strategy").size().max()),
            "headline": {k: v for k, v in h.items()},
            "disturbed_per_strategy": h["disturbed"],
            "reasons": sorted({x for x in rows["disturbed_reason"] if x})[:10],
            "profiler_inflation_pct": dict(zip(infl["strategy"], infl["inflation_pct"].round(1))),
            "diag_medians": rows.groupby("strategy")[["step_ms", "host_work_ms", "host_wait_ms", "gpu_ms", "offcpu_ms",
                                                      "sm_clock_mhz"]].median().round(3).to_dict(orient="index")}


def stage_reference(smoke: bool) -> str:
    runs = [child(["--smoke"] * smoke + ["reference-one", str(i)]) for i in range(3)]
    ratios = [r["headline"]["ratio"] for r in runs if r["headline"]["ratio"] is not None]
    mean = sum(ratios) / len(ratios) if ratios else float("nan")
    within = len(ratios) == len(runs) and all(abs(x / mean - 1) * 100 <= AGREE_PCT for x in ratios)
    (OUT / "reference.json").write_text(json.dumps({"runs": runs, "mean_ratio": mean, "within_pct": AGREE_PCT,
                                                    "all_within": within}, indent=1, default=str))
    lines = ["run  ratio dd/nb   95% CI            ±%    quiet rounds  disturbed (dd/nb/all)  stop        wall s"]
    for r in runs:
        h = r["headline"]
        d = r["disturbed_per_strategy"]
        if h["ratio"] is None:
            lines.append(f"{r['run']:>3}  no quiet round: {h['text']}")
            continue
        lines.append(f"{r['run']:>3}  {h['ratio']:.3f}        {h['ci_low']:.3f}–{h['ci_high']:.3f}     "
                     f"{h['half_width_pct'] or float('nan'):4.1f}  {h['quiet_rounds']:>3}/{h['rounds']:<3}       "
                     f"{d.get('device_direct', 0)}/{d.get('non_blocking', 0)}/{h['disturbed_total']} of {h['trials_total']:<4}"
                     f"        {r['stop_reason']:<10}  {r['wall_s']:.1f}")
    lines.append(f"mean ratio {mean:.3f}; each within ±{AGREE_PCT:g}% of it: {'YES' if within else 'NO'} "
                 f"({', '.join(f'{(x / mean - 1) * 100:+.1f}%' for x in ratios)})")
    lines.append("profiler inflation % (run 1): " + json.dumps(runs[0]["profiler_inflation_pct"]))
    return "\n".join(lines)


# -- live ------------------------------------------------------------------------------------------

def live_one(smoke: bool, after_warm: bool = False) -> dict:
    """In a fresh process: backend created, first update asked at once (as a panel shown with its
    backend does: the default setting), or — `after_warm` — once the warm-up is done, at another
    setting (as when the user moves a slider after the notebook has opened)."""
    t_import = time.perf_counter()
    from dspark_lab.config import LabConfig
    from dspark_lab.run.live import LiveBackend

    z = sizes(smoke)
    base = (LabConfig(model=z["model"], workload=z["workload"], steps=4, warmup=1, trials=2, device="cpu")
            if smoke else None)
    t_create = time.perf_counter()
    b = LiveBackend(base)
    d = b.defaults()
    if after_warm:
        b.wait_warm()
    t_ask = time.perf_counter()
    b.get({**d, "gamma": 2} if after_warm else d)
    first = time.perf_counter() - t_ask
    out = {"first_update_s": first, "first_update_from_process_start_s": time.perf_counter() - T_PROCESS,
           "imports_s": t_create - t_import, "warm_up_s": b.warm_s, "warm_parts": b.warm_parts,
           "warm_error": repr(b.warm_error) if b.warm_error else None, "updates": []}
    if after_warm:
        out["plotly_imported"] = "plotly" in sys.modules
        out["ipywidgets_imported"] = "ipywidgets" in sys.modules
        return out
    settings = [d, {**d, "batch_size": 32}, {**d, "gamma": 8}, {**d, "ep_size": 1}, {**d, "batch_size": 1}]
    for s in settings:
        t0 = time.perf_counter()
        p = b.get(s)
        dt = time.perf_counter() - t0
        r = p.rows
        out["updates"].append({"settings": s, "seconds": dt,
                               "device_direct_ms": float(r[r.strategy == "device_direct"].step_ms.median()),
                               "disturbed": int(r["disturbed"].sum())})
    out["plotly_imported"] = "plotly" in sys.modules
    out["ipywidgets_imported"] = "ipywidgets" in sys.modules
    return out


def stage_live(smoke: bool) -> str:
    cache = OUT / "live-cache"
    if cache.exists():
        for f in cache.iterdir():
            f.unlink()
    env = {"DSPARK_CACHE": str(cache)}
    res = {"cold": child(["--smoke"] * smoke + ["live-one"], env),
           "cache_warm": child(["--smoke"] * smoke + ["live-one"], env),
           "after_warm_up": child(["--smoke"] * smoke + ["live-one", "after-warm"], env)}
    (OUT / "live.json").write_text(json.dumps(res, indent=1, default=str))
    lines = ["process        first update (asked / from process start)   warm-up (parts)                            plotly/ipywidgets",
             "  cold, cache_warm: asked at backend creation (default setting); after_warm_up: asked after the warm-up (gamma 2)"]
    for k, r in res.items():
        parts = ", ".join(f"{p.replace('_s', '')} {v:.2f}" for p, v in r["warm_parts"].items())
        lines.append(f"{k:<13}  {r['first_update_s']:5.2f} s / {r['first_update_from_process_start_s']:5.2f} s"
                     f"{'':<22}{r['warm_up_s'] or float('nan'):5.2f} s ({parts})   {r['plotly_imported']}/{r['ipywidgets_imported']}")
    lines.append("following updates (cache_warm process): " + "; ".join(
        f"{u['settings'].get('ep_size')}/{u['settings'].get('batch_size')}/{u['settings'].get('gamma')}: {u['seconds']:.2f} s"
        for u in res["cache_warm"]["updates"]) + "   (EP/batch/gamma; the first is the default setting again)")
    return "\n".join(lines)


# -- overhead --------------------------------------------------------------------------------------

def stage_overhead(smoke: bool) -> str:
    """Step time with and without diagnostics, interleaved trials of the same LabStep."""
    import numpy as np

    from dspark_lab.config import LabConfig
    from dspark_lab.measure import diagnostics, timing
    from dspark_lab.results.rules import stats
    from dspark_lab.model.workload import LabStep

    z = sizes(smoke)
    cfg = LabConfig(**dict(REFERENCE, workload=z["workload"]), model=z["model"], device=z["device"])
    s = LabStep(cfg, "non_blocking")
    diag = diagnostics.TrialDiagnostics(s)
    n_trials, steps = (6, 10) if smoke else (30, 20)
    on, off = [], []
    for i in range(n_trials):
        for with_diag in ((True, False) if i % 2 else (False, True)):
            t = timing.time_trial(s.step, steps, 2, s.drain, diag=diag if with_diag else None)
            (on if with_diag else off).append(t.step_ms)
    s.drain()
    on_ms, off_ms = float(np.median(on)), float(np.median(off))
    c = stats.compare(on, off, "with diagnostics", "without")
    res = {"with_ms": on_ms, "without_ms": off_ms, "compare": c, "trials": n_trials, "steps": steps,
           "nvml": diag.nvml.available if diag.nvml is not None else False}
    (OUT / "overhead.json").write_text(json.dumps(res, indent=1))
    return (f"diagnostics overhead: step {on_ms:.3f} ms with vs {off_ms:.3f} ms without ({c['verdict']}); "
            f"NVML {'on' if res['nvml'] else 'absent'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU sizes (proves the stages run)")
    ap.add_argument("stages", nargs="+", choices=["reference", "live", "overhead", "reference-one", "live-one", "after-warm", "0", "1", "2"])
    a = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if a.stages[0] == "reference-one":
        print(json.dumps(reference_one(a.smoke, int(a.stages[1])), default=str))
        return 0
    if a.stages[0] == "live-one":
        print(json.dumps(live_one(a.smoke, after_warm=a.stages[1:] == ["after-warm"]), default=str))
        return 0
    tables = []
    for st in a.stages:
        t0 = time.perf_counter()
        table = {"reference": stage_reference, "live": stage_live, "overhead": stage_overhead}[st](a.smoke)
        tables.append(f"== {st} ({time.perf_counter() - t0:.0f} s)\n{table}")
    print("\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
