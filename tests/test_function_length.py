"""No function in the package is longer than 50 lines (its def through its last line), so each one
reads on one screen; the check itself is shown to catch a long function."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dspark_lab"
MAX_LINES = 50


def long_functions(root: Path, max_lines: int = MAX_LINES) -> list[str]:
    """'path:line name (n lines)' for every function or method under `root` longer than `max_lines`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > max_lines:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_in_the_package_is_longer_than_50_lines():
    too_long = long_functions(PACKAGE)
    assert not too_long, "functions over 50 lines:\n" + "\n".join(too_long)


def test_the_check_finds_a_long_function_and_passes_a_short_one(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))  # with its def: exactly the limit
    (pkg / "short.py").write_text(f"def short():\n{body}\n")
    (pkg / "long.py").write_text(f"class C:\n    async def long(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
                                 "        return 1\n")
    assert long_functions(pkg) == ["pkg/long.py:2 long (51 lines)"]
