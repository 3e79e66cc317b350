"""How loading, the report and the recorded panel scale with the number of recorded runs.

    python scripts/bench_scale.py                    # 5, 20, 100 and 500 runs
    python scripts/bench_scale.py --counts 5,20 --machines 1

Makes N run files in a temporary folder from the recorded ones (data/runs/*.jsonl, taken in turn),
each with its own run id and start time (copies of real measurements, not new ones), spread over
--machines machine fingerprints (the driver gets a "-benchK" suffix for K > 0, so the views have
several machines to choose from). File times are set an hour back, as for runs recorded earlier.
Per N, with a fresh cache folder: the load with an empty cache (parse, judge + write the cache), the
load with a warm cache, Runs.headline() and Runs.table() (each on a freshly loaded Runs, so neither
profits from the other's work), the report (build + write) and its size, and the recorded panel's
backend (made and one point drawn, no widgets); --no-views leaves the last two out. Prints a table
last, and each target met or missed; a benchmark, not a test.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The targets: at 500 runs on 2 cores, the warm load, the report and the cold load; the headline and
# the table at 100 and 500 runs.
TARGETS = {"warm_load_s": 3.0, "cold_load_s": 60.0, "report_s": 15.0, "report_mb": 15.0}
VIEW_TARGETS_S = {100: 1.0, 500: 5.0}  # Runs.headline() and Runs.table(), each


def make_runs(src: list[Path], n: int, folder: Path, machines: int) -> int:
    """n run files in `folder`, copies of `src` in turn with distinct run ids and start times."""
    folder.mkdir(parents=True)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    past = time.time() - 3600
    size = 0
    for i, f in zip(range(n), itertools.cycle(src)):
        data = f.read_bytes()
        head, _, rest = data.partition(b"\n")
        h = json.loads(head)
        h["run_id"] = f"bench{i:04d}-{h['run_id']}"
        h["created_at"] = (start + timedelta(hours=7 * i)).isoformat(timespec="seconds")
        k = i % machines
        if k:
            h["fingerprint"] = {**h.get("fingerprint", {}), "driver": f"{h['fingerprint'].get('driver')}-bench{k}"}
        out = folder / f"bench{i:04d}-{f.name}"
        out.write_bytes(json.dumps(h).encode() + b"\n" + rest)
        os.utime(out, (past, past))
        size += out.stat().st_size
    return size


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def bench(n: int, src: list[Path], work: Path, machines: int, views: bool = True) -> dict:
    from dspark_lab.results import Runs

    folder, cache = work / f"runs-{n}", work / f"cache-{n}"
    size = make_runs(src, n, folder, machines)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, t_cold = timed(lambda: Runs.load(folder, cache=cache))
        runs, t_warm = timed(lambda: Runs.load(folder, cache=cache))
        _, t_headline = timed(runs.headline)
        _, t_table = timed(Runs.load(folder, cache=cache).table)
    assert len(runs.run_ids()) == n, f"loaded {len(runs.run_ids())} runs of {n}"
    row = {"runs": n, "run files MB": size / 1e6, "cache MB": sum(p.stat().st_size for p in cache.glob("*.parquet")) / 1e6,
           "load cold s": t_cold, "load warm s": t_warm, "headline s": t_headline, "table s": t_table}
    if views:
        row.update(bench_views(runs, work / f"report-{n}.html"))
    shutil.rmtree(folder)
    shutil.rmtree(cache)
    return row


def bench_views(runs, out: Path) -> dict:
    """The report (build + write) and the recorded panel's backend (made, one point drawn)."""
    from dspark_lab.results.viewmodels.backend import RecordedBackend
    from dspark_lab.views import report

    _, t_report = timed(lambda: report.write_html(out, runs))
    backend, t_panel = timed(lambda: RecordedBackend(runs))
    _, t_get = timed(lambda: backend.get(backend.defaults()))
    return {"report s": t_report, "report MB": out.stat().st_size / 1e6, "runs drawn": len(report.chosen_runs(runs)),
            "panel s": t_panel + t_get, "dropdown options": len(backend.options()["run"])}


def verdicts(results: list) -> list[str]:
    """Each target of a measured count, met or missed."""
    out = []
    for r in results:
        for col in ("headline s", "table s"):
            if r["runs"] in VIEW_TARGETS_S:
                want = VIEW_TARGETS_S[r["runs"]]
                out.append(f"{col[:-2]} at {r['runs']} runs: {r[col]:.2f} s (<= {want}) "
                           f"{'met' if r[col] <= want else 'MISSED'}")
    big = results[-1]
    checks = [("cold load", "load cold s", TARGETS["cold_load_s"]), ("warm load", "load warm s", TARGETS["warm_load_s"]),
              ("report", "report s", TARGETS["report_s"]), ("report size", "report MB", TARGETS["report_mb"])]
    for name, col, want in checks:
        if col in big:
            unit = "MB" if col.endswith("MB") else "s"
            out.append(f"{name} at {big['runs']} runs: {big[col]:.2f} {unit} (<= {want}) "
                       f"{'met' if big[col] <= want else 'MISSED'}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="5,20,100,500", help="numbers of runs, comma-separated")
    ap.add_argument("--machines", type=int, default=4, help="machine fingerprints the copies are spread over")
    ap.add_argument("--src", type=Path, default=ROOT / "data" / "runs", help="folder of recorded run files")
    ap.add_argument("--no-views", action="store_true", help="leave out the report and the recorded panel")
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    if not counts or min(counts) < 1 or args.machines < 1:
        ap.error("--counts must be positive integers and --machines at least 1")
    src = sorted(args.src.glob("*.jsonl"))
    if not src:
        ap.error(f"no run files in {args.src}")
    from dspark_lab.results.loading import cache

    if not cache.available():
        print("pyarrow is not installed: no cache, every load parses every file", file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory(prefix="dspark-bench-") as tmp:
        for n in counts:
            results.append(bench(n, src, Path(tmp), args.machines, views=not args.no_views))
            print(f"{n} runs done", file=sys.stderr)
    cols = list(results[0])
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    print(f"\n{os.cpu_count()} CPU(s); copies of {len(src)} recorded runs over {args.machines} machine(s)\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in results:
        print("| " + " | ".join(fmt(r[c]) for c in cols) + " |")
    print()
    for line in verdicts(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
