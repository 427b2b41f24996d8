"""Compile errors, rendered in one place as `file:line:col: error: message`, the line and a caret."""

from __future__ import annotations

from common.errors import UserError
from compiler.frontend.source import Span

# Source texts by file name, registered by whoever reads a kernel file, so that an error raised
# deep in a later stage can still show the user's line.
_SOURCES: dict[str, str] = {}


def register_source(name: str, text: str) -> None:
    _SOURCES[name] = text


class CompileError(UserError):
    """A mistake in a kernel, pointing at the span of source that causes it."""

    def __init__(self, span: Span, message: str, note: str | None = None):
        super().__init__(message)
        self.span = span
        self.message = message
        self.note = note

    def render(self) -> str:
        s = self.span
        out = [f"{s.file}:{s.line}:{s.col}: error: {self.message}"]
        text = _SOURCES.get(s.file)
        if text is not None and s.line >= 1:
            lines = text.splitlines()
            if s.line <= len(lines):
                src = lines[s.line - 1]
                width = (s.end_col - s.col) if s.end_line == s.line else len(src) - s.col + 1
                out.append(src)
                out.append(" " * (s.col - 1) + "^" * max(1, width))
        if self.note:
            out.append(f"note: {self.note}")
        return "\n".join(out)
