"""Write docs/lint.md: the rules, the reason syntax, the hook, and `dspark-lab lint` run over the
gallery (each pitfall's documented sync lines and each fix) and the kit's known-sync step functions,
every table generated here from the code and the recorded H200 traces.

    python -m scripts.lint_docs           # rewrite docs/lint.md
    python -m scripts.lint_docs --check   # exit 1 when docs/lint.md is not what this would write
"""
from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from pathlib import Path
from typing import Optional

from dspark_lab.gallery import known_idle, registry
from dspark_lab.lint import RULES, lint_paths
from dspark_lab.lint.explain import why_not_found
from dspark_lab.measure import syncs, trace
from dspark_lab.results.facts import strategy_table

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "lint.md"
FIXTURES = ROOT / "tests" / "fixtures"
SURROUNDINGS = {"target_verify", "host_prep", "draft"}  # what every gallery step shares
TRACE = re.compile(r"sglang_profile_ep(?P<ep>\d+)_(?P<strategy>\w+?)(?P<stacks>_stacks)?\.rank0\.json\.gz")


def recorded_trace(strategy: str, folder: Path = FIXTURES / "traces") -> Optional[Path]:
    """The strategy's recorded H200 trace: sglang_profile_ep<N>_<strategy>[_stacks].rank0.json.gz,
    the one with Python stacks first, then the smallest EP size; None when none was recorded."""
    found = [(m, p) for p in folder.glob("sglang_profile_ep*.rank0.json.gz")
             if (m := TRACE.fullmatch(p.name)) and m["strategy"] == strategy]
    return min(found, key=lambda mp: (mp[0]["stacks"] is None, int(mp[0]["ep"])))[1] if found else None


def rel(p) -> str:
    return Path(p).resolve().relative_to(ROOT).as_posix()


def findings_of(path) -> list:
    return lint_paths([path])


def called(fn) -> set[str]:
    """Names of the module-level functions of fn's module that fn calls."""
    tree = ast.parse(inspect.getsource(fn).lstrip())
    mod = sys.modules[fn.__module__]
    names = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n for n in names if inspect.isfunction(getattr(mod, n, None)) and getattr(mod, n).__module__ == mod.__name__}


def _source_and_findings(fn) -> tuple[str, dict]:
    """The source text of fn's file and lint's findings in it by line (cases live in more than one file)."""
    path = inspect.getsourcefile(fn)
    return Path(path).read_text(), {f.line: f for f in findings_of(path)}


def pitfall_rows() -> list[list[str]]:
    """Each documented runtime sync line of each case (`# sync:` comments) and what lint found there."""
    rows = []
    for case in registry.CASES.values():
        for site in case.sites():
            where, func = site.split(" ", 1)
            line = int(where.rsplit(":", 1)[1])
            fn = next(f for f in (case.step, *case.helpers) if f.__name__ == func)
            src, found = _source_and_findings(fn)
            f = found.get(line)
            code = src.splitlines()[line - 1].split("#")[0].strip()
            rows.append([case.name, f"`{where}` {func}", f"`{code}`", f"yes: `{f.rule}`" if f else "no",
                         "" if f else why_not_found(src, line)])
    return rows


def fix_rows() -> list[list[str]]:
    """Every finding inside each fix (and the helpers only the fix calls), with why it is there."""
    rows = []
    for case in registry.CASES.values():
        found = list(_source_and_findings(case.fix)[1].values())
        step_side = called(case.step) | {h.__name__ for h in case.helpers} | {case.step.__name__}
        own = {case.fix.__name__} | (called(case.fix) - step_side - SURROUNDINGS)
        shared = sorted(called(case.fix) & step_side - SURROUNDINGS)
        hits = [f for f in found if f.function in own]
        note = f" (calls `{'`, `'.join(shared)}` with host tensors: its lines are the pitfall's)" if shared else ""
        if not hits:
            rows.append([case.name, f"`{case.fix.__name__}`{note}", "none", ""])
        for f in hits:
            allowed = [a for a in case.allow if a.split(":")[0].strip() == f.function]
            what = " (the result wait after the next work is queued)" if f.function == "read_back" else ""
            why = f"by design: the case allows `{allowed[0]}`{what}" if allowed else "not by design: the fix still syncs here"
            rows.append([case.name, f"`{case.fix.__name__}`{note}", f"line {f.line} `{f.rule}` in `{f.function}`", why])
    return rows


def _recorded_syncs(path: Path) -> tuple[float, str]:
    """Host syncs per step outside the readback in a recorded trace, and where the first one sits."""
    ev = trace.events(path)
    calls = syncs.sync_calls(ev)
    step = calls[~calls.readback]
    return syncs.counts_per_step(ev, calls)["syncs_per_step"], (step.site.iloc[0] if len(step) else "")


def strategy_rows() -> list[list[str]]:
    """Every strategy of the table: lint's finding on its function, and the syncs its recorded H200 trace holds."""
    from dspark_lab import strategies

    rows = []
    for name in strategy_table.names():
        fn = strategies.get(name).fn
        f = next((f for f in findings_of(inspect.getsourcefile(fn)) if f.function == fn.__name__), None)
        lint = f"line {f.line} `{f.rule}`" if f else "none"
        path = recorded_trace(name)
        if path is None:
            rows.append([name, lint, "no recorded trace", "static" if f else "neither",
                         "no recorded H200 trace of it in tests/fixtures/traces"])
            continue
        n, site = _recorded_syncs(path)
        by = "both" if f and n else "static" if f else "runtime" if n else "neither"
        why = {"static": f"no sync in the recorded steps: {RULES[f.rule].runtime if f else ''}",
               "runtime": "lint found no sync shape here", "both": "", "neither": ""}[by]
        rows.append([name, lint, f"{n:g} per step" + (f" ({site})" if site else ""), by, why])
    return rows


def known_idle_rows() -> list[list[str]]:
    """The known-cost steps (gallery/known_idle.py): each wait made by the function of its form
    (`wait_call`), run once per documented sync."""
    findings = findings_of(inspect.getsourcefile(known_idle))
    rows = []
    for path in sorted((FIXTURES / "known_idle_h200").glob("*.json.gz")):
        case = known_idle.get(path.name.split(".")[0])
        found = [f for f in findings if f.function == case.wait]
        lines = ", ".join(f"line {f.line} `{f.rule}`" for f in found) or "none"
        n, _ = _recorded_syncs(path)
        rows.append([case.name, case.wait, str(case.waits_per_step), f"{n:g}", lines,
                     "both" if found and n else "runtime" if n else "static"])
    return rows


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(map(esc, r)) + " |" for r in rows]


INTRO = """# dspark-lab lint: host syncs found before they run

`dspark-lab lint PATH...` reads Python source (files, and every `*.py` under folders) and reports each
line that makes the host wait for the GPU when it runs: `file:line:col: rule: what; fix: the one-line fix
the gallery teaches`. It reads the AST only: no torch import, no GPU (an import-linter contract keeps
the `dspark_lab.lint` package torch-free). Inside a function it follows a tensor through local names
(`a = torch.tensor(n)`, `b = a + 1`, `b.to(dev, non_blocking=True)` is a pageable copy), as vLLM #56203
does for its linter.

Exit status: **0** no finding (lines marked by design do not count); **1** findings (for CI and the
pre-commit hook); **2** bad input: a path that does not exist, or a file that does not parse. A syntax
error fails the check rather than passing the file unread: a hook that skips what it cannot read would
let the sync it was meant to stop through. `--json` prints every finding (by-design ones too);
`--show-exempt` lists the by-design lines with their reasons.

What it cannot know from the source, and how it decides:
- **Types.** Where a value lives comes from how the function made it (`torch.tensor(x)` without
  `device=` is pageable host memory, `pin_memory=True` / `.pin_memory()` pinned, `.cuda()` /
  `.to(dev)` the GPU), else from its name, the convention the gallery and SGLang follow: `*_cpu`,
  `host_*`, `*pageable*` are host memory, `*pinned*` pinned, `*mask*` a boolean mask. An argument or an
  attribute with no such name is unknown, and an unknown value is flagged only where the call itself
  syncs on a tensor (`.item()`, `.tolist()`, `.cpu()`, `nonzero()`), never on a guess.
- **Modules without torch.** A module that never imports torch is not checked: pandas'
  `df[df.x == y]` and `float(s.sum())` look like tensor code and are not syncs.
- **Calls.** Each function is read on its own; a sync inside a callee is found where the callee is
  defined, if that file is linted.
"""

REASONS = """## Allowed syncs carry a reason

A sync that is there by design says why, in one of two places:
- in the source: `value = counts.item()  # sync-ok: the host sizes the output buffer`. `dspark-lab lint`
  reports the line as by design (exit 0); the runtime guard (`dspark_lab.guard.no_host_syncs`) reads the
  same comment on the line a witness names and allows the sync with that reason. The comment may sit on
  the first line of a statement that spans several. A bare `# sync-ok` (or `# sync-ok:` with nothing
  after it) exempts nothing and is itself a finding (`sync_ok_without_reason`): an allowed sync without
  a why is the entry nobody can review (vLLM's `# gpu-sync-ok: <reason>`, tokenspeed's
  `allow_host_sync(reason)` follow the same rule).
- in the allow-list: `no_host_syncs(allow=["lib/plan.py:120: the planner needs host lengths"])`,
  `dspark-lab inspect TARGET --allow 'read_back: the result wait after the next work is queued'`:
  `PATTERN: REASON`, PATTERN as before (a function name, or an fnmatch pattern on `path/file.py:LINE`
  or on the whole site). A PATTERN alone still allows, and is reported with "no reason given".

Every guard record (`HostSync.reason`), the guard's report, and `inspect` (its record's
`guard.reasons` and its report's "by-design syncs" lines) list the allowed syncs with their reasons.
"""

HOOK = """## The pre-commit hook

`.pre-commit-hooks.yaml` at the repository root declares the hook `dspark-lab-lint` (`language: python`,
`types: [python]`, entry `dspark-lab-lint`, the console script of `dspark_lab.lint.command`, which is
`dspark-lab lint` importing nothing but `dspark_lab.lint`): pre-commit passes the staged Python files'
names to it and fails the commit on exit 1 or 2. pre-commit installs the repository bare
(`pip install .`), and the bare package depends on nothing: the hook's environment holds no torch,
numpy or pandas (the kit is the `kit` extra). In a project's `.pre-commit-config.yaml`:

```yaml
repos:
  - repo: <this repository's URL>
    rev: <a tag or commit>
    hooks:
      - id: dspark-lab-lint
```

The suite runs the hook's entry the way pre-commit calls it, with the staged files as arguments in a
throwaway git repository, and once more with torch, numpy and pandas made unimportable
(tests/test_lint_cli.py).

## A second witness: torch._dynamo.explain

Where a step can be traced on CPU, `dspark_lab.measure.graph_breaks.graph_breaks(fn, *args)` lists the
graph breaks `torch._dynamo.explain` reports (`.item()`, data-dependent `nonzero`, `if tensor:`), with
their file and line: a witness with no GPU that needs torch. It cannot see a pageable copy (no graph
break; the rules table says which rules it sees), which is why `lint` itself stays torch-free.

## One answer from three witnesses

`dspark-lab inspect TARGET --lint` runs the linter over the target's folder and prints its findings
beside the runtime sites with their measured cost (host blocked, GPU idle caused), each line marked
found by **static**, **runtime** or **both**, and where only one saw it, why the other could not: a line
the measured steps did not run or that makes no sync call (a pageable host-to-device copy), or a
runtime site whose shape the source does not show (the index's dtype, a sync inside a library call).
A record made before its file was edited names lines that may hold other code today: a site whose
quoted code is now on another line is joined there, and says "recorded on other code: line 115 moved
to 155". The joined rows are kept in the record under `lint`.
"""


def render() -> str:
    rules = table(["rule", "finds", "fix (as the gallery teaches)", "at runtime", "graph break"],
                  [[f"`{r.id}`", r.finds, r.fix + "".join(f". On a line that opens with `{k}`, {why}" for k, why in r.withheld),
                    r.runtime, "yes" if r.graph_break else "no"] for r in RULES.values()])
    pit = pitfall_rows()
    found = sum(1 for r in pit if r[3] != "no")
    out = [INTRO, "## Rules", ""] + rules + ["", REASONS, HOOK,
           "## The gallery: every runtime sync line, and whether lint found it", "",
           f"The pitfalls' documented sync lines (their `# sync:` comments, which the gallery's GPU checks confirm "
           f"at runtime): lint finds {found} of {len(pit)}.", ""]
    out += table(["case", "runtime sync line", "code", "lint found it", "why not"], pit)
    out += ["", "## The gallery's fixes: what lint still finds in them", ""]
    out += table(["case", "fix", "finding", "why it is there"], fix_rows())
    out += ["", "## The kit's known-sync step functions", "",
            "The strategies, against the syncs their recorded H200 traces hold (tests/fixtures/traces):", ""]
    out += table(["strategy", "lint", "runtime (recorded H200 trace)", "found by", "why only one"], strategy_rows())
    out += ["", "The known-cost steps (gallery/known_idle.py), each wait made by the function of its form "
            "(`wait_call`), run once per documented sync, against their recorded H200 traces "
            "(tests/fixtures/known_idle_h200):", ""]
    out += table(["case", "form", "documented waits per step", "recorded waits per step", "lint", "found by"],
                 known_idle_rows())
    out += ["", "This page is written by `python -m scripts.lint_docs`; tests/test_lint_docs.py checks it is current.", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/lint.md is not what this would write")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{rel(DOC)} is not current: run python -m scripts.lint_docs", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {rel(DOC)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
