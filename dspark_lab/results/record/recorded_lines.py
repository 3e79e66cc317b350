"""Whether a recorded source line still holds the code it was recorded on.

A record names a sync by line ("gallery/cases.py:115") and quotes that line's text as `code`. When
the file is edited after the record was made, the number points at other code; the quoted text is
what finds the line today. Pure text: the caller reads today's file.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class Relocation:
    recorded: int  # the line the record names
    today: Optional[int]  # the line that holds the recorded code today; None: no line does

    @property
    def moved(self) -> bool:
        return self.today != self.recorded

    def note(self) -> str:
        """What a view says of the recorded line ("" where it still holds the recorded code)."""
        if not self.moved:
            return ""
        if self.today is None:
            return (f"recorded on other code: line {self.recorded} no longer holds the recorded code "
                    "and no line of today's file does")
        return f"recorded on other code: line {self.recorded} moved to {self.today}"


def relocate(code: str, line: int, today: Sequence[str]) -> Relocation:
    """Where the recorded `code` of `line` (1-based) is in today's lines: the line itself where it
    still holds it, else the nearest line holding the same text (ties: the later one)."""
    want = code.strip()
    if 1 <= line <= len(today) and today[line - 1].strip() == want:
        return Relocation(line, line)
    holding = [i + 1 for i, text in enumerate(today) if text.strip() == want]
    return Relocation(line, min(holding, key=lambda n: (abs(n - line), -n)) if holding else None)
