"""On a GPU: every lint rule's fix, applied to the gallery case lint finds the rule on (the case's fix
function), run under the race check: steps whose values change every step, GPU work queued ahead of
each (the gallery's queued scale: 4 ms in each step, plus the race check's 0.2 ms), nothing
synchronized, compared with a run that waits for every copy. The result to show: 0 wrong values.

    OUT=/tmp/o python -m studies.hazards.lint_fixes_races [--steps 20] [--budget-s 40] [--cpu-dry-run]

Expected: about 30 s on an H200 (torch's import, each paired fix x 2 runs x 20 steps of about 5 ms, the
compiled cases' compilation; a case not reached within --budget-s is listed as skipped).
File: $OUT/data/hazards/<gpu>-lint-fixes-races-<stamp>.json: {"kind": "dspark_lint_fix_races", "fingerprint",
"scale", "steps", "pairings": [{rule, case, site, code, lint_fix, fix, source}], "unpaired": {rule: why},
"results": [{case, fix, rules, checked, steps, wrong, of, races, report}], "skipped", "wall_s"}.
Without CUDA it stops with a message (exit 2) unless --cpu-dry-run, which runs every fix over the same
steps on the CPU (no copy can be in flight there, so nothing can race) into $OUT/lint-fixes-cpu-dry-run/.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from dspark_lab.gallery import lint_fixes as L  # noqa: E402
from dspark_lab.gallery.cases import default_scale  # noqa: E402
from dspark_lab.measure import probe, races  # noqa: E402

T0 = time.perf_counter()
KIND = "dspark_lint_fix_races"
FOLDER = "hazards"


def run_all(pairings: list, steps: int, budget_s: float, cuda: bool) -> tuple[list, list]:
    """Each paired case's fix under the race check, until the budget is spent (the rest: skipped)."""
    hooks = None if cuda else races.Hooks(ahead=lambda: None, sync=lambda: None)
    skipped = []

    def one(case):
        if time.perf_counter() - T0 > budget_s:
            skipped.append(case.name)
            return {"case": case.name, "fix": case.fix.__name__, "checked": False, "skipped": True}
        try:
            return L.check_fix(case, steps=steps, hooks=hooks)
        except Exception as e:  # noqa: BLE001 -- one case's failure must not lose the others
            return {"case": case.name, "fix": case.fix.__name__, "checked": False,
                    "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    return L.check_all(pairings, one), skipped


def table(study: dict) -> str:
    lines = ["rule(s) | case | fix | steps | wrong values | outputs that differ | verdict", "---|---|---|---|---|---|---"]
    for r in study["results"]:
        if r.get("skipped") or r.get("error"):
            verdict = "skipped (budget)" if r.get("skipped") else f"failed: {r['error']}"
            lines.append(f"{', '.join(r['rules'])} | {r['case']} | {r['fix']} | - | - | - | {verdict}")
            continue
        verdict = ("not checked (no CUDA)" if not r["checked"] or not study["cuda"] else
                   "clean" if r["wrong"] == 0 else f"RACE: {r['races']} output(s) differ")
        lines.append(f"{', '.join(r['rules'])} | {r['case']} | {r['fix']} | {r['steps']} | {r['wrong']} | "
                     f"{r['races']} | {verdict}")
    for rule, why in study["unpaired"].items():
        lines.append(f"{rule} | - | - | - | - | - | not run: {why}")
    done = [r for r in study["results"] if r.get("checked")]
    lines.append(f"total: {sum(r['wrong'] for r in done)} wrong values over {len(done)} fixes checked"
                 + ("" if study["cuda"] else " (CPU dry run: nothing can race here)"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=40.0)
    ap.add_argument("--cpu-dry-run", action="store_true")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not a.cpu_dry_run:
        print("no CUDA: this study runs the race check on a GPU (use --cpu-dry-run to check its logic here)",
              file=sys.stderr)
        return 2
    fp = probe.fingerprint()
    pairings = L.pairings()
    results, skipped = run_all(pairings, a.steps, a.budget_s, cuda)
    study = {"kind": KIND, "schema": 1, "cuda": cuda, "fingerprint": fp, "scale": default_scale(),
             "steps": a.steps, "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             "pairings": [dataclasses.asdict(p) for p in pairings], "unpaired": L.unpaired(pairings),
             "results": results, "skipped": skipped, "wall_s": round(time.perf_counter() - T0, 1)}
    out = Path(os.environ.get("OUT", "out/gpu"))
    gpu = re.sub(r"[^a-z0-9]+", "-", str(fp.get("gpu") or "cpu").lower()).strip("-").replace("nvidia-", "")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M")
    folder = out / "data" / FOLDER if cuda else out / "lint-fixes-cpu-dry-run"
    path = folder / f"{gpu}-lint-fixes-races-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(study, indent=1, default=str) + "\n")
    print(f"[{time.perf_counter() - T0:5.1f} s] wrote {path}", flush=True)
    print(table(study))
    return 0


if __name__ == "__main__":
    sys.exit(main())
