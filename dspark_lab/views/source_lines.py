"""The source line a recorded sync site names, found in this checkout (for the report's tables).

A run records where each sync happened as "path:line function" (sync debug mode) or
"path(line): function" (trace attribution). Lines move when the source is edited above them (an
import added at the top of strategies.py shifts every strategy), so a site is resolved by its
FUNCTION, and the recorded line is only trusted while it still lies in that function's code.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Optional

from dspark_lab.results.record.paths import PACKAGE_DIR
# Both forms the measurement writes: "path(line): function" (trace attribution) and
# "path:line function" (sync debug mode).
from dspark_lab.results.record.sync_sites import SITE as _SITE


def package_source(path: str, package_dir: Path = PACKAGE_DIR) -> Optional[Path]:
    """The file of this installed package that a recorded path names, or None.

    Only a .py file inside the package folder is ever opened: the path is taken from its last
    `dspark_lab/` component (recorded paths may come from another checkout), resolved (so `..` and
    links cannot lead out), and checked to lie under the package. Anything else is not read."""
    p = str(path).replace("\\", "/")
    if "dspark_lab/" not in p:
        return None
    rel = p.rsplit("dspark_lab/", 1)[1]
    root = Path(package_dir).resolve()
    try:
        cand = (root / rel).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if cand.suffix != ".py" or not cand.is_relative_to(root) or not cand.is_file():
        return None
    return cand


def _functions(src: str, name: str) -> list:
    """The function definitions called `name` (the last part of a dotted name) in `src`."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return []
    short = name.split(".")[-1]
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == short]


def _code_lines(fn) -> set:
    """The lines of `fn`'s body statements, its docstring left out (a shifted line that lands in
    the docstring or on the `def` line is not code that could have synced)."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return {ln for stmt in body for ln in range(stmt.lineno, stmt.end_lineno + 1)}


def _return_line(fn) -> Optional[int]:
    """The first line of `fn`'s last return statement that returns something."""
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None
               and not (isinstance(n.value, ast.Constant) and n.value.value is None)]
    return max((n.lineno for n in returns), default=None)


def sync_site_line(site: str, package_dir: Path = PACKAGE_DIR) -> Optional[dict]:
    """Resolve a recorded `sync_site` ("dspark_lab/strategies.py:25 device_direct", or
    "dspark_lab/strategies.py(25): device_direct") to the line in this package:
    {"site", "path", "line", "function", "code", "note"}; `line` is the line shown.

    The rule: the site names a function. The recorded line is shown while it lies in that function's
    code as it is now (a body statement, not its docstring or `def` line). Otherwise the source moved
    since the run, and the function's last `return` statement is shown: every strategy makes its
    tensor in its return statement, so that is the line that synced; `note` says the line moved.
    With no function named, the recorded line is shown as it is. `code` is None, and `note` says why,
    when the path is not a .py file inside the package (see package_source) or the function is gone."""
    if not site or not isinstance(site, str):
        return None
    m = _SITE.match(site.strip())
    out = {"site": site, "path": None, "line": None, "function": None, "code": None, "note": ""}
    if not m:
        return out
    path, line, func = m["path"], int(m["line"] or m["line2"]), m["func"].strip()
    out.update(path=path, line=line, function=func)
    src_path = package_source(path, package_dir)
    if src_path is None:
        out["note"] = "not a source file of the dspark_lab package"
        return out
    try:
        src = src_path.read_text()
    except (OSError, UnicodeDecodeError):
        out["note"] = "not readable"
        return out
    lines = src.splitlines()
    if func:
        fns = _functions(src, func)
        if not fns:
            out["note"] = f"{func} is no longer in {path}"
            return out
        if not any(line in _code_lines(fn) for fn in fns):
            moved = _return_line(fns[0])
            if moved is None:
                out["note"] = f"the source changed since this run: {func} is now at {path} lines {fns[0].lineno}-{fns[0].end_lineno}"
                return out
            out["note"] = f"recorded at line {line}; {func} has moved since: its return statement is line {moved}"
            line = moved
    if 1 <= line <= len(lines):
        out.update(line=line, code=lines[line - 1].strip())
    return out
