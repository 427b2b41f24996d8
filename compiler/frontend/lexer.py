"""Lexer: kernel source text -> tokens with spans.

Newlines end statements, so they are tokens too, except inside ( ) and [ ] where a long
parameter list or slice may wrap. `;` is accepted as a statement end as well. `//` starts a
comment that runs to the end of the line.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.frontend.diagnostics import CompileError
from compiler.frontend.source import Span

KEYWORDS = frozenset("kernel let var for in range and or not ctx tensor tile true false inf".split())

# Longest first, so that `:+` wins over `:` and `<=` over `<`.
OPERATORS = (
    ":+",
    "==",
    "!=",
    "<=",
    ">=",
    "+=",
    "-=",
    "*=",
    "/=",
    "->",
    "+",
    "-",
    "*",
    "/",
    "%",
    "<",
    ">",
    "=",
    ":",
    ",",
    ".",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "@",
    ";",
)

_OPEN = {"(": ")", "[": "]"}
_CLOSE = {")", "]"}


@dataclass(frozen=True)
class Token:
    """kind: "ident", "keyword", "int", "float", "op", "newline" or "eof"."""

    kind: str
    text: str
    span: Span
    offset: int  # character offset of the token's start in the source text
    end_offset: int

    def is_op(self, text: str) -> bool:
        return self.kind == "op" and self.text == text

    def is_keyword(self, text: str) -> bool:
        return self.kind == "keyword" and self.text == text


def tokenize(text: str, filename: str) -> list[Token]:
    return _Lexer(text, filename).run()


class _Lexer:
    def __init__(self, text: str, filename: str):
        self.text = text
        self.file = filename
        self.pos = 0
        self.line = 1
        self.line_start = 0
        self.tokens: list[Token] = []
        self.brackets: list[Token] = []  # open ( and [ whose newlines are ignored

    def span(self, start: int, end: int) -> Span:
        col = start - self.line_start + 1
        return Span(self.file, self.line, col, self.line, col + (end - start))

    def emit(self, kind: str, start: int, end: int) -> None:
        self.tokens.append(Token(kind, self.text[start:end], self.span(start, end), start, end))

    def run(self) -> list[Token]:
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c == "\n":
                if not self.brackets:
                    self.emit("newline", self.pos, self.pos + 1)
                self.pos += 1
                self.line += 1
                self.line_start = self.pos
            elif c in " \t\r":
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            elif c.isalpha() or c == "_":
                self.identifier()
            elif c.isdigit() or (c == "." and self.pos + 1 < len(text) and text[self.pos + 1].isdigit()):
                self.number()
            else:
                self.operator()
        if self.brackets:
            open_tok = self.brackets[-1]
            raise CompileError(
                open_tok.span,
                f"unclosed '{open_tok.text}': the file ends before its '{_OPEN[open_tok.text]}'",
            )
        self.emit("newline", self.pos, self.pos)
        self.emit("eof", self.pos, self.pos)
        return self.tokens

    def identifier(self) -> None:
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] == "_"):
            self.pos += 1
        word = self.text[start : self.pos]
        self.emit("keyword" if word in KEYWORDS else "ident", start, self.pos)

    def number(self) -> None:
        text, start = self.text, self.pos
        pos = start
        while pos < len(text) and text[pos].isdigit():
            pos += 1
        is_float = False
        if pos < len(text) and text[pos] == "." and not text.startswith("..", pos):
            is_float = True
            pos += 1
            while pos < len(text) and text[pos].isdigit():
                pos += 1
        if pos < len(text) and text[pos] in "eE":
            exp = pos + 1
            if exp < len(text) and text[exp] in "+-":
                exp += 1
            if exp < len(text) and text[exp].isdigit():
                is_float = True
                pos = exp
                while pos < len(text) and text[pos].isdigit():
                    pos += 1
            else:
                raise CompileError(self.span(start, exp), "malformed number: exponent has no digits")
        if pos < len(text) and (text[pos].isalpha() or text[pos] == "_"):
            end = pos
            while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                end += 1
            raise CompileError(self.span(start, end), f"malformed number '{text[start:end]}'")
        self.pos = pos
        self.emit("float" if is_float else "int", start, pos)

    def operator(self) -> None:
        for op in OPERATORS:
            if self.text.startswith(op, self.pos):
                start = self.pos
                self.pos += len(op)
                self.emit("op", start, self.pos)
                tok = self.tokens[-1]
                if op in _OPEN:
                    self.brackets.append(tok)
                elif op in _CLOSE:
                    if not self.brackets or _OPEN[self.brackets[-1].text] != op:
                        raise CompileError(
                            tok.span,
                            f"unexpected '{op}'"
                            + (
                                f": the open '{self.brackets[-1].text}' is not closed yet"
                                if self.brackets
                                else " with nothing open"
                            ),
                        )
                    self.brackets.pop()
                return
        c = self.text[self.pos]
        if c in "\"'":
            raise CompileError(self.span(self.pos, self.pos + 1), "strings are not part of the language")
        raise CompileError(self.span(self.pos, self.pos + 1), f"unexpected character {c!r}")
