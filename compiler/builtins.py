"""The built-in functions of the language: one table, name -> signature, type rule, the
interpreter's meaning and the CUDA emitter, read by every layer (check, interpreter, CUDA
codegen, the cluster compiler's analyses). Adding a built-in is adding one entry here (and its
row in docs/language.md §8, which a test compares with this table).

- `type_rule(call, shapes, size_of) -> ir.Type` (compiler/frontend/check_calls.py) types a call
  whose arguments are typed, raising CompileError at the culprit.
- `interp(ev, call, scope) -> ndarray` (compiler/interp/builtin_ops.py) is the meaning.
- `cuda(gen, call, ctx) -> str` (compiler/cuda/calls.py) is the C expression of one element.
- `elementwise`: each element of the result comes from the same element of its (broadcast)
  arguments, so layout analyses may look through the call; `reduces`: `axis = k` folds that axis
  away (sum, and max/min with one argument); `scans`: an inclusive scan along `axis = k`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compiler.cuda import calls as cuda
from compiler.frontend import check_calls as rules
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.source import Span
from compiler.interp import builtin_ops as interp


@dataclass(frozen=True)
class Builtin:
    name: str
    positional: tuple[int, ...]  # argument counts accepted without `axis = k` (none: it needs one)
    type_rule: Callable
    interp: Callable
    cuda: Callable
    with_axis: tuple[int, ...] = ()  # argument counts accepted with `axis = k` (none: no axis)
    keywords: tuple[str, ...] = ()  # keyword arguments other than axis
    elementwise: bool = False
    reduces: bool = False
    scans: bool = False

    @property
    def all_keywords(self) -> tuple[str, ...]:
        return self.keywords + (("axis",) if self.with_axis else ())


def _math(name: str, count: int = 1) -> Builtin:
    return Builtin(name, (count,), rules.float_math_rule, interp.float_math, cuda.float_math,
                   elementwise=True)


def _bits(name: str, count: int = 2) -> Builtin:
    return Builtin(name, (count,), rules.bit_rule, interp.bits, cuda.bits, elementwise=True)


def _scan(name: str) -> Builtin:
    return Builtin(name, (), rules.scan_rule, interp.scan, cuda.scan, with_axis=(1,), scans=True)


_ENTRIES = (
    Builtin("dot", (2,), rules.dot_rule, interp.dot, cuda.dot, keywords=("precision", "scale_a", "scale_b")),
    Builtin("transpose", (1,), rules.transpose_rule, interp.transpose, cuda.transpose),
    Builtin("exp", (1,), rules.float_math_rule, interp.legacy_math, cuda.exp, elementwise=True),
    Builtin("log", (1,), rules.float_math_rule, interp.legacy_math, cuda.legacy_math, elementwise=True),
    Builtin("sqrt", (1,), rules.float_math_rule, interp.legacy_math, cuda.legacy_math, elementwise=True),
    Builtin("abs", (1,), rules.abs_rule, interp.legacy_math, cuda.abs_, elementwise=True),
    *(_math(n) for n in ("tanh", "erf", "sigmoid", "rsqrt", "log1p", "expm1", "sin", "cos", "floor", "ceil")),
    _math("pow", 2),
    *(_bits(n) for n in ("bit_and", "bit_or", "bit_xor", "shift_left", "shift_right")),
    _bits("bit_not", 1),
    Builtin("max", (2,), rules.max_min_rule, interp.max_min, cuda.max_min, with_axis=(1,), elementwise=True,
            reduces=True),
    Builtin("min", (2,), rules.max_min_rule, interp.max_min, cuda.max_min, with_axis=(1,), elementwise=True,
            reduces=True),
    Builtin("sum", (), rules.reduce_rule, interp.reduce, cuda.reduce, with_axis=(1,), reduces=True),
    *(_scan(n) for n in ("cumsum", "cumprod", "cummax", "cummin")),
    Builtin("take", (), rules.take_rule, interp.take, cuda.take, with_axis=(2,)),
    Builtin("where", (3,), rules.where_rule, interp.where, cuda.where, elementwise=True),
    Builtin("arange", (1,), rules.arange_rule, interp.arange, cuda.arange),
    Builtin("expand", (), rules.expand_rule, interp.expand, cuda.expand, with_axis=(1,)),
    Builtin("full", (2,), rules.full_rule, interp.full, cuda.full),
    Builtin("f32", (1,), rules.convert_rule, interp.convert, cuda.convert, elementwise=True),
    *(Builtin(n, (1,), rules.convert_rule, interp.convert, cuda.convert, elementwise=True)
      for n in ("i32", "i64", "u32")),
    Builtin("bf16", (1,), rules.narrow_rule, interp.narrow, cuda.narrow, elementwise=True),
    Builtin("f16", (1,), rules.narrow_rule, interp.narrow, cuda.narrow, elementwise=True),
)
BUILTINS: dict[str, Builtin] = {b.name: b for b in _ENTRIES}


def lookup(name: str) -> Builtin:
    """The entry of a checked call's function (the checker let only these through)."""
    return BUILTINS[name]


def is_elementwise(e: ir.Expr) -> bool:
    """A call whose element i comes from element i of its arguments (no `axis = k` form)."""
    return isinstance(e, ir.Call) and e.func in BUILTINS and BUILTINS[e.func].elementwise and not e.kwargs


def is_reduction(e: ir.Expr) -> bool:
    return (isinstance(e, ir.Call) and e.func in BUILTINS and BUILTINS[e.func].reduces
            and any(k == "axis" for k, _ in e.kwargs))


def check_signature(call: ir.Call) -> None:
    """Before the arguments are typed: the function exists and takes these arguments."""
    s = call.span
    name_span = Span(s.file, s.line, s.col, s.line, s.col + len(call.func))
    entry = BUILTINS.get(call.func)
    if entry is None:
        names = ", ".join(sorted(BUILTINS))
        raise CompileError(name_span, f"unknown function '{call.func}' (built-ins: {names}, load)")
    keywords = entry.all_keywords
    for key, value in call.kwargs:
        if key not in keywords:
            known = ", ".join(keywords) if keywords else "none"
            raise CompileError(value.span, f"{call.func} has no keyword argument '{key}' (known: {known})")
    has_axis = any(k == "axis" for k, _ in call.kwargs)
    counts = entry.with_axis if has_axis else entry.positional
    if not counts:
        raise CompileError(call.span, f"{call.func} needs 'axis = k'")
    n = len(call.args)
    if n not in counts:
        want = " or ".join(str(c) for c in counts)
        raise CompileError(
            call.span, f"{call.func} takes {want} argument{'s' if counts != (1,) else ''}, found {n}"
        )


def call_type(call: ir.Call, shapes, size_of) -> ir.Type:
    return BUILTINS[call.func].type_rule(call, shapes, size_of)
