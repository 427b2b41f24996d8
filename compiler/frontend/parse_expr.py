"""Expression parsing, shared by the statement parser (compiler/frontend/parser.py).

`TokenStream` holds the token helpers; `ExprParser` parses expressions by precedence, lowest
first: `or`, `and`, `not`, comparisons, `+ -`, `* / %`, unary `-`, postfix (call, index), atoms.
`:+` and `:` exist only inside the brackets of a tensor index.

Depth limits (docs/language.md, "Limits"): the parser and every later stage recurse over the
tree, so a kernel nested deeper than these would end in Python's RecursionError; it ends in a
`file:line:col` error at the first token past the limit instead. MAX_NESTING counts open
brackets `(` `[` `{`, calls, indexes and unary operators around a token; MAX_EXPR_DEPTH is the
height of one expression's tree (`a + b + ... + z` is a chain of that many operators).
"""

from __future__ import annotations

import contextlib
import math

from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.lexer import Token
from compiler.frontend.source import Span
from compiler.frontend.walk import child_exprs

COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
MAX_NESTING = 32
MAX_EXPR_DEPTH = 64


class TokenStream:
    def __init__(self, tokens: list[Token], text: str, filename: str):
        self.tokens = tokens
        self.text = text
        self.file = filename
        self.i = 0
        self.nesting = 0  # open brackets, blocks, calls and unary operators around self.tok
        self.in_expr = False  # parsing inside an expression, whose outermost expr() measures it

    # ---- token helpers ----------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, n: int = 1) -> Token:
        return self.tokens[min(self.i + n, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    def prev_span(self) -> Span:
        return self.tokens[self.i - 1].span

    def describe(self, tok: Token) -> str:
        if tok.kind == "eof":
            return "the end of the file"
        if tok.kind == "newline":
            return "the end of the line"
        return f"'{tok.text}'"

    def fail(self, expected: str, tok: Token | None = None) -> CompileError:
        tok = tok or self.tok
        return CompileError(tok.span, f"expected {expected}, found {self.describe(tok)}")

    def expect_op(self, text: str, what: str | None = None) -> Token:
        if not self.tok.is_op(text):
            raise self.fail(what or f"'{text}'")
        return self.advance()

    def expect_keyword(self, text: str) -> Token:
        if not self.tok.is_keyword(text):
            raise self.fail(f"'{text}'")
        return self.advance()

    def expect_ident(self, what: str = "a name") -> Token:
        if self.tok.kind != "ident":
            raise self.fail(what)
        return self.advance()

    @contextlib.contextmanager
    def nested(self, tok: Token):
        """One level of nesting opened at `tok`: past MAX_NESTING a user error, not a RecursionError."""
        if self.nesting >= MAX_NESTING:
            raise CompileError(
                tok.span,
                f"nested too deeply: more than {MAX_NESTING} levels of brackets, blocks, calls "
                "and unary operators (see Limits in docs/language.md)",
            )
        self.nesting += 1
        try:
            yield
        finally:
            self.nesting -= 1

    def skip_newlines(self) -> None:
        while self.tok.kind == "newline" or self.tok.is_op(";"):
            self.advance()


class ExprParser(TokenStream):
    # ---- expressions ------------------------------------------------------------------------

    def expr(self) -> ir.Expr:
        if self.in_expr:
            return self.or_expr()
        first = self.tok
        self.in_expr = True
        try:
            tree = self.or_expr()
        finally:
            self.in_expr = False
        if expr_depth(tree) > MAX_EXPR_DEPTH:
            raise CompileError(
                first.span.to(self.prev_span()),
                f"expression too deep: more than {MAX_EXPR_DEPTH} operators nested in one expression; "
                "split it with 'let' (see Limits in docs/language.md)",
            )
        return tree

    def binary_level(self, next_level, ops: tuple[str, ...], keyword: bool = False) -> ir.Expr:
        lhs = next_level()
        while (self.tok.kind == ("keyword" if keyword else "op")) and self.tok.text in ops:
            op = self.advance().text
            rhs = next_level()
            lhs = ir.BinOp(op=op, lhs=lhs, rhs=rhs, span=lhs.span.to(rhs.span))
        return lhs

    def or_expr(self) -> ir.Expr:
        return self.binary_level(self.and_expr, ("or",), keyword=True)

    def and_expr(self) -> ir.Expr:
        return self.binary_level(self.not_expr, ("and",), keyword=True)

    def not_expr(self) -> ir.Expr:
        if self.tok.is_keyword("not"):
            kw = self.advance()
            with self.nested(kw):
                operand = self.not_expr()
            return ir.UnaryOp(op="not", operand=operand, span=kw.span.to(operand.span))
        return self.comparison()

    def comparison(self) -> ir.Expr:
        lhs = self.additive()
        if self.tok.kind == "op" and self.tok.text in COMPARISONS:
            op = self.advance().text
            rhs = self.additive()
            lhs = ir.BinOp(op=op, lhs=lhs, rhs=rhs, span=lhs.span.to(rhs.span))
            if self.tok.kind == "op" and self.tok.text in COMPARISONS:
                raise CompileError(self.tok.span, "comparisons do not chain; combine them with 'and'")
        return lhs

    def additive(self) -> ir.Expr:
        return self.binary_level(self.multiplicative, ("+", "-"))

    def multiplicative(self) -> ir.Expr:
        return self.binary_level(self.unary, ("*", "/", "%"))

    def unary(self) -> ir.Expr:
        if self.tok.is_op("-"):
            minus = self.advance()
            with self.nested(minus):
                operand = self.unary()
            span = minus.span.to(operand.span)
            if isinstance(operand, ir.Const) and not isinstance(operand.value, bool) and not operand.origin:
                return ir.Const(value=-operand.value, span=span)
            return ir.UnaryOp(op="-", operand=operand, span=span)
        return self.postfix()

    def postfix(self) -> ir.Expr:
        tok = self.tok
        if tok.kind == "ident" and self.peek().is_op("["):
            self.advance()
            with self.nested(self.tok):
                index, close = self.index()
            return ir.Load(tensor=tok.text, index=index, span=tok.span.to(close.span))
        if tok.kind == "ident" and self.peek().is_op("("):
            with self.nested(self.peek()):
                return self.call()
        if tok.is_op("(") or tok.is_op("["):
            with self.nested(tok):
                return self.atom()
        return self.atom()

    def call(self) -> ir.Expr:
        name = self.advance()
        self.expect_op("(")
        args: list[ir.Expr] = []
        kwargs: list[tuple[str, ir.Expr, Span]] = []
        if not self.tok.is_op(")"):
            while True:
                if self.tok.kind == "ident" and self.peek().is_op("="):
                    key = self.advance()
                    self.advance()
                    if any(k == key.text for k, _, _ in kwargs):
                        raise CompileError(key.span, f"keyword argument '{key.text}' given twice")
                    kwargs.append((key.text, self.expr(), key.span))
                else:
                    if kwargs:
                        raise CompileError(
                            self.tok.span, "a positional argument cannot follow a keyword argument"
                        )
                    args.append(self.expr())
                if not self.tok.is_op(","):
                    break
                self.advance()
        close = self.expect_op(")", "',' or ')'")
        span = name.span.to(close.span)
        if name.text == "load":
            return self.load_call(args, kwargs, span)
        return ir.Call(
            func=name.text, args=tuple(args), span=span, kwargs=tuple((k, v) for k, v, _ in kwargs)
        )

    def load_call(self, args, kwargs, span: Span) -> ir.Load:
        if len(args) != 1 or not isinstance(args[0], ir.Load):
            raise CompileError(span, "load takes one tensor slice, as in load(T[i :+ B], fill = 0.0)")
        fill = None
        for key, value, key_span in kwargs:
            if key != "fill":
                raise CompileError(key_span, f"load has no argument '{key}' (known: fill)")
            fill = value
        inner = args[0]
        return ir.Load(tensor=inner.tensor, index=inner.index, span=span, fill=fill)

    def index(self) -> tuple[tuple[ir.SliceItem, ...], Token]:
        self.expect_op("[")
        items = [self.slice_item()]
        while self.tok.is_op(","):
            self.advance()
            items.append(self.slice_item())
        close = self.expect_op("]", "',' or ']' in the index")
        return tuple(items), close

    def slice_item(self) -> ir.SliceItem:
        if self.tok.is_op(":"):
            return ir.SliceAll(span=self.advance().span)
        if self.tok.is_op(",") or self.tok.is_op("]") or self.tok.is_op(":+"):
            raise self.fail("an index, a slice 'start :+ extent' or ':'")
        start = self.expr()
        if self.tok.is_op(":+"):
            self.advance()
            if self.tok.is_op(",") or self.tok.is_op("]"):
                raise self.fail("the slice's extent after ':+'")
            extent = self.expr()
            return ir.SliceRange(start=start, extent=extent, span=start.span.to(extent.span))
        if self.tok.is_op(":"):
            raise CompileError(
                self.tok.span, "slices are written 'start :+ extent' (or ':' for the whole axis)"
            )
        return ir.SliceIndex(index=start, span=start.span)

    def atom(self) -> ir.Expr:
        tok = self.tok
        if tok.kind == "int":
            self.advance()
            return ir.Const(value=int(tok.text), span=tok.span)
        if tok.kind == "float":
            self.advance()
            return ir.Const(value=float(tok.text), span=tok.span)
        if tok.is_keyword("inf"):
            self.advance()
            return ir.Const(value=math.inf, span=tok.span)
        if tok.is_keyword("true") or tok.is_keyword("false"):
            self.advance()
            return ir.Const(value=tok.text == "true", span=tok.span)
        if tok.kind == "ident":
            self.advance()
            return ir.Name(name=tok.text, span=tok.span)
        if tok.is_keyword("ctx"):
            self.advance()
            self.expect_op(".", "'.block' or '.origin' after 'ctx'")
            field = self.expect_ident("'block' or 'origin' after 'ctx.'")
            if field.text not in ("block", "origin"):
                raise CompileError(field.span, f"ctx has no field '{field.text}' (known: block, origin)")
            self.expect_op(".", f"'.x', '.y' or '.z' after 'ctx.{field.text}'")
            axis = self.expect_ident("'x', 'y' or 'z'")
            if axis.text not in ("x", "y", "z"):
                raise CompileError(axis.span, f"ctx.{field.text} has no axis '{axis.text}' (known: x, y, z)")
            span = tok.span.to(axis.span)
            if field.text == "origin":
                return ir.Const(value=0, span=span, origin=axis.text)
            return ir.BlockIndex(axis=axis.text, span=span)
        if tok.is_op("("):
            self.advance()
            inner = self.expr()
            self.expect_op(")", "')'")
            return inner
        if tok.is_op("["):
            self.advance()
            items = [self.expr()]
            while self.tok.is_op(","):
                self.advance()
                items.append(self.expr())
            close = self.expect_op("]", "',' or ']'")
            return ir.ShapeList(items=tuple(items), span=tok.span.to(close.span))
        raise self.fail("an expression")


def expr_depth(tree: ir.Expr) -> int:
    """The height of an expression's tree (a leaf is 1), walked without recursion: the tree may be
    a long operator chain that later stages, which do recurse, must never see."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in child_exprs(node))
    return deepest
