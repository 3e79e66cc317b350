"""`dspark-lab doctor`: this machine's fingerprint and the pageable-copy probe, as a table or JSON."""
from __future__ import annotations

import argparse
import json
from typing import Sequence

from dspark_lab.cli.options import HelpFormatter
from dspark_lab.measure import probe


def add_doctor_parser(sub) -> None:
    p = sub.add_parser(
        "doctor", formatter_class=HelpFormatter,
        help="print this machine's fingerprint and the pageable-copy probe",
        description="Print the machine fingerprint (GPU, driver, CUDA, torch, ...) and, on a CUDA machine, "
                    "whether a non-blocking copy from pageable memory blocks the host, with each strategy's "
                    "host cost per call.",
    )
    p.add_argument("--no-probe", dest="probe", action="store_false", help="skip the probe (fingerprint only)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_doctor)


def _flatten(d: dict, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.extend(_flatten(v, key + "."))
        elif isinstance(v, float):
            out.append((key, f"{v:.1f}"))
        elif isinstance(v, (list, tuple)):
            out.append((key, json.dumps(v)))
        else:
            out.append((key, str(v)))
    return out


def _table(pairs: Sequence[tuple[str, str]], title: str) -> str:
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join([title, "-" * len(title)] + [f"{k:<{width}}  {v}" for k, v in pairs])


def cmd_doctor(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    fp = probe.fingerprint()
    pr = probe.run_probe() if args.probe else None
    if args.json:
        print(json.dumps({"fingerprint": fp, "probe": pr}, indent=2, default=str))
        return 0
    print(_table(_flatten(fp), "fingerprint"))
    if pr is not None:
        print()
        if pr.get("available"):
            print(_table(_flatten(pr), "probe (host time of one call, µs: GPU idle / with work queued)"))
            print()
        print("probe: " + probe.describe(pr))
    return 0
