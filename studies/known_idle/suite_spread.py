"""The known-idle cost checks' spread over CUDA-suite invocations: reads the JUnit reports the device
round writes (scripts/device_round.sh cudaN: --junitxml), where each cost test keeps its check's
numbers, and verify records (data/machines/*-verify-*.json); prints, per case, (loss − charge) / loss
in each run, its range, and the runs that failed. CPU only.

    python -m studies.known_idle.suite_spread junit-cuda1.xml ... [verify.json ...]
"""
from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

PROPERTY = "cost_check"
ABSOLUTE_BELOW_MS = 0.1  # a loss this small is read in ms, not as a share of itself


def from_junit(path: Path) -> dict:
    """{case: numbers} of one invocation's cost tests (the case is the test's parameter)."""
    out = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        if PROPERTY in props and "[" in tc.get("name", ""):
            nums = json.loads(props[PROPERTY])
            nums["failed"] = tc.find("failure") is not None or tc.find("error") is not None
            out[tc.get("name").split("[", 1)[1].rstrip("]")] = nums
    return out


def from_verify(path: Path) -> dict:
    rec = json.loads(path.read_text())
    return {c["name"]: {**c["numbers"], "failed": c["passed"] is False}
            for c in rec.get("checks", []) if c.get("group") == "cost"}


def gap(nums: dict) -> tuple:
    """(value, unit): (loss − charge) as % of the loss, or in ms where the loss is near zero."""
    d = nums["loss_ms"] - nums["charged_ms"]
    if abs(nums["loss_ms"]) < ABSOLUTE_BELOW_MS:
        return d, "ms"
    return 100 * d / nums["loss_ms"], "%"


def table(runs: list) -> list:
    cases = list(dict.fromkeys(c for r in runs for c in r))
    lines = ["| case | runs | spread | failed | per run |", "|---|---|---|---|---|"]
    for c in cases:
        vals = [(gap(r[c]), r[c]["failed"]) for r in runs if c in r]
        unit = vals[0][0][1]
        nums = [v for (v, _), _ in vals]
        fmt = (lambda x: f"{x:+.1f}") if unit == "%" else (lambda x: f"{x:+.3f}")
        lines.append(f"| {c} | {len(vals)} | {fmt(min(nums))} to {fmt(max(nums))} {unit} | "
                     f"{sum(f for _, f in vals)} | {', '.join(fmt(v) for v in nums)} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="JUnit reports (.xml) and verify records (.json)")
    a = ap.parse_args(argv)
    runs = [from_junit(p) if p.suffix == ".xml" else from_verify(p) for p in a.files]
    if not any(runs):
        sys.exit("no cost checks in these files")
    print("\n".join(table([r for r in runs if r])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
