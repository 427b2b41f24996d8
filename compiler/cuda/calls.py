"""The CUDA emitters of the built-ins, one per entry of compiler/builtins.py's table:
`emit(gen, call, ctx) -> str`, the C expression of one element. The calls that need the whole
tile first (sum/max/min over an axis, dot, transpose of a computed tile, scans) hoist it
(gen.reduce_elem, gen.dot_elem, exprs.ExprEmitter.through_shared, scans.py) and read their
element. This module imports no emitter that reads the table (no cycle through it)."""

from __future__ import annotations

from compiler.cuda import int_ops, scans
from compiler.cuda.emit import CTYPE, FLOATS
from compiler.cuda.values import Ctx, Val
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

LOG2E = "1.44269504088896341f"


def exp(gen, e: ir.Call, ctx: Ctx | None) -> str:
    if gen.plan.exp2_fold:
        return exp_base2(gen, e.args[0], ctx)
    return legacy_math(gen, e, ctx)


def legacy_math(gen, e: ir.Call, ctx: Ctx | None) -> str:
    """exp, log, sqrt: the CUDA function, which --use_fast_math turns into its approximation."""
    return f"{e.func}f({f32_arg(gen, e.args[0], ctx)})"


def abs_(gen, e: ir.Call, ctx: Ctx | None) -> str:
    a = e.args[0]
    inner = gen.elem(a, gen.sub_ctx(a, ctx))
    return f"fabsf({inner})" if a.ty.dtype in FLOATS else f"abs({inner})"


# The float functions as C: (accurate, fast). Accurate forms are unaffected by --use_fast_math
# (the tanh, sin, cos and pow of double precision, or libdevice functions fast math leaves alone:
# erff, log1pf, expm1f compile to the same PTX with it, but for ftz); fast
# forms are the hardware approximations. The error bounds are in docs/language.md §8.2.
FLOAT_MATH = {
    # not tanhf: --use_fast_math compiles it to tanh.approx.f32 (seen in the PTX of CUDA 13.0)
    "tanh": ("((float)tanh((double)({0})))", "tanh_approx({0})"),
    "erf": ("erff({0})", "erff({0})"),
    "sigmoid": ("((float)(1.0 / (1.0 + exp(-(double)({0})))))", "__frcp_rn(1.0f + __expf(-({0})))"),
    "rsqrt": ("((float)(1.0 / sqrt((double)({0}))))", "rsqrtf({0})"),
    "log1p": ("log1pf({0})", "log1pf({0})"),
    "expm1": ("expm1f({0})", "expm1f({0})"),
    "sin": ("((float)sin((double)({0})))", "__sinf({0})"),
    "cos": ("((float)cos((double)({0})))", "__cosf({0})"),
    "floor": ("floorf({0})", "floorf({0})"),
    "ceil": ("ceilf({0})", "ceilf({0})"),
    "pow": ("((float)pow((double)({0}), (double)({1})))", "__powf({0}, {1})"),
}


def float_math(gen, e: ir.Call, ctx: Ctx | None) -> str:
    precision = gen.plan.kernel.precision
    fast = precision is not None and precision.math == "fast"
    template = FLOAT_MATH[e.func][1 if fast else 0]
    return template.format(*(f32_arg(gen, a, ctx) for a in e.args))


BITS = {"bit_and": "&", "bit_or": "|", "bit_xor": "^"}


def bits(gen, e: ir.Call, ctx: Ctx | None) -> str:
    """i32 bit operations; shifts clamp the count as PTX does (shl_i / shr_i in the preamble)."""
    x = [gen.elem(a, gen.sub_ctx(a, ctx)) for a in e.args]
    if e.func == "bit_not":
        return f"(~{x[0]})"
    if e.func in BITS:
        return f"({x[0]} {BITS[e.func]} {x[1]})"
    return int_ops.shift(gen, e.ty.dtype, e.func == "shift_left", x[0], x[1])


def max_min(gen, e: ir.Call, ctx: Ctx | None) -> str:
    if "axis" in dict(e.kwargs):
        return gen.reduce_elem(e, ctx)
    a, b = e.args
    f = e.func
    x, y = gen.elem(a, gen.sub_ctx(a, ctx)), gen.elem(b, gen.sub_ctx(b, ctx))
    if e.ty.dtype in FLOATS:
        x = x if a.ty.dtype in FLOATS else f"((float){x})"
        y = y if b.ty.dtype in FLOATS else f"((float){y})"
        return f"f{f}f({x}, {y})"
    return f"{f}({x}, {y})"


def reduce(gen, e: ir.Call, ctx: Ctx | None) -> str:
    return gen.reduce_elem(e, ctx)


def where(gen, e: ir.Call, ctx: Ctx | None) -> str:
    c, x, y = where_parts(gen, e, ctx)
    return f"({c} ? {x} : {y})"


def narrow(gen, e: ir.Call, ctx: Ctx | None) -> str:
    """bf16(x), f16(x): round to nearest even, held as the float it rounds to."""
    f = e.func
    x = f32_arg(gen, e.args[0], ctx)
    gen.used.bf16 |= f == "bf16"
    gen.used.half |= f == "f16"
    return f"{f}_to_f32(f32_to_{f}({x}))"


def convert(gen, e: ir.Call, ctx: Ctx | None) -> str:
    """f32(x), i32(x), i64(x), u32(x): C's casts (from a float, cvt.rzi: toward zero, saturating,
    NaN to 0; between integers, the low bits). The H100 turns a NaN into -2^63 on the way to a
    64-bit integer (seen in test_ints_atomics_gpu, 2026-12-07), so i64 of a float tests for it."""
    x = gen.elem(e.args[0], gen.sub_ctx(e.args[0], ctx))
    if e.func == "i64" and e.args[0].ty.dtype in FLOATS:
        return f"{int_ops.use(gen, 'nan_to_i64')}({x})"
    return f"(({CTYPE[e.func]})({x}))"


def arange(gen, e: ir.Call, ctx: Ctx | None) -> str:
    return ctx.pos[0]


def full(gen, e: ir.Call, ctx: Ctx | None) -> str:
    return gen.cast(gen.elem(e.args[1], None), e.args[1], e.ty.dtype)


def expand(gen, e: ir.Call, ctx: Ctx | None) -> str:
    axis = dict(e.kwargs)["axis"].value
    keep = [a for a in range(len(ctx.shape)) if a != axis]
    inner = Ctx(
        tuple(ctx.shape[a] for a in keep),
        ("row" if axis == 1 else "col") if ctx.kind == "2d" else ctx.kind,
        tuple(ctx.local[a] for a in keep),
        tuple(ctx.pos[a] for a in keep),
        ctx.native,
    )
    if len(ctx.shape) != 2:
        raise CompileError(e.span, "the CUDA backend expands 1-D tiles to 2-D only")
    return gen.elem(e.args[0], inner)


def dot(gen, e: ir.Call, ctx: Ctx | None) -> str:
    return gen.dot_elem(e, ctx)


def take(gen, e: ir.Call, ctx: Ctx | None) -> str:
    """Element p of take(x, idx, axis = k): x's element at p with p[k] replaced by idx[p[k]],
    or 0 where that index is outside x. x is read at those positions directly (a load reads the
    tensor there: a gather, never the whole tensor)."""
    x, idx = e.args
    k = dict(e.kwargs)["axis"].value
    if len(ctx.shape) == 2:
        idx_ctx = Ctx((ctx.shape[k],), "row" if k == 0 else "col", (ctx.local[k],), (ctx.pos[k],), ctx.native)
    else:
        idx_ctx = ctx
    i = gen.elem(idx, idx_ctx)
    extent = gen.size(x.ty.shape[k])
    pos = list(ctx.pos)
    pos[k] = f"({i})"
    shape = tuple(gen.size(s) for s in x.ty.shape)
    inner = gen.elem(x, Ctx(shape, ctx.kind, ctx.local, tuple(pos), native=False))
    zero = "0.0f" if x.ty.dtype in FLOATS else ("false" if x.ty.dtype == "bool" else "0")
    # unsigned comparison: a negative index wraps above every extent; an i64 one compares all 64 bits
    wide = "unsigned long long" if idx.ty.dtype == "i64" else "unsigned"
    return f"((({wide})({i}) < {extent}u) ? {inner} : {zero})"


def scan(gen, e: ir.Call, ctx: Ctx | None) -> str:
    return scans.scan(gen, e, ctx)


def where_parts(gen, e: ir.Call, ctx) -> tuple[str, str, str]:
    """The condition's, the then-value's and the else-value's element expressions of a where
    (in that order of emission: the values first, as they may hoist a dot)."""
    c, a, b = e.args
    x, y = gen.elem(a, gen.sub_ctx(a, ctx)), gen.elem(b, gen.sub_ctx(b, ctx))
    if e.ty.dtype in FLOATS:
        x = x if a.ty.dtype in FLOATS else f"((float){x})"
        y = y if b.ty.dtype in FLOATS else f"((float){y})"
    return gen.elem(c, gen.sub_ctx(c, ctx)), x, y


def exp_base2(gen, a: ir.Expr, ctx) -> str:
    """exp in a tensor-core kernel (softmax: one exponential per score, the multi-function
    unit's rate bounds attention) as 2^(x log2 e); exp(u - v) as 2^fma(u, log2 e, -v log2 e),
    whose -v log2 e is per row in attention. Under fast math expf is the same ex2.approx
    after a multiply and a subtraction; the fma saves one of the two per element. Only in
    kernels whose dots are all 16-bit (codegen.KernelGen): f32 and TF32 kernels keep expf
    and their generated code."""
    if isinstance(a, ir.BinOp) and a.op == "-" and a.lhs.ty.dtype in FLOATS and a.rhs.ty.dtype in FLOATS:
        u, v = f32_arg(gen, a.lhs, ctx), f32_arg(gen, a.rhs, ctx)
        return f"exp2f(fmaf({u}, {LOG2E}, -({v}) * {LOG2E}))"
    return f"exp2f({f32_arg(gen, a, ctx)} * {LOG2E})"


def f32_arg(gen, a: ir.Expr, ctx):
    x = gen.elem(a, gen.sub_ctx(a, ctx))
    return x if a.ty.dtype in FLOATS else f"((float)({x}))"


def transpose(gen, e: ir.Call, ctx: Ctx) -> str:
    a = e.args[0]
    flipped = Ctx(
        tuple(reversed(ctx.shape)),
        ctx.kind,
        tuple(reversed(ctx.local)),
        tuple(reversed(ctx.pos)),
        native=False,
    )
    if isinstance(a, ir.Load):
        return gen.elem(a, flipped)
    v = a if isinstance(a, ir.Name) and isinstance(gen.scope.vals.get(a.name), Val) else None
    val = gen.scope.vals[a.name] if v is not None else gen.materialize(a, "2d")
    return gen.through_shared(val, flipped)
