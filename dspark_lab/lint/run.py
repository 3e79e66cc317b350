"""Lint source text, files and folders: findings with their exemptions applied, and the input errors."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Optional, Union

from dspark_lab.lint import exempt, finder, source as bounded
from dspark_lab.lint.findings import Finding, LintInputError
from dspark_lab.lint.source import SkippedFile

SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", "build", "dist", ".ipynb_checkpoints"}


def lint_source(source: str, path: str = "<source>") -> list[Finding]:
    """Every finding of `source`; a line whose `# sync-ok: <reason>` (on it or on its statement's first
    line) gives a reason carries it as exempt. LintInputError when it does not parse, SkippedFile when
    it is nested past the depth limit (lint/source.py)."""
    tree = bounded.parse(source, path)
    source = source.removeprefix(bounded.BOM)
    try:
        return _findings(tree, source, path)
    except (RecursionError, MemoryError):  # the limit holds the walk well inside the stack; a backstop
        raise bounded.too_deep(path) from None


def _findings(tree: ast.Module, source: str, path: str) -> list[Finding]:
    lines = source.splitlines()
    marks = exempt.marks(source)
    starts = _statement_starts(tree)
    code = lambda n: lines[n - 1].strip() if 0 < n <= len(lines) else ""  # noqa: E731
    out = []
    for line, col, rule, function, statement in finder.find(tree):
        reason = marks.get(line) or marks.get(starts.get(line, line)) or ""
        out.append(Finding(path, line, col, rule, function, code(line), reason, statement))
    functions = _functions(tree)
    for line, reason in sorted(marks.items()):
        if not reason:
            out.append(Finding(path, line, 0, "sync_ok_without_reason", functions(line), code(line)))
    return sorted(out, key=lambda f: (f.line, f.col, f.rule))


def _statement_starts(tree: ast.Module) -> dict[int, int]:
    """line -> the first line of the innermost simple statement spanning it (a call over several lines)."""
    out: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not hasattr(node, "body") and node.end_lineno:
            for n in range(node.lineno, node.end_lineno + 1):
                out.setdefault(n, node.lineno)
    return out


def _functions(tree: ast.Module):
    spans = [(n.lineno, n.end_lineno, n.name) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def enclosing(line: int) -> str:
        inside = [s for s in spans if s[0] <= line <= s[1]]
        return max(inside, key=lambda s: s[0])[2] if inside else "<module>"
    return enclosing


def files(paths: Iterable[Union[str, Path]]) -> list[Path]:
    """The files to lint: each file given (whatever its suffix: pre-commit passes what it selected),
    and every *.py under each folder given (virtual environments, caches and hidden folders left out).
    LintInputError naming a path that does not exist."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*.py")
                          if not any(part in SKIP_DIRS or part.startswith(".") for part in f.relative_to(p).parts[:-1]))
        elif p.exists() or p.is_symlink():  # a FIFO or a device too: reading says why it is skipped
            out.append(p)
        else:
            raise LintInputError(f"{p}: no such file or folder (PATH must be a Python file or a folder of them)")
    return out


def lint_paths(paths: Iterable[Union[str, Path]], skipped: Optional[list[str]] = None) -> list[Finding]:
    """Findings of every file under `paths`, in path and line order. A file over a limit or not a
    regular file (SkippedFile) is noted in `skipped` (one line each) and the others are linted; without
    a list to note it in, it raises, so no caller passes a file it did not read as clean."""
    out = []
    for f in files(paths):
        try:
            out += lint_source(bounded.read_source(str(f)), str(f))
        except SkippedFile as e:
            if skipped is None:
                raise
            skipped.append(str(e))
    return out
