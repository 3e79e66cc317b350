"""Each lint rule's fix, applied to the gallery case it was found on, under the race check.

A rule's fix goes with a case where lint finds that rule on one of the case's documented sync lines
(its `# sync:` comments); the fix applied there is the case's fix function, the gallery's form of the
rule's fix text (its source is kept with the pairing). `check_fix` runs that fix over steps whose
values change every step (gallery/changing.py) with GPU work queued ahead of each and nothing
synchronized, against a run that waits for every copy (measure/races.py, as `inspect --races` does):
every value that differs is a wrong value. A rule found on no case's sync line has nothing to run;
`unpaired()` says which, and why.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

from dspark_lab.gallery.changing import steps_of
from dspark_lab.gallery.registry import CASES, Case
from dspark_lab.lint import RULES, lint_paths
from dspark_lab.lint.rules import fix_for
from dspark_lab.measure import races

NO_CODE = "a comment rule: nothing runs, so there is no fix to run"
NO_CASE = "no gallery case's documented sync line is found by this rule"


@dataclass(frozen=True)
class Pairing:
    rule: str
    case: str
    site: str  # the pitfall's line lint found: "gallery/cases.py:155 seq_lens_sum_item"
    code: str  # that line's code
    lint_fix: str  # the fix lint offers there (rules.fix_for)
    fix: str  # the case's fix function: the rule's fix as the gallery applies it
    source: str  # the fix function's source


@lru_cache(maxsize=None)
def _findings(path: str) -> dict:
    return {f.line: f for f in lint_paths([path])}


def _pairings_of(case: Case) -> list[Pairing]:
    out = []
    for site in case.sites():
        where, func = site.split(" ", 1)
        line = int(where.rsplit(":", 1)[1])
        fn = next(f for f in (case.step, *case.helpers) if f.__name__ == func)
        f = _findings(inspect.getsourcefile(fn)).get(line)
        if f is not None:
            out.append(Pairing(f.rule, case.name, site, f.code, fix_for(f.rule, f.code, f.statement),
                               case.fix.__name__, inspect.getsource(case.fix)))
    return out


def pairings(cases: Optional[dict] = None) -> list[Pairing]:
    """Every (rule, case) where lint finds the rule on a documented sync line of the case's pitfall,
    one per rule and case (its first such line), in the gallery's order."""
    seen, out = set(), []
    for case in (cases or CASES).values():
        for p in _pairings_of(case):
            if (p.rule, p.case) not in seen:
                seen.add((p.rule, p.case))
                out.append(p)
    return out


def unpaired(found: list[Pairing]) -> dict[str, str]:
    """The rules with no pairing, each with why."""
    have = {p.rule for p in found}
    return {r: NO_CODE if r == "sync_ok_without_reason" else NO_CASE for r in RULES if r not in have}


def check_fix(case: Case, *, steps: int = 20, scale: Optional[str] = None,
              hooks: Optional[races.Hooks] = None) -> dict:
    """The race check of `case.fix` over `steps` steps of changing values: {"case", "fix", "checked",
    "steps", "wrong" (values that differ), "of" (values compared in the differing outputs), "races", "report"}."""
    rep = races.check(steps_of(case.fix, scale), steps=steps, hooks=hooks)
    wrong = sum(r["wrong"] for r in rep["races"])
    return {"case": case.name, "fix": case.fix.__name__, "checked": rep["checked"], "steps": steps,
            "wrong": wrong, "of": sum(r["of"] for r in rep["races"]), "races": len(rep["races"]), "report": rep}


def check_all(found: list[Pairing], run: Callable[[Case], dict]) -> list[dict]:
    """`run(case)` once per case the pairings name (a case found by several rules is run once), each
    result with the rules it stands for."""
    rules_of: dict[str, list[str]] = {}
    for p in found:
        rules_of.setdefault(p.case, []).append(p.rule)
    return [{**run(CASES[name]), "rules": rules} for name, rules in rules_of.items()]
