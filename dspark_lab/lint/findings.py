"""A finding, and the error for input the finder cannot read."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from dspark_lab.lint.rules import fix_for, get


class LintInputError(ValueError):
    """A path that does not exist or a file that does not parse: nothing could be checked there."""


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    col: int
    rule: str
    function: str  # the enclosing function ("<module>" at top level)
    code: str  # the line's source, stripped
    exempt_reason: str = ""  # the reason of a `# sync-ok: <reason>` on the line; "" when not exempt
    statement: str = ""  # a condition's statement keyword ("if", "while", "assert"), from the tree

    @property
    def exempt(self) -> bool:
        return bool(self.exempt_reason)

    @property
    def fix(self) -> str:
        """The rule's fix for this line, or why none is offered here (rules.fix_for)."""
        return fix_for(self.rule, self.code, self.statement)

    def describe(self) -> str:
        r = get(self.rule)
        return f"{self.path}:{self.line}:{self.col + 1}: {self.rule}: {r.finds} in {self.function}; fix: {self.fix}"

    def to_dict(self) -> dict:
        r = get(self.rule)
        d = asdict(self)
        d.pop("statement")  # read into the fix; the record's fields stay as documented
        return {**d, "fix": self.fix, "finds": r.finds, "runtime": r.runtime, "graph_break": r.graph_break}
