"""Parser: tokens -> an unchecked ir.Module (every `ty` None, every Name.kind None).

Recursive descent over the grammar in docs/language.md. Precedence, lowest first:
`or`, `and`, `not`, comparisons, `+ -`, `* / %`, unary `-`, postfix (call, index), atoms.
`:+` and `:` exist only inside the brackets of a tensor index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler import ir
from compiler.diagnostics import CompileError
from compiler.lexer import Token, tokenize
from compiler.source import Span

STORAGE_DTYPES = ("f32", "f16", "bf16", "i32")
SCALAR_PARAM_DTYPES = ("f32", "i32")
VAR_DTYPES = ("f32", "i32", "bool")
ASSIGN_OPS = ("=", "+=", "-=", "*=", "/=")
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
ATTRIBUTE_NAMES = ("autotune", "cluster", "aligned", "launch")


def parse(text: str, filename: str) -> ir.Module:
    tokens = tokenize(text, filename)
    return _Parser(tokens, text, filename).module()


def expand_search_values(written: tuple[int, ...]) -> tuple[int, ...]:
    """One value: fixed. Two: inclusive bounds in doubling steps (hi added if not reached).
    Three or more: the explicit list."""
    if len(written) != 2:
        return written
    lo, hi = written
    values = []
    v = lo
    while v <= hi:
        values.append(v)
        v *= 2
    if values[-1] != hi:
        values.append(hi)
    return tuple(values)


class _Parser:
    def __init__(self, tokens: list[Token], text: str, filename: str):
        self.tokens = tokens
        self.text = text
        self.file = filename
        self.i = 0

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

    def skip_newlines(self) -> None:
        while self.tok.kind == "newline" or self.tok.is_op(";"):
            self.advance()

    # ---- module, kernels, attributes --------------------------------------------------------

    def module(self) -> ir.Module:
        kernels = []
        self.skip_newlines()
        while self.tok.kind != "eof":
            kernels.append(self.kernel())
            self.skip_newlines()
        return ir.Module(file=self.file, text=self.text, kernels=tuple(kernels))

    def kernel(self) -> ir.Kernel:
        first = self.tok
        attributes = []
        while self.tok.is_op("@"):
            attributes.append(self.attribute())
            self.skip_newlines()
        if not self.tok.is_keyword("kernel"):
            raise self.fail("'kernel' or an attribute '@...'")
        self.advance()
        name = self.expect_ident("the kernel's name").text
        self.expect_op("(")
        params = []
        if not self.tok.is_op(")"):
            params.append(self.param())
            while self.tok.is_op(","):
                self.advance()
                params.append(self.param())
        self.expect_op(")", "',' or ')' after a parameter")
        body, close = self.block()
        return ir.Kernel(
            name=name,
            params=tuple(params),
            attributes=tuple(attributes),
            body=body,
            span=first.span.to(close.span),
            source=self.text[first.offset : close.end_offset],
        )

    def attribute(self) -> ir.Attribute:
        at = self.advance()
        name_tok = self.expect_ident("an attribute name after '@'")
        name = name_tok.text
        if name not in ATTRIBUTE_NAMES:
            raise CompileError(
                name_tok.span,
                f"unknown attribute '@{name}' (known: " + ", ".join("@" + a for a in ATTRIBUTE_NAMES) + ")",
            )
        self.expect_op("(", f"'(' after '@{name}'")
        if name in ("autotune", "cluster"):
            entries = self.comma_list(self.search_dim)
            close = self.expect_op(")", "',' or ')'")
            node = ir.Autotune if name == "autotune" else ir.Cluster
            return node(dims=tuple(entries), span=at.span.to(close.span))
        if name == "aligned":
            pairs = self.comma_list(self.aligned_pair)
            close = self.expect_op(")", "',' or ')'")
            return ir.Aligned(
                pairs=tuple((d, t) for d, t, _ in pairs),
                span=at.span.to(close.span),
                pair_spans=tuple(s for _, _, s in pairs),
            )
        # @launch(threads = 128) or @launch(128)
        if self.tok.kind == "ident" and self.peek().is_op("="):
            key = self.advance()
            if key.text != "threads":
                raise CompileError(key.span, f"unknown @launch argument '{key.text}' (known: threads)")
            self.advance()
        value = self.int_literal("the number of threads")
        close = self.expect_op(")")
        return ir.Launch(threads=value, span=at.span.to(close.span))

    def comma_list(self, item):
        if self.tok.is_op(")"):
            raise self.fail("at least one entry")
        items = [item()]
        while self.tok.is_op(","):
            self.advance()
            items.append(item())
        return items

    def int_literal(self, what: str) -> int:
        tok = self.tok
        negative = tok.is_op("-")
        if negative:
            self.advance()
        if self.tok.kind != "int":
            bad = self.tok
            if bad.kind == "float":
                raise CompileError(bad.span, f"{what} must be an integer, found '{bad.text}'")
            raise self.fail(f"{what} (an integer)")
        value = int(self.advance().text)
        return -value if negative else value

    def search_dim(self) -> ir.SearchDim:
        name = self.expect_ident("a tile name")
        self.expect_keyword("in")
        self.expect_op("[", "'[' starting the list of values")
        values = []
        if self.tok.is_op("]"):
            raise CompileError(name.span.to(self.tok.span), f"'{name.text}' has an empty list of values")
        while True:
            start = self.tok
            v = self.int_literal(f"a value of '{name.text}'")
            if v <= 0:
                raise CompileError(
                    start.span.to(self.prev_span()), f"values of '{name.text}' must be positive, found {v}"
                )
            values.append(v)
            if not self.tok.is_op(","):
                break
            self.advance()
        close = self.expect_op("]", "',' or ']'")
        span = name.span.to(close.span)
        written = tuple(values)
        if len(written) == 2 and written[0] > written[1]:
            raise CompileError(
                span, f"'{name.text}' bounds are reversed: low {written[0]} > high {written[1]}"
            )
        if len(written) >= 3 and len(set(written)) != len(written):
            raise CompileError(span, f"'{name.text}' lists a value twice")
        return ir.SearchDim(name=name.text, written=written, values=expand_search_values(written), span=span)

    def aligned_pair(self) -> tuple[str, str, Span]:
        dim = self.expect_ident("a dimension name")
        self.expect_op("=", "'=' (as in M = TILE_M)")
        tile = self.expect_ident("a tile name")
        return dim.text, tile.text, dim.span.to(tile.span)

    def param(self) -> ir.Param:
        name = self.expect_ident("a parameter name")
        self.expect_op(":", f"':' and a type after parameter '{name.text}'")
        if self.tok.is_keyword("tensor"):
            self.advance()
            self.expect_op("<")
            dtype = self.dtype_name(STORAGE_DTYPES)
            self.expect_op(">")
            self.expect_op("[", "'[' starting the tensor's dimensions")
            dims: list[str | int] = []
            while True:
                tok = self.tok
                if tok.kind == "ident":
                    dims.append(self.advance().text)
                elif tok.kind == "int":
                    value = int(self.advance().text)
                    if value <= 0:
                        raise CompileError(tok.span, "a fixed dimension must be a positive integer")
                    dims.append(value)
                else:
                    raise self.fail("a dimension (a name or a positive integer)")
                if not self.tok.is_op(","):
                    break
                self.advance()
            close = self.expect_op("]", "',' or ']'")
            if len(dims) > 4:
                raise CompileError(
                    name.span.to(close.span),
                    f"tensor '{name.text}' has rank {len(dims)}; tensors have 1 to 4 dimensions",
                )
            return ir.TensorParam(
                name=name.text, dtype=dtype, dims=tuple(dims), span=name.span.to(close.span)
            )
        dtype = self.dtype_name(SCALAR_PARAM_DTYPES, "'tensor<...>[...]', 'f32' or 'i32'")
        return ir.ScalarParam(name=name.text, dtype=dtype, span=name.span.to(self.prev_span()))

    def dtype_name(self, allowed: tuple[str, ...], what: str | None = None) -> str:
        tok = self.tok
        if tok.kind != "ident" or tok.text not in allowed:
            raise self.fail(what or ("a type (" + ", ".join(allowed) + ")"))
        return self.advance().text

    # ---- statements -------------------------------------------------------------------------

    def block(self) -> tuple[tuple[ir.Stmt, ...], Token]:
        open_brace = self.expect_op("{", "'{'")
        stmts = []
        self.skip_newlines()
        while not self.tok.is_op("}"):
            if self.tok.kind == "eof":
                raise CompileError(open_brace.span, "this '{' is never closed: the file ends before its '}'")
            stmts.append(self.statement())
            if not (self.tok.kind == "newline" or self.tok.is_op(";") or self.tok.is_op("}")):
                raise self.fail("the end of the statement")
            self.skip_newlines()
        return tuple(stmts), self.advance()

    def statement(self) -> ir.Stmt:
        tok = self.tok
        if tok.is_keyword("let"):
            self.advance()
            name = self.expect_ident("a name after 'let'")
            self.expect_op("=", f"'=' after 'let {name.text}'")
            value = self.expr()
            return ir.Let(name=name.text, value=value, span=tok.span.to(value.span))
        if tok.is_keyword("var"):
            return self.var_decl()
        if tok.is_keyword("for"):
            return self.for_loop()
        if tok.kind == "ident":
            name = self.advance()
            if self.tok.is_op("["):
                index, _ = self.index()
                op = self.assign_op()
                value = self.expr()
                return ir.Store(
                    tensor=name.text, index=index, op=op, value=value, span=name.span.to(value.span)
                )
            op = self.assign_op()
            value = self.expr()
            return ir.Assign(name=name.text, op=op, value=value, span=name.span.to(value.span))
        raise self.fail("a statement (let, var, for, or an assignment)")

    def assign_op(self) -> str:
        if self.tok.kind == "op" and self.tok.text in ASSIGN_OPS:
            return self.advance().text
        raise self.fail("an assignment ('=', '+=', '-=', '*=', '/=')")

    def var_decl(self) -> ir.VarDecl:
        kw = self.advance()
        name = self.expect_ident("a name after 'var'")
        self.expect_op(":", f"':' and a type after 'var {name.text}'")
        if self.tok.is_keyword("tile"):
            self.advance()
            self.expect_op("<")
            dtype = self.dtype_name(VAR_DTYPES)
            self.expect_op(">")
            self.expect_op("[", "'[' starting the tile's shape")
            dims = [self.expr()]
            while self.tok.is_op(","):
                self.advance()
                dims.append(self.expr())
            self.expect_op("]", "',' or ']'")
            declared: ir.Type | tuple = ("tile", dtype, tuple(dims))
        else:
            declared = ir.ScalarType(self.dtype_name(VAR_DTYPES, "a type ('tile<...>[...]', f32, i32, bool)"))
        self.expect_op("=", f"'=' and an initial value for 'var {name.text}'")
        init = self.expr()
        # The tile shape stays as expressions until the checker turns them into Sizes; it is
        # carried in a placeholder TileType whose shape the checker replaces.
        if isinstance(declared, tuple):
            declared = UncheckedTileType(declared[1], declared[2])  # shape: expressions for now
        return ir.VarDecl(name=name.text, declared=declared, init=init, span=kw.span.to(init.span))

    def for_loop(self) -> ir.For:
        kw = self.advance()
        var = self.expect_ident("a loop variable after 'for'")
        self.expect_keyword("in")
        rng = self.expect_keyword("range")
        self.expect_op("(", "'(' after 'range'")
        args = [self.expr()]
        while self.tok.is_op(","):
            self.advance()
            args.append(self.expr())
        close = self.expect_op(")", "',' or ')'")
        if len(args) == 2:
            args.append(ir.Const(1, rng.span))
        if len(args) != 3:
            raise CompileError(
                rng.span.to(close.span),
                f"range takes (start, stop) or (start, stop, step), found {len(args)} arguments",
            )
        body, end = self.block()
        return ir.For(
            var=var.text, start=args[0], stop=args[1], step=args[2], body=body, span=kw.span.to(end.span)
        )

    # ---- expressions ------------------------------------------------------------------------

    def expr(self) -> ir.Expr:
        return self.or_expr()

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
            operand = self.unary()
            span = minus.span.to(operand.span)
            if isinstance(operand, ir.Const) and not isinstance(operand.value, bool):
                return ir.Const(value=-operand.value, span=span)
            return ir.UnaryOp(op="-", operand=operand, span=span)
        return self.postfix()

    def postfix(self) -> ir.Expr:
        tok = self.tok
        if tok.kind == "ident" and self.peek().is_op("["):
            self.advance()
            index, close = self.index()
            return ir.Load(tensor=tok.text, index=index, span=tok.span.to(close.span))
        if tok.kind == "ident" and self.peek().is_op("("):
            return self.call()
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
            self.expect_op(".", "'.block' after 'ctx'")
            block = self.expect_ident("'block' after 'ctx.'")
            if block.text != "block":
                raise CompileError(block.span, f"ctx has no field '{block.text}' (known: block)")
            self.expect_op(".", "'.x', '.y' or '.z' after 'ctx.block'")
            axis = self.expect_ident("'x', 'y' or 'z'")
            if axis.text not in ("x", "y", "z"):
                raise CompileError(axis.span, f"ctx.block has no axis '{axis.text}' (known: x, y, z)")
            return ir.BlockIndex(axis=axis.text, span=tok.span.to(axis.span))
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


@dataclass(frozen=True)
class UncheckedTileType(ir.TileType):
    """The declared type of a `var` tile before checking: `shape` still holds expressions.

    Only the parser builds it and only the checker reads it (check.py replaces it with a TileType
    of Sizes), so no later stage ever sees one."""
