"""Lint's fixes under the race check: which fix goes with which gallery case (lint finds the rule on
the case's documented sync line; the fix applied is the case's fix function, its source kept), every
rule paired or said why not, a case found by several rules run once, the check counting the wrong
values of a synthetic racy fix, every paired fix running over steps of changing values on the CPU,
and on CUDA 0 wrong values for each (tests marked `cuda`)."""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dspark_lab.gallery import lint_fixes as L
from dspark_lab.gallery import registry
from dspark_lab.gallery.registry import Case
from dspark_lab.lint import RULES, lint_source
from dspark_lab.measure import races
from helpers import FakeStream, stream_hooks

ROOT = Path(__file__).resolve().parents[1]
PAIRS = L.pairings()


def test_each_pairing_is_a_rule_lint_finds_on_the_cases_documented_sync_line():
    assert PAIRS, "no rule paired with a case"
    for p in PAIRS:
        case = registry.get(p.case)
        assert p.site in case.sites()
        path, line = p.site.split(" ")[0].rsplit(":", 1)
        fn = next(f for f in (case.step, *case.helpers) if f.__name__ == p.site.split(" ", 1)[1])
        found = {(f.line, f.rule) for f in lint_source(Path(inspect.getsourcefile(fn)).read_text())}
        assert (int(line), p.rule) in found, p
        assert p.fix == case.fix.__name__ and p.source.lstrip().startswith(f"def {p.fix}(")
        assert p.lint_fix == RULES[p.rule].fix or p.lint_fix in dict(RULES[p.rule].withheld).values()


def test_the_first_cases_pair_as_the_gallery_teaches():
    pairs = {(p.rule, p.case) for p in PAIRS}
    assert {("item", "scalar_item"), ("tensor_condition", "tensor_bool"), ("to_host", "host_plan"),
            ("tolist", "host_split_sizes"), ("unpinned_non_blocking", "pageable_copy"),
            ("explicit_sync", "redundant_stream_sync")} <= pairs
    assert "def seq_lens_to_pinned(" in next(p.source for p in PAIRS if p.case == "pageable_copy")


def test_every_rule_is_paired_or_says_why_not():
    missing = L.unpaired(PAIRS)
    assert set(missing) | {p.rule for p in PAIRS} == set(RULES) and not set(missing) & {p.rule for p in PAIRS}
    assert missing["sync_ok_without_reason"] == L.NO_CODE
    only_item = [p for p in PAIRS if p.rule == "item"]
    assert set(L.unpaired(only_item)) == set(RULES) - {"item"}


def test_a_case_found_by_several_rules_is_run_once_with_all_its_rules():
    ran = []
    out = L.check_all(PAIRS, lambda case: ran.append(case.name) or {"case": case.name})
    assert len(ran) == len(set(ran)) == len({p.case for p in PAIRS})
    by_case = {r["case"]: r["rules"] for r in out}
    for p in PAIRS:
        assert p.rule in by_case[p.case]




def _case(fix) -> Case:
    return Case("synthetic", "", fix, fix, "", "", 0, 0)


def test_the_check_counts_the_wrong_values_of_a_fix_that_refills_a_buffer_still_being_read():
    stream = FakeStream()
    staging = torch.zeros(8, dtype=torch.int64)

    def refills(s):
        staging.copy_(s.seq_lens_cpu)  # the host refills one staging buffer every step
        out = torch.zeros_like(staging)
        stream.enqueue(lambda: out.copy_(staging))  # its copy reads it when the stream gets there
        return out

    def fresh(s):
        buf = s.seq_lens_cpu.clone()
        out = torch.zeros_like(buf)
        stream.enqueue(lambda: out.copy_(buf))
        return out

    bad = L.check_fix(_case(refills), steps=5, scale="smoke", hooks=stream_hooks(stream))
    assert bad["checked"] and bad["races"] == 4 and bad["wrong"] == 4 * 8 and bad["of"] == 4 * 8
    good = L.check_fix(_case(fresh), steps=5, scale="smoke", hooks=stream_hooks(stream))
    assert good["wrong"] == 0 and good["races"] == 0


def test_every_paired_fix_runs_over_steps_of_changing_values_on_the_cpu():
    plain = races.Hooks(ahead=lambda: None, sync=lambda: None)
    for name in {p.case for p in PAIRS}:
        r = L.check_fix(registry.get(name), steps=3, scale="smoke", hooks=plain)
        assert r["checked"] and r["wrong"] == 0, (name, r)


def test_the_study_dry_run_writes_its_pairings_and_table(tmp_path):
    r = subprocess.run([sys.executable, "-m", "studies.hazards.lint_fixes_races", "--cpu-dry-run", "--steps", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    [path] = (tmp_path / "lint-fixes-cpu-dry-run").glob("*-lint-fixes-races-*.json")
    study = json.loads(path.read_text())
    assert [p["case"] for p in study["pairings"]] == [p.case for p in PAIRS]
    assert set(study["unpaired"]) == set(L.unpaired(PAIRS))
    assert "CPU dry run: nothing can race here" in r.stdout and "scalar_item" in r.stdout


def test_without_cuda_the_study_stops_with_a_message(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    r = subprocess.run([sys.executable, "-m", "studies.hazards.lint_fixes_races"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path)})
    assert r.returncode == 2 and "no CUDA" in r.stderr and not list(tmp_path.iterdir())


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted({p.case for p in PAIRS}))
def test_on_cuda_each_lint_fix_applied_to_its_case_gives_no_wrong_value(name):
    r = L.check_fix(registry.get(name), steps=20)
    assert r["checked"] and r["wrong"] == 0, races.describe(r["report"])
