"""The facts (strategy table, run kinds, citations, wait kinds: every module of results/facts/)
import without pandas or any query module: in a fresh interpreter whose import system refuses
`pandas` and `dspark_lab.results.query`, each imports, and so does the recorded panel's first view;
the same refusal does stop an import of the query layer (so a pass means something); and the wing's
face still hands on its names (`from dspark_lab.results import Runs`), loaded when first asked for."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FACTS = sorted(f"dspark_lab.results.facts.{p.stem}" for p in (ROOT / "dspark_lab/results/facts").glob("*.py")
               if p.stem != "__init__")
REFUSED = ("pandas", "dspark_lab.results.query")

BLOCKER = textwrap.dedent("""
    import importlib.abc, json, sys
    REFUSED = {refused!r}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == r or name.startswith(r + ".") for r in REFUSED):
                raise ImportError(f"refused here: {{name}}")
            return None

    sys.meta_path.insert(0, Refuse())
    out = {{}}
    for module in {modules!r}:
        try:
            __import__(module)
            out[module] = "ok"
        except ImportError as e:
            out[module] = str(e)
    out["loaded"] = sorted(m for m in sys.modules if any(m == r or m.startswith(r + ".") for r in REFUSED))
    print(json.dumps(out))
""")


def imports_with_refusals(modules: list[str]) -> dict:
    code = BLOCKER.format(refused=REFUSED, modules=modules)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_there_are_facts_to_check():
    assert {"dspark_lab.results.facts.strategy_table", "dspark_lab.results.facts.run_kinds",
            "dspark_lab.results.facts.citations", "dspark_lab.results.facts.wait_kinds"} <= set(FACTS)


def test_every_fact_imports_with_pandas_and_the_query_layer_refused():
    out = imports_with_refusals(FACTS + ["dspark_lab.views.first_view"])
    assert {m: out[m] for m in FACTS + ["dspark_lab.views.first_view"]} == dict.fromkeys(
        FACTS + ["dspark_lab.views.first_view"], "ok")
    assert out["loaded"] == []


def test_the_refusal_bites_on_the_query_layer_and_on_the_face_s_runs():
    out = imports_with_refusals(["dspark_lab.results.query.runs", "dspark_lab.results.rules.noise"])
    assert "refused here: dspark_lab.results.query" in out["dspark_lab.results.query.runs"]
    assert "refused here: pandas" in out["dspark_lab.results.rules.noise"]


@pytest.mark.parametrize("name", ["Runs", "Headline", "REFERENCE", "ReferencePoint", "HEADLINE_RULE", "build_row",
                                  "DataWarning", "SchemaVersionError", "median_ci", "compare", "difference_text"])
def test_the_face_still_hands_on_each_name(name):
    import dspark_lab.results as results

    assert name in results.__all__ and name in dir(results)
    value = getattr(results, name)
    assert getattr(sys.modules[results._LAZY[name]], name) is value


def test_an_unknown_name_of_the_face_is_an_attribute_error():
    import dspark_lab.results as results

    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        results.Nope  # noqa: B018
