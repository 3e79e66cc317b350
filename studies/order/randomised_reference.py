"""Three reference runs with the trials in a seeded random order (measure.loop.round_orders), and
whether strategies that do the same work come out within their CIs of each other, and whether the
advice's choice is stable across the runs.

    python -m studies.order.randomised_reference [--runs 3] [--time-cap 15] [--target-ci 3]
    python -m studies.order.randomised_reference --analyse data/order/<run>.jsonl.gz ...   # no GPU needed

Each run is `dspark-lab sweep` at the reference point (batch 8, gamma 4, sglang_profile) at EP 8 and
EP 1, adaptive (--target-ci, --time-cap), with its own --seed (1, 2, 3: the seed of the trial order,
recorded per row as order_seed with each trial's trial_position). Writes
<root>/data/order/<gpu>-reference-randomised-run<k>-<time>.jsonl.gz (root: $OUT when set, else the
repository; gzipped, since the lab loads every .jsonl under data/ as its own runs, and these
two-point study runs must not become its headline or its picks) and prints, per run, the
equal-work differences with their 95% CIs (equal work as results.analyses.tie_margin reads it from the
strategy table), the advice's tie margin set from them (tie_margin.MARGIN_RULE: the advice reads the
same margin from data/order/) and the advice's choice under it (gated by this machine's recorded card
and hazards under data/machines/). About 25 s per run
on an H200 (the recorded runs: 25-27 s from header to last point, each point 12-15 s with its interleaved
rounds, graph capture and profiled pass).
"""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _root() -> Path:
    return Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT


def record_runs(n: int, time_cap: float, target_ci: float) -> list[Path]:
    """n reference runs through the sweep command, seeds 1..n; the run files written."""
    from dspark_lab.cli.main import main as cli_main
    from dspark_lab.measure import probe

    gpu = str(probe.fingerprint().get("gpu", "gpu")).lower().replace("nvidia", "").strip().replace(" ", "-") or "gpu"
    runs = _root() / "data" / "order"
    runs.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(1, n + 1):
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        out = runs / f"{gpu}-reference-randomised-run{k}-{stamp}.jsonl"
        rc = cli_main(["sweep", "--ep", "8,1", "--batch", "8", "--gamma", "4", "--target-ci", str(target_ci),
                       "--time-cap", str(time_cap), "--seed", str(k), "--out", str(out),
                       "--name", f"reference, randomised order, run {k} of {n}", "--no-progress"])
        print(f"run {k}: exit {rc}, {out}")
        if out.exists():
            paths.append(packed(out))
    return paths


def packed(path: Path) -> Path:
    """`path` gzipped beside itself (the .jsonl removed): out of the lab's run library."""
    gz = path.with_name(path.name + ".gz")
    with open(path, "rb") as src, gzip.GzipFile(gz, "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    return gz


def choices(rows, cards, hazards, margin=None, headers=()) -> list[dict]:
    """The advice's choice per run (each run judged alone), under `margin` (a tie_margin.TieMargin; None:
    the one recorded under the data folder); `headers` name the runs."""
    from dspark_lab.results.analyses import advice
    from dspark_lab.results.query.data import RunData

    data = RunData(rows, headers=headers)
    out = []
    for rid in data.run_ids():
        rec = advice.recommend(data.rows[data.rows["run_id"].astype(str) == str(rid)], cards=cards, hazards=hazards,
                               margin_pct=margin)
        tie = next((e for e in rec.evidence if e.startswith("a tie at")), "")
        out.append({"run": data.labels().get(rid, rid), "choice": rec.strategy, "tie": tie[:200]})
    return out


def report(paths: list[Path]) -> int:
    import pandas as pd

    from dspark_lab.results.analyses import card, hazards, tie_margin
    from dspark_lab.results.loading.packed import load_packed

    runs = load_packed(paths)
    found = tie_margin.differences(runs.rows, runs.headers)
    margin = tie_margin.margin_of(found, paths)
    diff = pd.DataFrame(found).drop(columns=["gpu", "randomised"], errors="ignore")
    picks = pd.DataFrame(choices(runs.rows, card.recorded(), hazards.recorded(), margin, runs.headers))
    stable = picks["choice"].nunique() == 1 if len(picks) else False
    with pd.option_context("display.width", 250, "display.max_columns", 20, "display.precision", 2,
                           "display.max_colwidth", 90):
        print(picks.to_string(index=False))
        print(f"advice stable across the runs: {stable}")
        print(diff.to_string(index=False) if len(diff) else "no equal-work pair in these runs")
    print(margin.text() if margin else "no randomised-order run with an equal-work pair here: no tie margin from "
          "these runs (the advice's choices above use the one recorded under the data folder)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--time-cap", type=float, default=15.0)
    ap.add_argument("--target-ci", type=float, default=3.0)
    ap.add_argument("--analyse", nargs="+", metavar="RUN", help="only analyse these recorded run files (no GPU)")
    a = ap.parse_args(argv)
    if a.analyse:
        return report([Path(p) for p in a.analyse])
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: the reference runs need one (use --analyse RUN... on recorded runs)")
        return 2
    paths = record_runs(a.runs, a.time_cap, a.target_ci)
    return report(paths) if paths else 1


if __name__ == "__main__":
    sys.exit(main())
