"""The EP-2 prediction against recorded real runs, on CPU (no GPU, no torch): prints a table.

  python -m studies.ep.validate_recorded [RUNS_DIR]   # default data/runs, files h200x2-ep2-*.jsonl

Two models, both with inputs that exclude the case they predict:
  held-out      results.analyses.ep_predict.validate_held_out: inputs = the uniform cases of the same dispatch's run,
                predicted = its mixed-strategy and host-delay cases.
  one process   results.analyses.ep_predict.validate on the one-process (predicate only) run, plus the dispatch's
                per-step cost measured once (all non_blocking EP run minus one-process non_blocking);
                predicted = every other case (the non_blocking uniform case is its input).
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from dspark_lab.results.analyses import ep_predict as predict  # noqa: E402


def load(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("kind") == "row"]


def one_process(rows):
    """strategy -> OneRank (level = median trial) from a predicate-only run's rows."""
    out = {}
    for case in {r["rank_case"] for r in rows}:
        rs = [r for r in rows if r["rank_case"] == case]
        level = float(np.median([r["step_ms"] for r in rs]))
        slack = float(np.median([r["host_readback_ms"] for r in rs]))
        out[case.split(" ")[0]] = predict.OneRank((level,), slack, level)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_dir", nargs="?", type=Path, default=Path("data/runs"),
                    help="folder of the EP-2 run files, *-ep2-<dispatch>-*.jsonl (default: %(default)s)")
    folder = ap.parse_args(argv).runs_dir
    single = sorted(glob.glob(str(folder / "*-ep2-predicate-only-*.jsonl")))
    one = one_process(load(single[-1])) if single else None
    print(f"model: {predict.MODEL}")
    print(f"{'dispatch':12s} {'case':40s} {'measured':>8s} {'held-out':>8s} {'err':>7s} {'1-proc+c':>8s} {'err':>7s}")
    for mode in ("allreduce", "a2a_fixed", "a2a_dynamic"):
        files = sorted(glob.glob(str(folder / f"*-ep2-{mode}-*.jsonl")))
        if not files:
            continue
        rows = load(files[-1])
        held = {v["case"]: v for v in predict.validate_held_out(rows)}
        base = {}
        if one is not None:
            nb = "non_blocking,non_blocking"
            cost = float(np.median([r["step_ms_max_rank"] for r in rows if r["rank_case"] == nb and r["rank"] == 0])) \
                - one["non_blocking"].mean_ms
            base = {v["case"]: v for v in predict.validate(one, [r for r in rows if r["rank_case"] != nb], cost)}
        for case in dict.fromkeys(r["rank_case"] for r in rows):
            h, b = held.get(case), base.get(case)
            measured = float(np.median([r["step_ms_max_rank"] for r in rows if r["rank_case"] == case and r["rank"] == 0]))
            cell = lambda v: (f"{v['predicted_no_noise_ms']:8.3f} {v['error_no_noise_pct']:6.1f}%" if v
                              else f"{'input':>8s} {'':>7s}")
            print(f"{mode:12s} {case:40s} {measured:8.3f} {cell(h)} {cell(b)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
