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
- `combine`: the associative operator a reduction, a scan or a two-argument max/min applies
  ("add", "mul", "max", "min"); the interpreter's and the CUDA emitter's functions of that family
  are given it here (functools.partial), so neither compares the built-in's name.
- the traits other layers ask about (`contraction` ... `shape_first`), read through the queries
  at the end of this module (`is_contraction(e)`, `is_transpose(e)`, `pairwise(e)` ...): a layer
  asks what a call is, never which name it has; a new built-in with the trait is seen everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

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
    combine: str | None = None  # "add", "mul", "max", "min": the associative operator it applies
    contraction: bool = False  # a matrix product with a precision (dot): tensor-core candidates
    transposes: bool = False  # swaps the two axes of a 2-D tile: operand layouts look through it
    broadcasts: bool = False  # expand: a new axis of extent 1 (a row or column seen as a tile)
    positions: bool = False  # arange: each element is its own index; it reads no data
    selects: bool = False  # where(cond, a, b): the element of a or b, as cond says
    shape_first: bool = False  # full: the first argument is a shape list, not a value
    exponential: bool = False  # exp: e^x (the online softmax's correction factor is one)
    converts_to: str | None = None  # f32(x), bf16(x), ...: the dtype the value is converted to
    literals_adopt: bool = False  # a literal among its last two arguments takes the other's type
    takes_fp8: bool = False  # an fp8 value may be its argument (the other calls refuse one)

    @property
    def all_keywords(self) -> tuple[str, ...]:
        return self.keywords + (("axis",) if self.with_axis else ())


def _math(name: str, count: int = 1) -> Builtin:
    return Builtin(name, (count,), rules.float_math_rule, interp.float_math, cuda.float_math,
                   elementwise=True, literals_adopt=count == 2)


def _f32_math(name: str, meaning: Callable, **traits) -> Builtin:
    """exp, log, sqrt: numpy's f32 function (the language's meaning since the start)."""
    emitter = traits.pop("cuda", cuda.legacy_math)
    return Builtin(name, (1,), rules.float_math_rule, partial(interp.f32_math, meaning), emitter,
                   elementwise=True, **traits)


def _bits(name: str, meaning: Callable, c_operator: str, count: int = 2) -> Builtin:
    return Builtin(name, (count,), rules.bit_rule, partial(interp.bits, meaning),
                   partial(cuda.bits, c_operator), elementwise=True, literals_adopt=count == 2)


def _shift(name: str, left: bool) -> Builtin:
    return Builtin(name, (2,), rules.bit_rule, partial(interp.shift, left), partial(cuda.shift, left),
                   elementwise=True, literals_adopt=True)


def _max_min(name: str) -> Builtin:
    return Builtin(name, (2,), rules.max_min_rule, partial(interp.max_min, name), cuda.max_min,
                   with_axis=(1,), elementwise=True, reduces=True, combine=name, literals_adopt=True)


def _scan(name: str, combine: str) -> Builtin:
    return Builtin(name, (), rules.scan_rule, partial(interp.scan, combine), partial(cuda.scan, combine),
                   with_axis=(1,), scans=True, combine=combine)


def _convert(dtype: str, rule: Callable = rules.convert_rule, meaning: Callable = interp.convert,
             emitter: Callable = cuda.convert, takes_fp8: bool = False) -> Builtin:
    """f32(x), i32(x), ..., bf16(x): the built-in's name is the dtype it converts to."""
    return Builtin(dtype, (1,), rule, partial(meaning, dtype), partial(emitter, dtype), elementwise=True,
                   converts_to=dtype, takes_fp8=takes_fp8)


_ENTRIES = (
    Builtin("dot", (2,), rules.dot_rule, interp.dot, cuda.dot, keywords=("precision", "scale_a", "scale_b"),
            contraction=True, takes_fp8=True),
    Builtin("transpose", (1,), rules.transpose_rule, interp.transpose, cuda.transpose, transposes=True,
            takes_fp8=True),
    _f32_math("exp", np.exp, cuda=cuda.exp, exponential=True),
    _f32_math("log", np.log),
    _f32_math("sqrt", np.sqrt),
    Builtin("abs", (1,), rules.abs_rule, interp.abs_, cuda.abs_, elementwise=True),
    *(_math(n) for n in ("tanh", "erf", "sigmoid", "rsqrt", "log1p", "expm1", "sin", "cos", "floor", "ceil")),
    _math("pow", 2),
    _bits("bit_and", np.bitwise_and, "&"),
    _bits("bit_or", np.bitwise_or, "|"),
    _bits("bit_xor", np.bitwise_xor, "^"),
    _bits("bit_not", np.invert, "~", count=1),
    _shift("shift_left", left=True),
    _shift("shift_right", left=False),
    _max_min("max"),
    _max_min("min"),
    Builtin("sum", (), rules.reduce_rule, partial(interp.reduce, "add"), cuda.reduce, with_axis=(1,),
            reduces=True, combine="add"),
    _scan("cumsum", "add"),
    _scan("cumprod", "mul"),
    _scan("cummax", "max"),
    _scan("cummin", "min"),
    Builtin("take", (), rules.take_rule, interp.take, cuda.take, with_axis=(2,)),
    Builtin("where", (3,), rules.where_rule, interp.where, cuda.where, elementwise=True, selects=True,
            literals_adopt=True),
    Builtin("arange", (1,), rules.arange_rule, interp.arange, cuda.arange, positions=True),
    Builtin("expand", (), rules.expand_rule, interp.expand, cuda.expand, with_axis=(1,), broadcasts=True),
    Builtin("full", (2,), rules.full_rule, interp.full, cuda.full, shape_first=True),
    # an fp8 value may enter f32(), i32(), bf16() and f16(), not i64() or u32()
    *(_convert(n, takes_fp8=n in ("f32", "i32")) for n in ("f32", "i32", "i64", "u32")),
    *(_convert(n, rules.narrow_rule, interp.narrow, cuda.narrow, takes_fp8=True) for n in ("bf16", "f16")),
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


# ---- what a call is: the queries the other layers make ------------------------------------------


def _entry(e: ir.Expr) -> Builtin | None:
    return BUILTINS.get(e.func) if isinstance(e, ir.Call) else None


def _has(e: ir.Expr, trait: str) -> bool:
    entry = _entry(e)
    return entry is not None and getattr(entry, trait)


def is_contraction(e: ir.Expr) -> bool:
    """A matrix product (dot): it carries a precision and is what tensor cores run."""
    return _has(e, "contraction")


def is_transpose(e: ir.Expr) -> bool:
    return _has(e, "transposes")


def is_broadcast(e: ir.Expr) -> bool:
    """expand(x, axis = k): x seen with a new axis of extent 1."""
    return _has(e, "broadcasts")


def is_positions(e: ir.Expr) -> bool:
    """arange(n): the element at i is i; no data is read."""
    return _has(e, "positions")


def is_select(e: ir.Expr) -> bool:
    return _has(e, "selects")


def is_exponential(e: ir.Expr) -> bool:
    return _has(e, "exponential")


def takes_shape(e: ir.Expr) -> bool:
    """The call's first argument is a shape list (full), not a value."""
    return _has(e, "shape_first")


def converts_to(e: ir.Expr) -> str | None:
    """The dtype a conversion call (f32(x), bf16(x), ...) converts to, or None."""
    entry = _entry(e)
    return entry.converts_to if entry is not None else None


def literals_adopt(e: ir.Expr) -> bool:
    """A literal among the call's last two arguments takes the type of the other (where's
    choices, max/min's, pow's and the bit operations' operands)."""
    return _has(e, "literals_adopt")


def moves_data_only(e: ir.Expr) -> bool:
    """The call does no arithmetic: it moves, broadcasts, makes indices or fills (transpose,
    expand, arange, full) or converts a value; the flop count leaves it out."""
    entry = _entry(e)
    return entry is not None and (entry.transposes or entry.broadcasts or entry.positions
                                  or entry.shape_first or entry.converts_to is not None)


def takes_fp8(e: ir.Expr) -> bool:
    """An fp8 value may be the call's argument: a dot operand, transposed or converted."""
    return _has(e, "takes_fp8")


def combine_of(e: ir.Expr) -> str | None:
    """The associative operator the call applies ("add", "mul", "max", "min"), or None."""
    entry = _entry(e)
    return entry.combine if entry is not None else None


def pairwise(e: ir.Expr) -> str | None:
    """"max" or "min" for max(a, b) / min(a, b) (two arguments, no axis); None otherwise."""
    entry = _entry(e)
    if entry is None or not entry.elementwise or entry.combine is None or len(e.args) != 2 or e.kwargs:
        return None
    return entry.combine


PYTHON_COMBINE: dict[str, Callable] = {"max": max, "min": min}  # folding constants: pairwise(e)


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
