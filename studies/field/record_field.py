"""On a GPU: record the field's gallery, hazards and worked investigation, in one run of about two minutes.

    OUT=/some/folder python -m studies.field.record_field [--scale gpu] [--budget-s 170] [--cpu-dry-run]

1. the gallery, every case and its fix (the field's six and the earlier ones): measured host syncs
   against the documented count, and the step-time change of the fix from the paired rounds that
   also give both step times, with its 95% CI (`change` of each case, gallery/report.py's
   measure_case) -> data/gallery/<gpu>-gallery-<date>.json;
2. the hazards: every form (the new ones too), the race's window and the pageable threshold
   -> data/machines/<gpu>-hazards-<date>.json;
3. notebook 06's decode step, slow and fixed, inspected together and guarded
   -> data/investigation/<gpu>-decode-step-<date>.json;
4. while the budget lasts: the field's CUDA tests, then notebooks 06 and 04 executed live
   (evidence/, not for commit); `--live-notebooks` runs only the notebooks (about 90 s).
Files land under $OUT/field/ laid out as the repository, and as $OUT/field.tar.gz (extract it at
the repository root; commit data/, not evidence/). The summary table is printed last.
Without CUDA it stops (exit 2) unless --cpu-dry-run (smoke scale, nothing to commit).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from dspark_lab.gallery import SCALES, decode_step, registry, step_change  # noqa: E402
from dspark_lab.gallery import report  # noqa: E402
from dspark_lab.measure import probe  # noqa: E402
from dspark_lab.results.analyses import charge_accounting, step_diff, sync_cost_groups, verdict  # noqa: E402
from dspark_lab.results.record import investigation  # noqa: E402
from dspark_lab.results.record.paths import machine_file_name  # noqa: E402
from dspark_lab.run import investigation as run_investigation  # noqa: E402

T0 = time.perf_counter()
TARGETS = ("dspark_lab.gallery.decode_step:slow_step()", "dspark_lab.gallery.decode_step:fixed_step()")
CUDA_TESTS = ("tests/test_field_cases.py", "tests/test_hazards_field.py", "tests/test_gallery.py", "tests/test_hazards.py")


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


def record_gallery(scale: str, steps: int, rounds: int, names=None) -> dict:
    def said(c: dict) -> None:
        ch = c["change"] or {}
        say(f"gallery {c['name']}: syncs {c['variants']['case']['host_syncs_per_step']} "
            f"(documented {registry.get(c['name']).expected_syncs}); fix {ch.get('difference', 'not measured')}")
    return report.record(names, scale=scale, steps=steps, rounds=rounds, progress=said)


def record_investigation(steps: int, trials: int) -> dict:
    return run_investigation.record(
        decode_step.slow_step(), decode_step.fixed_step(), targets=TARGETS, allow=decode_step.CI_ALLOW,
        steps=steps, trials=trials, source_root=Path(decode_step.__file__).parent)


def run_notebooks(evidence: Path, timeout_s: float) -> str:
    """Notebooks 06 and 04 executed live in fresh kernels (their outputs kept as evidence)."""
    import nbclient
    import nbformat

    evidence.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DSPARK_LAB_MODE", None)
    out = []
    for name in ("06_investigation.ipynb", "04_sync_gallery.ipynb"):
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        try:
            nbclient.NotebookClient(nb, timeout=max(10, int(timeout_s)), kernel_name="python3",
                                    resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute(env=env)
            out.append(f"{name} ok")
        except Exception as e:  # noqa: BLE001 - recorded, the script goes on
            out.append(f"{name} FAILED: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        nbformat.write(nb, evidence / name)
    return "; ".join(out)


def run_cuda_tests(evidence: Path, timeout_s: float) -> str:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", *CUDA_TESTS]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, "PYTHONPATH": str(ROOT)})
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        text = f"timed out after {timeout_s:.0f} s"
    (evidence / "pytest-cuda.txt").write_text(" ".join(cmd) + "\n" + text)
    return text.strip().splitlines()[-1] if text.strip() else ""


def summary_table(gal: dict, hz, inv: dict) -> str:
    g = sync_cost_groups.groups(gal).set_index("case")
    acc = charge_accounting.table(gal).set_index("case")
    lines = [f"{'case':24s} {'syncs doc':>9s} {'measured':>8s} {'fix doc':>7s} {'fix':>5s}  change of the fix (paired)  "
             f"group  charge against saving"]
    for c in gal["cases"]:
        a, b = c["variants"]["case"], c["variants"]["fix"]
        lines.append(f"{c['name']:24s} {a['expected_syncs']:>9} {a['host_syncs_per_step']!s:>8} {b['expected_syncs']:>7} "
                     f"{b['host_syncs_per_step']!s:>5}  {(c['change'] or {}).get('difference', 'not measured')}  "
                     f"{g.loc[c['name'], 'group']}  {acc.loc[c['name'], 'verdict']}")
    lines.append(charge_accounting.summary(gal))
    mism = report.check(gal)
    lines.append(f"cases: {len(gal['cases'])}; count mismatches: {len(mism)}" + "".join(f"\n  MISMATCH {m}" for m in mism))
    if hz:
        from dspark_lab.results.analyses import hazards as H

        lines += [f"hazard {c['form']}: {c['wrong']} of {c['n']} wrong" for c in hz["forms"]]
        lines += H.curves_in_words(hz) + [f"UNEXPECTED {s}" for s in H.surprises(hz)]
    lines.append("investigation, inspect: " + verdict.inspect_line(inv["before"]))
    lines.append("investigation, diff:    " + verdict.diff_line(step_diff.diff(inv["before"], inv["after"])))
    lines.append(investigation.guard_text(inv))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", default="gpu", choices=sorted(SCALES))
    ap.add_argument("--steps", type=int, default=step_change.STEPS)
    ap.add_argument("--rounds", type=int, default=step_change.ROUNDS,
                    help="paired rounds per gallery case: both step times and the fix's change")
    ap.add_argument("--budget-s", type=float, default=170.0)
    ap.add_argument("--cases", default="", help="comma-separated subset of the gallery's cases (default: all)")
    ap.add_argument("--cpu-dry-run", action="store_true", help="without CUDA: the smoke scale, into $OUT/field-cpu-dry-run/")
    ap.add_argument("--live-notebooks", action="store_true",
                    help="only run notebooks 06 and 04 live (about 90 s), outputs under $OUT/field-notebooks/")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if a.live_notebooks:
        folder = Path(os.environ.get("OUT", "out/gpu")) / "field-notebooks"
        print(run_notebooks(folder, a.budget_s))
        return 0
    if not cuda and not a.cpu_dry_run:
        say("no CUDA device: the field's records need one (--cpu-dry-run checks the script)")
        return 2
    scale = a.scale if cuda else "smoke"
    out = Path(os.environ.get("OUT", "out/gpu")) / ("field" if cuda else "field-cpu-dry-run")
    data, evidence = out / "data", out / "evidence"
    evidence.mkdir(parents=True, exist_ok=True)
    fp = probe.fingerprint()
    say(f"fingerprint: {fp['gpu']} · driver {fp['driver']} · CUDA {fp['cuda']} · torch {fp['torch']}; scale {scale}")
    gal = record_gallery(scale, a.steps, a.rounds, [c for c in a.cases.split(",") if c] or None)
    gal["wall_s"] = round(time.perf_counter() - T0, 1)
    gpath = report.save(gal, data / "gallery" / machine_file_name(fp, gal["recorded_at"], "gallery", with_time=True))
    say(f"gallery -> {gpath}")
    hz = None
    if cuda:
        from dspark_lab.measure import hazards as measure_hazards
        from dspark_lab.results.analyses import hazards as H

        hz = measure_hazards.measure_hazards(n=200, queued_ms=0.2)
        say(f"hazards -> {H.save(hz, data / 'machines' / machine_file_name(fp, hz['recorded'], 'hazards'))}")
    inv = record_investigation(a.steps, a.rounds)
    say(f"investigation -> {investigation.save(inv, data / 'investigation' / machine_file_name(fp, inv['recorded_at'], 'decode-step'))}")
    extra = {}
    for name, needs, fn in (("CUDA tests", 25, lambda left: run_cuda_tests(evidence, left)),
                            ("notebooks 06 and 04, live", 90, lambda left: run_notebooks(evidence, left))):
        left = a.budget_s - (time.perf_counter() - T0)
        extra[name] = fn(left - 5) if cuda and left > needs else f"SKIPPED ({left:.0f} s left, needs about {needs} s)"
        say(f"{name}: {extra[name]}")
    with tarfile.open(out.parent / f"{out.name}.tar.gz", "w:gz") as tar:
        tar.add(out, arcname=".")
    print("\nsummary (field)\n" + "-" * 15)
    print("\n".join(f"{k}: {v}" for k, v in extra.items()))
    print(f"everything: {out.parent / (out.name + '.tar.gz')} (tar -xzf at the repository root; commit data/ only)")
    print(f"wall time {time.perf_counter() - T0:.1f} s")
    print(summary_table(gal, hz, inv))
    return 1 if cuda and report.check(gal) else 0


if __name__ == "__main__":
    sys.exit(main())
