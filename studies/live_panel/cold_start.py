"""Notebook 01's cold start, timed as a user meets it in a fresh kernel: the notebook's first code
cell, read from notebooks/01_onboarding.ipynb and run as it is in a fresh Python process (display()
stubbed: there is no frontend, so "drawn" means the panel's figures hold their data), then until
the live panel has replaced the recorded one. Per process (seconds):

  first figure     cell start -> the first figures shown (targets: <= 1.5 s on an H200): the stored
                   first view (views/first_view.py) where there is one, else the recorded panel drawn;
                   its parts: imports (the cell's), panel imports (pandas, plotly), runs loaded, panel drawn
  first view       cell start -> the stored first view shown (none in the cold process)
  recorded drawn   cell start -> the recorded panel drawn (in the first view's place, if shown)
  cell             cell start -> the cell returned (torch and the live backend imported meanwhile)
  warm-up end      cell start -> the live backend's warm-up ended
  first live       warm-up end -> the first live figure drawn in the recorded one's place (<= 1 s)
  live complete    warm-up end -> the first complete live update drawn

One primer process first (OS and driver caches as after any earlier torch process); then one
process with empty caches (calibration and the recorded runs' Parquet cache: a fresh clone) and
three with the caches it left (a later start: the first view it stored is what they show first).
The targets are judged on each process.

  python -m studies.live_panel.cold_start                 # CUDA machine with ipywidgets, plotly, anywidget: ~60 s
  python -m studies.live_panel.cold_start --cpu-dry-run   # the code path on CPU (no live figure there)
Writes $OUT/live-cold-start/data/machines/<gpu>-live-cold-start-<date>.json (OUT defaults to out/;
commit it under data/machines/) with the fingerprint, and prints a table last.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "01_onboarding.ipynb"
CASE_TIMEOUT_S = 120
LIVE_TIMEOUT_S = 60
TARGETS_S = {"first_figure_s": 1.5, "first_live_after_warm_s": 1.0}
WARM_PROCESSES = 3
PRIMER = """
import torch
x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
(x @ x).float().sum().item()
"""


def first_code_cell(path: Path = NOTEBOOK) -> str:
    """The source of the notebook's first code cell, as the kernel receives it."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return next("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def since(marks: dict, key: str, origin) -> float | None:
    return None if origin is None or marks.get(key) is None else marks[key] - origin


def timings(t_cell: float, t_returned: float, marks: dict, warm_end) -> dict:
    """One process's timings (seconds) from the cold start's marks (time.perf_counter() values)."""
    first = min(marks[k] for k in ("first_view_shown", "recorded_drawn") if marks.get(k) is not None)
    return {"first_figure_s": first - t_cell, "cell_s": t_returned - t_cell,
            # the recorded panel's parts: the cell's imports, the recorded runs loaded, the panel drawn
            "imports_s": since(marks, "start", t_cell),
            "runs_loaded_s": since(marks, "recorded_loaded", marks.get("recorded_imported", marks.get("start"))),
            "panel_drawn_s": since(marks, "recorded_drawn", marks.get("recorded_loaded")),
            "backend_made_s": since(marks, "backend_made", t_cell), "warm_end_s": since({"w": warm_end}, "w", t_cell),
            "first_live_after_warm_s": since(marks, "first_live_drawn", warm_end),
            "live_complete_after_warm_s": since(marks, "first_live_complete", warm_end)}


def first_view_timings(t_cell: float, marks: dict) -> dict:
    """The first figure's two candidates (seconds from the cell's start), whether the stored first
    view was shown, and the recorded panel's modules imported (pandas, plotly: once the cell's own
    imports, now the panel's build's)."""
    return {"first_view_s": since(marks, "first_view_shown", t_cell), "recorded_drawn_s": since(marks, "recorded_drawn", t_cell),
            "snapshot_used": marks.get("first_view_shown") is not None,
            "panel_imports_s": since(marks, "recorded_imported", marks.get("recorded_started"))}


def child(out: Path) -> None:
    """Run the cell in this (fresh) process, wait for the live panel, write the timings to `out`."""
    source = first_code_cell()
    ns = {"display": lambda *a, **k: None, "__name__": "__main__"}
    t_cell = time.perf_counter()
    exec(compile(source, "notebook 01, first code cell", "exec"), ns)  # noqa: S102 - the notebook's own cell
    t_returned = time.perf_counter()
    explorer, backend = ns["explorer"], ns["backend"]
    live = explorer.wait_live(LIVE_TIMEOUT_S)
    marks = dict(explorer.marks)
    rec = {**timings(t_cell, t_returned, marks, getattr(backend, "warm_ended_at", None)), **first_view_timings(t_cell, marks)}
    rec.update(mode=explorer.mode, live_complete=live, imported_at_first_view=explorer.imported_at_first_view,
               warm_parts=getattr(backend, "warm_parts", {}),
               warm_error=repr(getattr(backend, "warm_error", None) or "") or None)
    explorer.close()
    out.write_text(json.dumps(rec, indent=1))


def run_child(cache: str, env_extra: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="dspark-cold-") as d:
        out = Path(d) / "out.json"
        env = {**os.environ, "DSPARK_CACHE": cache, **env_extra}
        r = subprocess.run([sys.executable, "-m", "studies.live_panel.cold_start", "--child", str(out)], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
        if r.returncode != 0 or not out.exists():
            return {"error": (r.stderr or r.stdout)[-2000:]}
        return json.loads(out.read_text())


def summarise(cases: dict) -> dict:
    """Per timing: the cold process's, the warm processes' median, and each target met in every process."""
    warm = [c for k, c in cases.items() if k.startswith("warm") and "error" not in c]
    cold = cases.get("cold", {})
    out = {}
    for key in ("first_figure_s", "first_view_s", "recorded_drawn_s", "cell_s", "warm_end_s", "first_live_after_warm_s",
                "live_complete_after_warm_s"):
        vals = [c[key] for c in warm if c.get(key) is not None]
        out[key] = {"cold": cold.get(key), "warm_median": statistics.median(vals) if vals else None}
    ok = [c for c in cases.values() if "error" not in c]
    out["checks"] = {k: bool(ok) and all(c.get(k) is not None and c[k] <= t for c in ok) for k, t in TARGETS_S.items()}
    # The warm processes show the first view the cold one stored (they share its cache folder).
    out["snapshot_used"] = {"cold": cold.get("snapshot_used"), "warm": [bool(c.get("snapshot_used")) for c in warm]}
    return out


def table(summary: dict) -> str:
    lines = [f"{'measure':34s} {'cold':>7s} {'warm (median of ' + str(WARM_PROCESSES) + ')':>20s}  target"]
    for key, v in summary.items():
        if key in ("checks", "snapshot_used"):
            continue
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        target = f"<= {TARGETS_S[key]:g} s: {'met' if summary['checks'][key] else 'MISSED'}" if key in TARGETS_S else ""
        lines.append(f"{key:34s} {fmt(v['cold']):>7s} {fmt(v['warm_median']):>20s}  {target}")
    used = summary.get("snapshot_used")
    if used is not None:
        yes = lambda x: "-" if x is None else ("yes" if x else "no")  # noqa: E731
        lines.append(f"{'stored first view shown':34s} {yes(used['cold']):>7s} "
                     f"{str(sum(used['warm'])) + ' of ' + str(len(used['warm'])):>20s}")
    return "\n".join(lines)


def gpu_slug(gpu: str) -> str:
    name = gpu.replace("NVIDIA", "").strip().lower()
    return "-".join(name.split()) or "cpu"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-dry-run", action="store_true", help="on CPU: the code path, recorded only (no live figure)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child)
        return 0
    t0 = time.perf_counter()
    env = {"DSPARK_LAB_MODE": "recorded"} if a.cpu_dry_run else {}
    if not a.cpu_dry_run:
        subprocess.run([sys.executable, "-c", PRIMER], timeout=CASE_TIMEOUT_S, check=True)
    cases = {}
    with tempfile.TemporaryDirectory(prefix="dspark-cold-cache-") as cache:
        for label in ["cold", *(f"warm {i}" for i in range(1, WARM_PROCESSES + 1))]:
            cases[label] = run_child(cache, env)
            c = cases[label]
            print(f"[{label}] " + ("ERROR " + c["error"][-300:] if "error" in c else
                                   f"first figure {c['first_figure_s']:.2f} s ({'stored first view' if c['snapshot_used'] else 'recorded panel'}), "
                                   f"recorded drawn {c['recorded_drawn_s'] or float('nan'):.2f} s, mode {c['mode']}"), flush=True)
    from dspark_lab.measure.probe import fingerprint  # after the cases: this process stayed torch-free

    fp, now = fingerprint(), datetime.now(timezone.utc)
    summary = summarise(cases)
    record = {"what": "notebook 01's first code cell in a fresh process: the first figures (the stored first "
                      "view, else the recorded panel), the recorded panel, then the live panel in its place "
                      "(studies/live_panel/cold_start.py)",
              "script": "studies/live_panel/cold_start.py" + (" --cpu-dry-run" if a.cpu_dry_run else ""),
              "recorded_at": now.isoformat(timespec="seconds"), "fingerprint": fp, "targets_s": TARGETS_S,
              "summary": summary, "cases": cases, "wall_s": time.perf_counter() - t0}
    sub = "live-cold-start-cpu-dry-run" if a.cpu_dry_run else "live-cold-start"
    path = (Path(os.environ.get("OUT", "out")) / sub / "data" / "machines"
            / f"{gpu_slug(str(fp.get('gpu')))}-live-cold-start-{now:%Y%m%d-%H%M}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=str))
    print(f"wrote {path}" + (" (CPU dry run: not for committing)" if a.cpu_dry_run else f" (commit as data/machines/{path.name})"))
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
