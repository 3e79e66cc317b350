"""Texts the kit prints name where a rule or module lives (`results.rules.noise.RULE`): every such
name in the package's strings (help, rule lines, messages, docstrings) must resolve to a module or an
attribute today, so a name left behind by a move is caught where it is written."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import dspark_lab

PACKAGE = Path(dspark_lab.__file__).parent
CITED = re.compile(r"(?<![\w/])results\.[a-z_]+(?:\.[A-Za-z_]+)*")


def resolves(dotted: str) -> bool:
    """The longest importable module prefix of dspark_lab.<dotted>, then attributes for the rest."""
    parts = f"dspark_lab.{dotted}".split(".")
    for i in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def cited_names():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in CITED.findall(node.value):
                    yield path.relative_to(PACKAGE.parent), name


def test_every_results_name_the_package_cites_exists():
    names = list(cited_names())
    assert len(names) > 20  # the scan reads the package's strings
    assert [(str(p), n) for p, n in names if not resolves(n)] == []


def test_the_printed_headline_rule_names_where_the_trial_rules_live():
    from dspark_lab.results import HEADLINE_RULE
    from dspark_lab.results.rules import noise

    assert "results.rules.noise.RULE" in HEADLINE_RULE and "results.rules.noise.RUN_RULE" in HEADLINE_RULE
    assert noise.RULE and noise.RUN_RULE
