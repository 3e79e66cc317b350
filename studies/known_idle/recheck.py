"""Re-read the known-idle cases' H200 traces (tests/fixtures/known_idle_h200/, profiled on an H200 on
2026-12-01) with the current charging rule, beside the profiler-free loss measured on the same H200
(studies/interference/h200-summary-20261201.json), and write the table to
studies/known_idle/h200-recheck-20261201.json. No GPU needed: the traces and losses are measured,
the charge is the rule read on them.

    python -m studies.known_idle.recheck [--out FILE]
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from dspark_lab.gallery.known_idle import within  # noqa: E402
from dspark_lab.measure import breakdown, trace  # noqa: E402

TRACES = ROOT / "tests" / "fixtures" / "known_idle_h200"
MEASURED = ROOT / "studies" / "interference" / "h200-summary-20261201.json"
OUT = Path(__file__).resolve().parent / "h200-recheck-20261201.json"


def recheck() -> list[dict]:
    cases = {c["case"]: c for c in json.loads(MEASURED.read_text())["known_idle"]["cases"]}
    out = []
    for path in sorted(TRACES.glob("*.json.gz")):
        name = path.name.split(".")[0]
        with gzip.open(path, "rt") as f:
            per = breakdown.per_step(trace.events(json.load(f))).iloc[1:]  # the first pays the profiler's start
        charged, loss = float(per.gpu_idle_sync_caused_ms.mean()), cases[name]["loss_ms"]
        out.append({"case": name, "charged_idle_ms": charged, "charged_before_ms": cases[name]["charged_idle_ms"],
                    "loss_ms": loss, "within": within(charged, loss)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the table goes (default {OUT.relative_to(ROOT)})")
    out = ap.parse_args(argv).out
    rows = recheck()
    doc = json.loads(MEASURED.read_text())
    out.write_text(json.dumps({"kind": "known_idle_recheck", "fingerprint": doc["fingerprint"],
                               "traces": str(TRACES.relative_to(ROOT)), "rule": breakdown.SYNC_COST_RULE,
                               "cases": rows}, indent=1) + "\n")
    print(f"{'case':<14}{'charged before':>16}{'charged now':>13}{'loss':>9}  within 10%?")
    for r in rows:
        print(f"{r['case']:<14}{r['charged_before_ms']:>13.2f} ms{r['charged_idle_ms']:>10.2f} ms"
              f"{r['loss_ms']:>6.2f} ms  {'yes' if r['within'] else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
