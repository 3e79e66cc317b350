"""On a GPU: the headroom of every read-back site against its charge, for every gallery case (the `case`
variant at the gallery's scale) and the kit's draft step at the reference point; and the race check over
the hazard forms, the kit's strategies, the race cases and notebook 06's fixed decode step (whose slow
step's headroom is measured too). Writes one file laid out as the repository
path to commit, and prints the table last.

    OUT=/tmp/o python -m studies.headroom.gallery_and_draft [--budget-s 90] [--cases a,b] [--cpu-dry-run]

Expected: about 105 s on an H200 (the 90 s budget, the case running when it ends and torch's import; a case not reached in it is listed as skipped).
File: $OUT/data/headroom/<gpu>-headroom-<stamp>.json: {"kind": "dspark_headroom_study", "fingerprint",
"races": measure.hazards.check_race_forms, "race_cases": [...], "headroom": [results.analyses.headroom
records, each with "case"], "skipped", "wall_s"}.
Without CUDA it stops with a message (exit 2) unless --cpu-dry-run, which runs the headroom logic at the
gallery's smoke scale, host tensors standing in for device ones, into $OUT/headroom-cpu-dry-run/.
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

from dspark_lab.config import LabConfig  # noqa: E402
from dspark_lab.gallery import decode_step, race_cases, registry  # noqa: E402
from dspark_lab.gallery import cases as C  # noqa: E402
from dspark_lab.measure import hazards, probe, races  # noqa: E402
from dspark_lab.model.workload import LabStep  # noqa: E402
from dspark_lab.results.analyses import headroom as H  # noqa: E402
from dspark_lab.results.rules.selection import REFERENCE  # noqa: E402
from dspark_lab.run.headroom import headroom  # noqa: E402

T0 = time.perf_counter()
KIND = "dspark_headroom_study"
DRAFT_EP = 8  # the reference point's EP size (the predicate is true: the scalar is consumed)
OPTS = dict(steps=10, trials=5, warmup=2)
EXPLAIN_UNTIL = 0.8  # a disagreement is split (one more inspection) only in the first 80% of the budget


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:5.1f} s] {msg}", flush=True)


def race_part(cuda: bool) -> tuple[dict, list]:
    if not cuda:
        return {"note": races.NO_CUDA}, []
    forms = hazards.check_race_forms(steps=40, queued_ms=0.2)
    dev = torch.device("cuda")
    cases = []
    for c in race_cases.RACE_CASES:
        for variant, make in (("case", c.make_step), ("fix", c.make_fix)):
            rep = races.check(lambda make=make: make(dev), steps=40)
            cases.append({"name": c.name, "variant": variant, "flagged": not rep["clean"],
                          "races": len(rep["races"]), "first": rep["races"][0] if rep["races"] else None, "report": rep})
    # notebook 06's decode step after its fix (pinned non-blocking copies: what a fix can break)
    rep = races.check(race_cases.with_changing_lengths(decode_step.decode_step_fixed), steps=40)
    cases.append({"name": "decode_step", "variant": "fix", "flagged": not rep["clean"], "races": len(rep["races"]),
                  "first": rep["races"][0] if rep["races"] else None, "report": rep})
    return forms, cases


def draft_step(cuda: bool):
    cfg = LabConfig(ep_size=DRAFT_EP, batch_size=REFERENCE.batch_size, gamma=REFERENCE.gamma,
                    workload=REFERENCE.workload if cuda else "tiny", device="cuda" if cuda else "cpu")
    s = LabStep(cfg)
    return s.step, f"draft step, {cfg.workload}, batch {cfg.batch_size}, gamma {cfg.gamma}, EP {cfg.ep_size}, {cfg.strategy}"


def headroom_part(cuda: bool, budget_s: float, only: list) -> tuple[list, list]:
    scale = C.default_scale()
    jobs = [("draft", None), ("decode_step", None)] + [(name, c) for name, c in registry.CASES.items()]
    jobs = [j for j in jobs if not only or j[0] in only]
    out, skipped = [], []
    devices = None if cuda else ("cpu",)  # the dry run: host tensors stand in for device ones
    for name, case in jobs:
        if time.perf_counter() - T0 > budget_s:
            skipped.append(name)
            continue
        if name == "decode_step":  # notebook 06's slow step, before its fix
            fn, label = decode_step.slow_step(), "dspark_lab.gallery.decode_step:slow_step()"
        elif case is None:
            fn, label = draft_step(cuda)
        else:
            state = C.make_state(scale_name=scale)
            fn, label = (lambda case=case, state=state: case.step(state)), f"{name} ({case.step.__name__}, scale {scale})"
        try:
            rec = headroom(fn, target=label, label=name, devices=devices,
                           explain=time.perf_counter() - T0 < EXPLAIN_UNTIL * budget_s, **OPTS)
        except Exception as e:  # noqa: BLE001 -- one case's failure must not lose the others
            out.append({"case": name, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
            continue
        out.append({**rec, "case": name})
        say(f"{name}: {len(rec['sites'])} site(s)")
    return out, skipped


def table(study: dict) -> str:
    lines = ["case | site | call | charge ms | headroom ms [95% CI] | agree? / why", "---|---|---|---|---|---"]
    for rec in study["headroom"]:
        if "error" in rec:
            lines.append(f"{rec['case']} | – | – | – | – | failed: {rec['error']}")
            continue
        for r in H.table_rows(rec) or [{"site": "(no read-back site)", "call": "", "charge ms": "", "headroom ms [95% CI]": "", "verdict": ""}]:
            lines.append(f"{rec['case']} | {r['site']} | {r['call']} | {r['charge ms']} | {r['headroom ms [95% CI]']} | {r['verdict']}")
    rf = study["races"]
    for r in rf.get("forms", []) + rf.get("strategies", []):
        lines.append(f"race | {r.get('form') or r.get('strategy')} | safe={r['safe']} | flagged={r['flagged']} | "
                     f"{r['races']} of {r['steps']} steps | {'as expected' if r['expected'] else 'UNEXPECTED'}")
    for c in study["race_cases"]:
        lines.append(f"race case | {c['name']} {c['variant']} | | flagged={c['flagged']} | {c['races']} | ")
    if study["skipped"]:
        lines.append(f"skipped (budget): {', '.join(study['skipped'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=90.0)
    ap.add_argument("--cpu-dry-run", action="store_true")
    ap.add_argument("--cases", default="", help="comma-separated subset: draft and gallery case names")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not a.cpu_dry_run:
        print("no CUDA: this study measures on a GPU (use --cpu-dry-run to check its logic here)", file=sys.stderr)
        return 2
    if cuda:
        probe.calibrate_sleep()
    fp = probe.fingerprint()
    forms, cases = race_part(cuda)
    say("races done")
    recs, skipped = headroom_part(cuda, a.budget_s, [c for c in a.cases.split(",") if c])
    study = {"kind": KIND, "schema": 1, "fingerprint": fp, "scale": C.default_scale(),
             "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "options": OPTS,
             "races": forms, "race_cases": cases, "headroom": recs, "skipped": skipped,
             "wall_s": round(time.perf_counter() - T0, 1)}
    out = Path(os.environ.get("OUT", "out/gpu"))
    gpu = re.sub(r"[^a-z0-9]+", "-", str(fp.get("gpu") or "cpu").lower()).strip("-").replace("nvidia-", "")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d")
    path = (out / "data" / H.STUDY_FOLDER if cuda else out / "headroom-cpu-dry-run") / f"{gpu}-headroom-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(study, indent=1, default=str) + "\n")
    say(f"wrote {path}")
    print(table(study))
    return 0


if __name__ == "__main__":
    sys.exit(main())
