"""Re-read the known-idle cases' H200 traces (tests/fixtures/known_idle_h200/, profiled on an H200 on
2026-12-01) with the current charging rule, beside the profiler-free loss measured on the same H200
(data/machines/h200-issue21-20261201.json), and write the table to
data/machines/h200-issue21-recheck-20261201.json. No GPU needed: the traces and losses are measured,
the charge is the rule read on them.

    python scripts/recheck_known_idle.py
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dspark_lab.gallery.known_idle import within  # noqa: E402
from dspark_lab.measure import breakdown, trace  # noqa: E402

TRACES = ROOT / "tests" / "fixtures" / "known_idle_h200"
MEASURED = ROOT / "data" / "machines" / "h200-issue21-20261201.json"
OUT = ROOT / "data" / "machines" / "h200-issue21-recheck-20261201.json"


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


if __name__ == "__main__":
    rows = recheck()
    doc = json.loads(MEASURED.read_text())
    OUT.write_text(json.dumps({"kind": "known_idle_recheck", "fingerprint": doc["fingerprint"],
                               "traces": str(TRACES.relative_to(ROOT)), "rule": breakdown.SYNC_COST_RULE,
                               "cases": rows}, indent=1) + "\n")
    print(f"{'case':<14}{'charged before':>16}{'charged now':>13}{'loss':>9}  within 10%?")
    for r in rows:
        print(f"{r['case']:<14}{r['charged_before_ms']:>13.2f} ms{r['charged_idle_ms']:>10.2f} ms"
              f"{r['loss_ms']:>6.2f} ms  {'yes' if r['within'] else 'NO'}")
