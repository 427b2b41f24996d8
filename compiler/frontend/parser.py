"""Parser: tokens -> an unchecked ir.Module (every `ty` None, every Name.kind None).

Recursive descent over the grammar in docs/language.md: this module parses kernels, attributes,
parameters and statements; compiler/frontend/parse_expr.py parses expressions.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import dtypes
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.lexer import Token, tokenize
from compiler.frontend.parse_expr import ExprParser
from compiler.frontend.source import Span

STORAGE_DTYPES = dtypes.NAMES  # common/dtypes.py
SCALAR_PARAM_DTYPES = ("f32", "i32")
VAR_DTYPES = ("f32", "i32", "bool")
ASSIGN_OPS = ("=", "+=", "-=", "*=", "/=")
ATTRIBUTE_NAMES = ("autotune", "cluster", "aligned", "launch", "precision")
KERNEL_PRECISIONS = ("f32", "tf32")


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


class _Parser(ExprParser):
    """Kernels, attributes, parameters and statements; expressions come from ExprParser."""

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
        if name == "precision":
            return self.precision_attribute(at)
        # @launch(threads = 128) or @launch(128)
        if self.tok.kind == "ident" and self.peek().is_op("="):
            key = self.advance()
            if key.text != "threads":
                raise CompileError(key.span, f"unknown @launch argument '{key.text}' (known: threads)")
            self.advance()
        value = self.int_literal("the number of threads")
        close = self.expect_op(")")
        return ir.Launch(threads=value, span=at.span.to(close.span))

    def precision_attribute(self, at: Token) -> ir.Precision:
        """`@precision(tf32)`, `@precision(f32)`: how the kernel's f32 dots multiply; `math = fast`
        or `math = accurate` after it (or alone): which forms of the float functions run."""
        mode = None
        if not (self.tok.kind == "ident" and self.tok.text == "math" and self.peek().is_op("=")):
            tok = self.tok
            if tok.kind != "ident" or tok.text not in KERNEL_PRECISIONS:
                raise CompileError(
                    tok.span,
                    f"@precision takes f32 or tf32, found {self.describe(tok)} "
                    "(bf16 and f16 dots take their precision from their operands)",
                )
            mode = self.advance().text
            if self.tok.is_op(","):
                self.advance()
        math = "accurate"
        if self.tok.kind == "ident" and self.tok.text == "math":
            self.advance()
            self.expect_op("=")
            tok = self.tok
            if tok.kind != "ident" or tok.text not in ("accurate", "fast"):
                raise CompileError(tok.span, f"math takes accurate or fast, found {self.describe(tok)}")
            math = self.advance().text
        close = self.expect_op(")")
        return ir.Precision(mode=mode, span=at.span.to(close.span), math=math)

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
        with self.nested(self.tok):
            return self.block_body()

    def block_body(self) -> tuple[tuple[ir.Stmt, ...], Token]:
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


@dataclass(frozen=True)
class UncheckedTileType(ir.TileType):
    """The declared type of a `var` tile before checking: `shape` still holds expressions.

    Only the parser builds it and only the checker reads it (check.py replaces it with a TileType
    of Sizes), so no later stage ever sees one."""
