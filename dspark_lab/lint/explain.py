"""Why the static finder has no finding on a line that synced at runtime: what on the line it could
not know from the source alone. The joined view (`inspect --lint`, docs/lint.md) prints it."""
from __future__ import annotations

import ast
from typing import Optional

from dspark_lab.lint import flow as F
from dspark_lab.lint.findings import LintInputError
from dspark_lab.lint.source import parse


def _statement_at(tree: ast.Module, line: int) -> Optional[ast.stmt]:
    best = None
    for n in ast.walk(tree):
        if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno) and not hasattr(n, "body"):
            if best is None or n.lineno >= best.lineno:
                best = n
    return best


def why_not_found(source: str, line: int) -> str:
    """One sentence: why no rule matched `line` of `source`."""
    try:
        tree = parse(source, "<source>")
    except LintInputError:  # a syntax error, or nested past lint's depth limit
        return "the file does not parse within lint's limits, so it could not be read"
    stmt = _statement_at(tree, line)
    if stmt is None:
        return "the line holds no statement (a def line: the sync is somewhere in the function's body, named by a witness that sees only functions)"
    for n in ast.walk(stmt):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, (ast.Name, ast.Attribute)):
            return (f"`{ast.unparse(n)}` indexes with `{ast.unparse(n.slice)}`, whose dtype is not in the source "
                    "(a boolean mask syncs; an integer index does not)")
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("copy_", "to") \
                and F.is_true(F.keyword(n, "non_blocking")):
            return f"`{ast.unparse(n)}`: whether the host buffer is pinned or pageable is not in the source"
    calls = [ast.unparse(n.func) for n in ast.walk(stmt) if isinstance(n, ast.Call)]
    if calls:
        return (f"the sync is inside a call (`{calls[0]}()`): lint reads each function on its own and does not "
                "follow calls into other functions or libraries")
    return "no rule matches the line's shape"
