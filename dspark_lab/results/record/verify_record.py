"""The verify record: what `dspark-lab verify` found on one machine, one entry per check, saved
beside the platform card under data/machines/ (<gpu>-verify-<yyyymmdd>.json).

A check is a verdict with the numbers behind it: `passed` True or False, or None where this machine
cannot make it (no CUDA, say) with `why`. Doctor, the report and notebook 02 read the newest record
of this GPU and driver and say "verified on this GPU: N of N".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from dspark_lab.results.record import machine_files
from dspark_lab.results.record.paths import machine_file_name

VERIFY_KIND = "dspark-lab verify record"
VERIFY_SCHEMA = 1
GROUPS = ("syncs", "cost", "card", "hazards", "katas", "clocks", "compiled", "capture")


@dataclass(frozen=True)
class Check:
    group: str  # one of GROUPS
    name: str
    passed: Optional[bool]  # None: not checkable on this machine
    detail: str  # the verdict in words, with the numbers and the tolerance it was judged by
    numbers: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"check group must be one of {', '.join(GROUPS)}; got {self.group!r}")
        if self.passed not in (True, False, None):
            raise ValueError(f"check passed must be True, False or None; got {self.passed!r}")

    def line(self) -> str:
        mark = {True: "PASS", False: "FAIL", None: "n/a "}[self.passed]
        return f"[{mark}] {self.group}/{self.name}: {self.detail}"


def record(checks: Sequence[Check], fingerprint: dict, recorded: str, wall_s: float) -> dict:
    return {"kind": VERIFY_KIND, "schema": VERIFY_SCHEMA, "fingerprint": dict(fingerprint), "recorded": recorded,
            "wall_s": round(float(wall_s), 1), "checks": [asdict(c) for c in checks]}


def checks_of(rec: dict) -> list[Check]:
    return [Check(**c) for c in rec["checks"]]


def validate(rec: dict, where: str = "verify record") -> dict:
    """The record, or a ValueError naming the field that is wrong and what it may be."""
    machine_files.check_head(rec, VERIFY_KIND, VERIFY_SCHEMA, where)
    if not isinstance(rec.get("checks"), list) or not rec["checks"]:
        raise ValueError(f"{where}: field 'checks' must be a non-empty list")
    for i, c in enumerate(rec["checks"]):
        try:
            Check(**c)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: checks[{i}]: {e}") from None
    return rec


def counts(rec: dict) -> dict:
    """{passed, failed, not_checked, checked}: checked = passed + failed."""
    cs = checks_of(rec)
    passed = sum(c.passed is True for c in cs)
    failed = sum(c.passed is False for c in cs)
    return {"passed": passed, "failed": failed, "not_checked": len(cs) - passed - failed, "checked": passed + failed}


def summary_line(rec: Optional[dict]) -> str:
    """"verified on this GPU: 31 of 31 (…)" — or what is missing; the failures by name."""
    if rec is None:
        return "not verified on this GPU: no verify record for this GPU and driver (run `dspark-lab verify`)"
    n = counts(rec)
    fp = rec["fingerprint"]
    where = f"{fp.get('gpu', '?')}, driver {fp.get('driver', '?')}, {str(rec.get('recorded', ''))[:10]}"
    text = f"verified on this GPU: {n['passed']} of {n['checked']} checks ({where})"
    failed = [f"{c.group}/{c.name}" for c in checks_of(rec) if c.passed is False]
    if failed:
        text += "; failed: " + ", ".join(failed)
    if n["not_checked"]:
        text += f"; {n['not_checked']} could not be checked here"
    return text + (f" [{rec['path']}]" if rec.get("path") else "")


def save(rec: dict, path) -> Path:
    return machine_files.save_json(validate(rec), path)


def file_name(rec: dict) -> str:
    return machine_file_name(rec["fingerprint"], rec.get("recorded", ""), "verify")


def load(path) -> dict:
    return {**validate(machine_files.read_json(path, "verify record"), str(path)), "path": str(path)}


def recorded(data_dir=None) -> list[dict]:
    """Every verify record under <data>/machines/ (a damaged one skipped with a warning)."""
    return machine_files.load_all(VERIFY_KIND, load, data_dir)


def newest_for(fingerprint: dict, data_dir=None) -> Optional[dict]:
    """The newest record of this GPU and driver, or None."""
    mine = [r for r in recorded(data_dir) if machine_files.same_machine(r, fingerprint)]
    return max(mine, key=lambda r: str(r.get("recorded", "")), default=None)
