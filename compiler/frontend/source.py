"""Source text and spans: every IR node points back at the user's characters."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A range of characters in a source file; lines and columns start at 1, `end_col` is exclusive."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def to(self, other: Span) -> Span:
        """The span from the start of this one to the end of `other`."""
        return Span(self.file, self.line, self.col, other.end_line, other.end_col)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


UNKNOWN_SPAN = Span("<unknown>", 0, 0, 0, 0)
