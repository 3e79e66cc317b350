"""GPU stage: real expert parallelism on two H200s (device kind nvidia-h200-x2), results under $OUT.

  python -m studies.ep.real_ranks            # EP 2 on two GPUs, NCCL (< 5 min)
  python -m studies.ep.real_ranks --smoke    # the same stages on CPU with gloo ranks and tiny sizes

Stages (each timed, results in $OUT/ep_summary.json, run files in $OUT/runs/):
  equivalence  every dispatch mode vs the single-process reference on each rank's own batch
  real         EP 2, each dispatch mode x every strategy on all ranks, plus only rank 0
               device_direct and a 1 ms host delay on rank 0 (non_blocking and device_direct)
  predict      per dispatch: the uniform cases of the real EP-2 run -> the prediction of its
               mixed-strategy and host-delay cases (held out), and of EP 4 and 8 (ep_mode
               "predicted"); the one-process (predicate only) model kept for comparison
  live         live EP-2 updates through the worker group: the first and the following ones
Prints a short table last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from dspark_lab.parallel.workers import apply_nccl_safe_env  # noqa: E402

apply_nccl_safe_env()  # before torch or any rank process starts

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dspark_lab.results.record import store
from dspark_lab import strategies  # noqa: E402
from dspark_lab.config import LabConfig  # noqa: E402
from dspark_lab.measure.probe import fingerprint  # noqa: E402
from dspark_lab.parallel import checks
from dspark_lab.results.analyses import ep_predict as predict  # noqa: E402
from dspark_lab.model.dispatch import DISPATCH_MODES  # noqa: E402
from dspark_lab.parallel.measure import measure_single, only_rank0, uniform  # noqa: E402
from dspark_lab.parallel.run import EP_LIVE_STEPS, EP_LIVE_TRIALS, EP_LIVE_WARMUP, EPLive, run_ep, standard_cases
from dspark_lab.parallel.workers import WorkerGroup  # noqa: E402

OUT = Path(os.environ.get("OUT", "out/gpu"))
RANK0_DELAY_MS = 1.0
SHARE_THRESHOLD = 0.9  # "one rank's sync costs every rank" when >= 90% of the all-ranks penalty
PREDICTED_SIZES = (4, 8)
CALL_TIMEOUT_S = 100  # per request to the ranks: a hung collective ends the stage, not the machine's time


def median_case(rows, case, key="step_ms_max_rank", rank=0):
    v = [r[key] for r in rows if r["rank_case"] == case and r["rank"] == rank and r.get(key) is not None]
    return float(np.median(v)) if v else float("nan")


def predicted_records(res: dict, single_row: dict) -> list:
    """Per dispatch ({dispatch: PointResult} of the real runs), the EP 4 and 8 predictions from its
    uniform cases: RowRecords, each whole when made (ep_predict.predicted_rows), the settings of the
    one-process row `single_row`."""
    base = {k: single_row[k] for k in ("batch_size", "gamma", "model", "workload", "device", "query_token_num",
                                       "bucket_batch_size", "num_tokens", "target_verify_ms")}
    out = []
    for d, r in res.items():
        one_d = predict.one_rank_from_uniform(r.rows, r.samples)
        for n in PREDICTED_SIZES:
            pcases = [uniform(s, n) for s in strategies.BUILTIN] + [only_rank0("device_direct", "non_blocking", n)]
            out += predict.predicted_rows(one_d, pcases, dict(base, predicate=False, dispatch=d))
    return out


def write_predicted(runs: Path, fp: dict, cfg: LabConfig, records: list) -> Path:
    """The predicted records in a run file of their own under `runs`, one point per point id, each
    written as made."""
    with store.RunWriter.create(runs, fingerprint=fp, sweep={"base": cfg.to_dict(), "predicted_sizes": list(PREDICTED_SIZES),
                                                             "model": predict.MODEL},
                                ep_mode="predicted", run_kind="ep_predicted") as w:
        for pid in dict.fromkeys(r.point_id for r in records):
            w.write_point(pid, [r for r in records if r.point_id == pid])
    return w.path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="CPU, gloo ranks, tiny sizes")
    ap.add_argument("--world", type=int, default=2)
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    world = args.world
    if not args.smoke and (not cuda or torch.cuda.device_count() < world):
        print(f"needs {world} CUDA devices (found {torch.cuda.device_count() if cuda else 0}); use --smoke on CPU")
        return 2
    backend = "nccl" if cuda and torch.cuda.device_count() >= world else "gloo"
    if args.smoke:
        cfg = LabConfig(batch_size=2, gamma=2, model="tiny", workload="tiny", steps=3, trials=1, warmup=1)
        eq_model, profile_steps, live_updates = "tiny", 2, [dict(batch_size=2), dict(batch_size=4)]
    else:
        cfg = LabConfig(batch_size=8, gamma=4, model="small", workload="sglang_profile", steps=50, trials=5, warmup=5)
        eq_model, profile_steps = "small", 12
        live_updates = [dict(batch_size=8), dict(batch_size=16), dict(batch_size=4), dict(batch_size=8, gamma=2)]
    runs = OUT / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    fp = fingerprint()
    summary: dict = {"world_size": world, "backend": backend, "smoke": args.smoke, "stage_s": {}}
    t_all = time.perf_counter()

    # -- equivalence + real runs --------------------------------------------------------------
    t = time.perf_counter()
    group = WorkerGroup(world, backend, log_path=str(OUT / "ranks.log")).start()
    summary["group_start_s"] = time.perf_counter() - t
    summary["nccl_version"] = group.info[0].get("nccl_version")
    summary["errors"] = {}
    eq = []
    try:
        t = time.perf_counter()
        batches = [cfg.batch_size, max(1, cfg.batch_size - 3)] + [cfg.batch_size] * (world - 2)
        eq = group.call(checks.equivalence, batch_sizes=batches, model=eq_model, timeout_s=CALL_TIMEOUT_S)
        summary["equivalence"] = eq
    except Exception as e:  # noqa: BLE001 - recorded; the runs below still go on
        summary["errors"]["equivalence"] = f"{type(e).__name__}: {e}"
        print(f"[equivalence] failed: {summary['errors']['equivalence']}", flush=True)
    summary["stage_s"]["equivalence"] = time.perf_counter() - t

    t = time.perf_counter()
    cases = standard_cases(world, strategies.BUILTIN, rank0_only=("device_direct",),
                           rank0_delay_ms=RANK0_DELAY_MS, delay_strategies=("non_blocking", "device_direct"))
    res: dict = {}
    summary["real_runs"] = {}
    try:
        for d in DISPATCH_MODES:
            # One run file per dispatch mode; if a mode fails with CUDA graphs, it is retried eagerly once.
            for attempt_cfg in (cfg, cfg.with_(graph=False)) if cfg.graph and cuda else (cfg,):
                if not group.alive():
                    group.close()
                    group = WorkerGroup(world, backend, log_path=str(OUT / "ranks.log")).start()
                try:
                    out = run_ep(attempt_cfg, world, [d], cases, out=runs, group=group, profile_steps=profile_steps,
                                 fingerprint=fp, timeout_s=CALL_TIMEOUT_S)
                    res[d] = out[d]
                    summary["real_runs"][d] = str(out["path"])
                    print(f"[real] {d} (graph={attempt_cfg.graph}): {len(out[d].rows)} rows", flush=True)
                    break
                except Exception as e:  # noqa: BLE001
                    summary["errors"][f"real {d} graph={attempt_cfg.graph}"] = f"{type(e).__name__}: {e}"[:2000]
                    print(f"[real] {d} (graph={attempt_cfg.graph}) failed: {str(e)[:500]}", flush=True)
    finally:
        group.close()
    summary["stage_s"]["real"] = time.perf_counter() - t
    if not res:
        with open(OUT / "ep_summary.json", "w") as f:
            json.dump(summary, f, indent=1, default=str)
        print("no dispatch mode ran; see ep_summary.json and ranks.log")
        return 1
    modes = list(res)

    # -- prediction: one process at EP `world` (predicate only) ------------------------------
    t = time.perf_counter()
    single = measure_single(cfg.with_(ep_size=world), "allreduce", strategies.BUILTIN, profile_steps=profile_steps)
    with store.RunWriter.create(runs, fingerprint=fp, sweep={"base": cfg.to_dict(), "world_size": 1},
                                world_size=1, ep_mode="predicate_only", run_kind="ep_one_gpu") as w:
        w.write_point(single.info["point_id"], single.rows, single.timelines)
    # The one-process model (no collective, graph mode): kept for comparison, it misses the dispatch's cost.
    one = predict.one_rank_from(single.rows, single.samples)
    summary["prediction_vs_real_one_process"] = {d: predict.validate(one, res[d].rows) for d in modes}
    # The model: per-strategy inputs from the uniform cases of the same dispatch's EP run, validated on
    # the cases it did not use (mixed strategies, host delays).
    summary["prediction_model"] = predict.MODEL
    validation = {d: predict.validate_held_out(res[d].rows, res[d].samples) for d in modes}
    summary["prediction_vs_real"] = validation
    pred_rows = predicted_records(res, single.rows[0])
    write_predicted(runs, fp, cfg, pred_rows)
    summary["predicted"] = [{k: r.columns[k] for k in ("dispatch", "world_size", "rank_case", "step_ms")} for r in pred_rows]
    summary["stage_s"]["predict"] = time.perf_counter() - t

    # -- live updates through the worker group -----------------------------------------------
    t = time.perf_counter()
    live = EPLive(backend)
    live_cfg = cfg.with_(ep_size=world, steps=EP_LIVE_STEPS, warmup=EP_LIVE_WARMUP, trials=EP_LIVE_TRIALS)
    if args.smoke:
        live_cfg = live_cfg.with_(steps=2, warmup=0, trials=1)
    updates = []
    try:
        for u in live_updates:
            t0 = time.perf_counter()
            live.measure(live_cfg.with_(**u), strategies.BUILTIN, profile_steps=2 if args.smoke else 4)
            updates.append({"setting": u, "s": time.perf_counter() - t0})
    except Exception as e:  # noqa: BLE001 - the table still prints what was measured
        summary["live_error"] = f"{type(e).__name__}: {e}"
        print(f"[live] failed: {summary['live_error']}", flush=True)
    finally:
        live.close()
    summary["live_updates"] = updates
    summary["stage_s"]["live"] = time.perf_counter() - t
    summary["total_s"] = time.perf_counter() - t_all

    # -- the table ---------------------------------------------------------------------------
    table = []
    nb, dd = "non_blocking", "device_direct"
    for d in modes:
        rows = res[d].rows
        both_nb = median_case(rows, f"{nb},{nb}" if world == 2 else ",".join([nb] * world))
        both_dd = median_case(rows, ",".join([dd] * world))
        only0 = median_case(rows, ",".join([dd] + [nb] * (world - 1)))
        share = (only0 - both_nb) / (both_dd - both_nb) if both_dd > both_nb else float("nan")
        delay = {s: median_case(rows, ",".join([s] * world) + f" delay={RANK0_DELAY_MS:g}," + ",".join(["0"] * (world - 1)))
                 - median_case(rows, ",".join([s] * world)) for s in (nb, dd)}
        delayed_dd = ",".join([dd] * world) + f" delay={RANK0_DELAY_MS:g}," + ",".join(["0"] * (world - 1))
        moved = median_case(rows, delayed_dd, key="blocked_from_others_ms", rank=1)
        moved_coll = median_case(rows, delayed_dd, key="collective_from_others_ms", rank=1)
        syncs = median_case(rows, ",".join([nb] * world), key="syncs_per_step")
        coll = median_case(rows, ",".join([nb] * world), key="gpu_collective_ms")
        # Held-out cases only (the uniform ones are the model's inputs); "no delay" = the mixed-strategy cases.
        errs = [abs(v["error_pct"]) for v in validation[d]] or [float("nan")]
        uniform_errs = [abs(v["error_pct"]) for v in validation[d] if "delay" not in v["case"]] or [float("nan")]
        flat_errs = [abs(v["error_no_noise_pct"]) for v in validation[d]] or [float("nan")]
        table.append(dict(dispatch=d, both_nb=both_nb, both_dd=both_dd, only_rank0_dd=only0, share=share,
                          one_rank_costs_all=bool(share >= SHARE_THRESHOLD), delay_nb=delay[nb], delay_dd=delay[dd],
                          rank1_blocked_from_rank0=moved, rank1_collective_from_rank0=moved_coll, syncs_nb=syncs, collective_ms_nb=coll,
                          pred_err_max_pct=max(errs), pred_err_max_no_delay_pct=max(uniform_errs), pred_err_max_no_noise_pct=max(flat_errs),
                          pred_within_10pct=bool(max(errs) <= 10.0),
                          graph=bool(all(r["graph"] for r in rows))))
    summary["table"] = table
    with open(OUT / "ep_summary.json", "w") as f:
        json.dump(summary, f, indent=1, default=str)

    print(f"\nEP {world} real ({backend}, NCCL {summary['nccl_version']}), {cfg.workload}, batch {cfg.batch_size}, "
          f"gamma {cfg.gamma}; step = median trial of the max over ranks (ms); run files in {runs}")
    if eq:
        eq_ok = all(e[m]["tokens_equal"] and e[m]["padded_pairs_sent"] == 0 for e in eq for m in DISPATCH_MODES)
        print(f"equivalence (tokens equal, no padded pair sent, every rank, every mode): {eq_ok}; "
              f"max |moe diff| {max(e[m]['moe_max_abs_diff'] for e in eq for m in DISPATCH_MODES):.3g}")
    for k, v in summary["errors"].items():
        print(f"ERROR {k}: {v[:300]}")
    hdr = (f"{'dispatch':12s} {'graph':>5s} {'both nb':>8s} {'both dd':>8s} {'r0 dd':>8s} {'share':>6s} {'>=90%':>5s} "
           f"{'+1ms nb':>8s} {'+1ms dd':>8s} {'r1<-r0':>7s} {'coll<-':>7s} {'sync/st':>7s} {'coll ms':>7s} {'pred err':>8s}")
    print(hdr)
    print("  share: (r0 dd - both nb) / (both dd - both nb); +1ms: step rise with 1 ms host delay on rank 0; r1<-r0 / "
          "coll<-: rank 1's host wait / collective time moved onto it by rank 0's delay (device_direct)")
    for r in table:
        print(f"{r['dispatch']:12s} {str(r['graph']):>5s} {r['both_nb']:8.3f} {r['both_dd']:8.3f} {r['only_rank0_dd']:8.3f} "
              f"{r['share']:6.0%} {str(r['one_rank_costs_all']):>5s} {r['delay_nb']:8.3f} {r['delay_dd']:8.3f} "
              f"{r['rank1_blocked_from_rank0']:7.3f} {r['rank1_collective_from_rank0']:7.3f} {r['syncs_nb']:7.2f} {r['collective_ms_nb']:7.3f} "
              f"{r['pred_err_max_no_delay_pct']:7.1f}%")
    print(f"model: {predict.MODEL}")
    print("pred err: largest |predicted/measured - 1| over the mixed-strategy cases, inputs = the uniform cases of the "
          "same run (all held-out cases incl. delays within 10%: "
          + ", ".join(f"{r['dispatch']} {r['pred_within_10pct']}" for r in table) + "); all held-out cases: "
          + ", ".join(f"{r['dispatch']} {r['pred_err_max_pct']:.1f}%" for r in table) + "; without per-step noise: "
          + ", ".join(f"{r['dispatch']} {r['pred_err_max_no_noise_pct']:.1f}%" for r in table))
    for d in modes:
        for n in PREDICTED_SIZES:
            got = {p["rank_case"]: p["step_ms"] for p in summary["predicted"] if p["world_size"] == n and p["dispatch"] == d}
            print(f"predicted EP {n} {d} (ep_mode predicted): all non_blocking {got[','.join([nb] * n)]:.3f}, all device_direct "
                  f"{got[','.join([dd] * n)]:.3f}, only rank 0 device_direct {got[','.join([dd] + [nb] * (n - 1))]:.3f}")
    print("live EP-%d updates (s): " % world + ", ".join(f"{u['s']:.2f}" for u in updates)
          + f"  (first includes starting the ranks); stages (s): "
          + ", ".join(f"{k} {v:.0f}" for k, v in summary["stage_s"].items()) + f"; total {summary['total_s']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
