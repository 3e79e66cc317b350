"""A static finder of host syncs in Python source: `.item()`, `if tensor:`, `torch.tensor(x, device=)`,
pageable non-blocking copies and the other shapes the gallery teaches, found in the source before the
step runs (AST only: no torch import, no GPU). `lint_paths(paths)` returns findings; `# sync-ok: <reason>`
on a line exempts it; `dspark-lab lint` is the command and the pre-commit hook (docs/lint.md).
"""
from dspark_lab.lint.findings import Finding, LintInputError  # noqa: F401
from dspark_lab.lint.rules import RULES, Rule  # noqa: F401
from dspark_lab.lint.run import lint_paths, lint_source  # noqa: F401
