"""On a GPU: `dspark-lab inspect` and `diff` on the gallery's cases and their fixes, and
every kata graded with a correct and a wrong solution. Writes under $OUT/inspect/ laid out as the
repository paths to commit, and prints a summary table last.

    OUT=/tmp/o python -m studies.inspect.katas_and_diffs [--budget-s 70] [--cpu-dry-run]

1. the machine's fingerprint (measure.probe);
2. the command line on the first case, end to end (each in its worker process):
   `inspect dspark_lab.gallery.targets:scalar_item --guard` (record + page; the guard must exit 1)
   and `diff ...:scalar_item ...:scalar_item_fix` (both records + the Markdown);
3. every kata: the gallery's fix as the correct solution, the pitfall itself as the wrong one (it
   must fail the guard, naming its sync line, and not be faster);
4. the other cases' diffs in this process (run.inspect.inspect_pair: the same records as `diff`),
   while the time budget lasts (a case left out is said so).

Files: data/inspect/<gpu>-scalar_item-<date>.{json,html}, data/inspect/<gpu>-diff-<case>-<date>.md
with -before.json / -after.json, and studies/inspect/<gpu>-katas-and-diffs-<date>.json (fingerprint, kata
grades, each case's check against its documented sync lines, stage times).
Without CUDA it stops with a message (exit 2) unless --cpu-dry-run, which runs it all at the
gallery's smoke scale into $OUT/inspect-cpu-dry-run/ (nothing there is to be committed).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from dspark_lab.cli.main import main as cli  # noqa: E402
from dspark_lab.gallery import katas, registry  # noqa: E402
from dspark_lab.gallery import cases as C  # noqa: E402
from dspark_lab.measure import probe  # noqa: E402
from dspark_lab.results.analyses import step_diff  # noqa: E402
from dspark_lab.results.record import inspect_record  # noqa: E402
from dspark_lab.results.record.sync_sites import parse_site  # noqa: E402
from dspark_lab.run import inspect as inspect_run  # noqa: E402

T0 = time.perf_counter()
FIRST = "scalar_item"
TARGETS = "dspark_lab.gallery.targets"


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:5.1f} s] {msg}", flush=True)


def num(v, digits: int = 2) -> str:
    return "n/a" if v is None or v != v else f"{v:.{digits}f}"  # None/NaN: not measurable (no CUDA)


def machine_prefix(fp: dict) -> str:
    gpu = fp.get("gpu", "none")
    m = re.search(r"(H200|H100|A100|L40S|B200|GB200)", gpu)
    return m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "cpu"


def documented_match(case, rec: dict) -> bool:
    """Each documented `# sync:` line is a measured site (exact line, or its function where only the
    trace saw it), and no other function syncs."""
    doc = [parse_site(s) for s in case.sites()]
    got = [parse_site(s["site"]) for s in rec["sites"]]
    exact_ok = all(any(g.key == d.key or (not s["exact"] and g.where == d.where) for g, s in zip(got, rec["sites"]))
                   for d in doc)
    return exact_ok and {g.where for g in got} <= {d.where for d in doc}


def cli_first_case(data: Path, prefix: str, date: str, opts: list) -> dict:
    inspect_dir = data / "inspect"
    say(f"dspark-lab inspect {TARGETS}:{FIRST} --guard")
    rc_inspect = cli(["inspect", f"{TARGETS}:{FIRST}", "--guard", "--out", str(inspect_dir),
                      "--name", f"{prefix}-{FIRST}-{date}", *opts])
    say(f"  exit {rc_inspect} (1 expected: the guard found the sync)")
    say(f"dspark-lab diff {TARGETS}:{FIRST} {TARGETS}:{FIRST}_fix")
    rc_diff = cli(["diff", f"{TARGETS}:{FIRST}", f"{TARGETS}:{FIRST}_fix", "--out", str(inspect_dir),
                   "--name", f"{prefix}-diff-{FIRST}-{date}", *opts])
    say(f"  exit {rc_diff}")
    return {"inspect_exit": rc_inspect, "diff_exit": rc_diff}


def grade_katas(scale: str, rounds: int, steps: int) -> list[dict]:
    out = []
    for name in katas.names():
        case = registry.get(name)
        for kind, fn in (("correct", case.fix), ("wrong", case.step)):
            g = katas.check(name, fn, scale=scale, rounds=rounds, steps=steps)
            out.append({"kata": name, "solution": kind, "function": fn.__name__, "passed": g.passed,
                        "complete": g.complete, "failed": g.failed(),
                        "results": {k: [ok, d] for k, (ok, d) in g.results.items()}})
            say(f"kata {name} {kind}: {'pass' if g.passed else 'FAIL ' + ','.join(g.failed())}")
    return out


def diff_case(name: str, data: Path, prefix: str, date: str, steps: int, trials: int) -> tuple[dict, dict]:
    case = registry.get(name)
    state = C.make_state(scale_name=os.environ.get("DSPARK_GALLERY_SCALE") or "gpu")
    root = Path(C.__file__).resolve().parent
    before, after = inspect_run.inspect_pair(
        lambda: case.step(state), lambda: case.fix(state), targets=(f"{TARGETS}:{name}", f"{TARGETS}:{name}_fix"),
        labels=(name, f"{name}_fix"), steps=steps, trials=trials, source_roots=(root, root), allow=case.allow)
    stem = data / "inspect" / f"{prefix}-diff-{name}-{date}"
    inspect_record.save(before, f"{stem}-before.json")
    inspect_record.save(after, f"{stem}-after.json")
    (stem.parent / f"{stem.name}.md").write_text(step_diff.markdown(step_diff.diff(before, after)) + "\n")
    return before, after


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=70.0, help="stop starting new cases after this many seconds")
    ap.add_argument("--cpu-dry-run", action="store_true", help="without CUDA: run it all at smoke scale (not for committing)")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not a.cpu_dry_run:
        print("studies.inspect.katas_and_diffs: no CUDA device here; this script records GPU measurements (use --cpu-dry-run to "
              "try it at smoke scale)", file=sys.stderr)
        return 2
    scale = "gpu" if cuda else "smoke"
    os.environ.setdefault("DSPARK_GALLERY_SCALE", scale)
    root = Path(os.environ.get("OUT", "out/gpu")) / ("inspect" if cuda else "inspect-cpu-dry-run")
    data = root / "data"
    fp = probe.fingerprint()
    prefix = machine_prefix(fp)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d")
    steps, trials = (20, 6) if cuda else (3, 2)
    say(f"fingerprint: {fp['gpu']}, driver {fp['driver']}, CUDA {fp['cuda']}, torch {fp['torch']}; scale {scale}")
    stages = {}
    t = time.perf_counter()
    cli_rc = cli_first_case(data, prefix, date, ["--steps", str(steps), "--trials", str(trials), "--time-limit", "30"])
    stages["cli"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    grades = grade_katas(scale, rounds=5 if cuda else 2, steps=steps)
    stages["katas"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    rows, skipped = [], []
    pairs = {}
    cli_stem = data / "inspect" / f"{prefix}-diff-{FIRST}-{date}"
    if cli_rc["diff_exit"] == 0:  # the CLI's records of the first case; else it is measured in process below
        pairs[FIRST] = tuple(inspect_record.load(f"{cli_stem}-{role}.json") for role in ("before", "after"))
    for name in registry.names():
        if name in pairs:
            continue
        if time.perf_counter() - T0 > a.budget_s:
            skipped.append(name)
            continue
        say(f"diff {name} -> its fix (in process)")
        pairs[name] = diff_case(name, data, prefix, date, steps, trials)
    stages["diffs"] = round(time.perf_counter() - t, 1)
    for name, (b, f) in pairs.items():
        d = step_diff.diff(b, f)
        st = d["step_time"]
        rows.append({"case": name, "syncs/step": f"{num(b['counts']['syncs_per_step'])} -> {num(f['counts']['syncs_per_step'])}",
                     "sites removed": int((d["sites"].status == "removed").sum()),
                     "idle caused ms": num(b["parts"]["gpu_idle_sync_caused_ms"], 3),
                     "step ms": f"{st['before'][0]:.3f} -> {st['after'][0]:.3f}", "change": st["difference"],
                     "documented sites": documented_match(registry.get(name), b) if cuda else None})
    summary = {"fingerprint": fp, "scale": scale, "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "cli": cli_rc, "katas": grades, "cases": rows, "skipped_for_time": skipped, "stage_s": stages,
               "wall_s": round(time.perf_counter() - T0, 1)}
    mpath = root / "studies" / "inspect" / f"{prefix}-katas-and-diffs-{date}.json"
    mpath.parent.mkdir(parents=True, exist_ok=True)
    mpath.write_text(json.dumps(summary, indent=1, default=str))
    say(f"wrote {mpath}")
    print(f"\n== inspect, diff and katas on {fp['gpu']} (driver {fp['driver']}, CUDA {fp['cuda']}, torch {fp['torch']}), "
          f"{summary['wall_s']} s ==")
    print(f"CLI: inspect --guard exit {cli_rc['inspect_exit']} (1 expected), diff exit {cli_rc['diff_exit']} (0 expected)")
    w = max(len(n) for n in registry.names())
    print(f"{'case':<{w}}  syncs/step    sites-  idle ms  step ms          documented  change")
    for r in rows:
        print(f"{r['case']:<{w}}  {r['syncs/step']:<12}  {r['sites removed']:<6}  {r['idle caused ms']:<7}  "
              f"{r['step ms']:<15}  {str(r['documented sites']):<10}  {r['change']}")
    if skipped:
        print(f"left out for time: {', '.join(skipped)}")
    print(f"{'kata':<{w}}  correct  wrong (why it failed)")
    for name in katas.names():
        c, x = [g for g in grades if g["kata"] == name]
        why = "; ".join(f"{k}: {x['results'][k][1]}" for k in x["failed"]) or "did not fail"
        if not cuda:
            print(f"{name:<{w}}  n/a      n/a (without CUDA only correctness is graded: {c['results']['output'][1]})")
            continue
        print(f"{name:<{w}}  {'pass' if c['passed'] and c['complete'] else 'FAIL':<7}  "
              f"{'fail' if not x['passed'] else 'PASSED (a wrong solution passed)'} ({why[:150]})")
    ok = all(g["passed"] == (g["solution"] == "correct") for g in grades) if cuda else True
    return 0 if ok and cli_rc == {"inspect_exit": 1, "diff_exit": 0} or not cuda else 1


if __name__ == "__main__":
    sys.exit(main())
