"""The language's built-in calls as the C expression of one element: math (exp, log, sqrt, abs,
max, min), conversions and rounding (f32, i32, bf16, f16), where, arange, full, expand; the calls
that need the whole tile first (sum/max/min over an axis, dot, transpose of a computed tile)
hoist it (reductions.py, dots.py, exprs.ExprEmitter.through_shared) and read their element."""

from __future__ import annotations

from compiler.cuda import dots, reductions
from compiler.cuda.emit import FLOATS
from compiler.cuda.values import Ctx, Val
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

LOG2E = "1.44269504088896341f"


def call(gen, e: ir.Call, ctx: Ctx | None) -> str:
    f = e.func
    kw = dict(e.kwargs)
    if f == "exp" and gen.exp2_fold:
        return exp_base2(gen, e.args[0], ctx)
    if f in ("exp", "log", "sqrt"):
        return f"{f}f({f32_arg(gen, e.args[0], ctx)})"
    if f == "abs":
        a = e.args[0]
        inner = gen.elem(a, gen.sub_ctx(a, ctx))
        return f"fabsf({inner})" if a.ty.dtype in FLOATS else f"abs({inner})"
    if f in ("max", "min") and "axis" not in kw and len(e.args) == 2:
        a, b = e.args
        x, y = gen.elem(a, gen.sub_ctx(a, ctx)), gen.elem(b, gen.sub_ctx(b, ctx))
        if e.ty.dtype in FLOATS:
            x = x if a.ty.dtype in FLOATS else f"((float){x})"
            y = y if b.ty.dtype in FLOATS else f"((float){y})"
            return f"f{f}f({x}, {y})"
        return f"{f}({x}, {y})"
    if f in ("sum", "max", "min"):
        return reductions.reduction(gen, e, ctx)
    if f == "where":
        c, x, y = where_parts(gen, e, ctx)
        return f"({c} ? {x} : {y})"
    if f in ("bf16", "f16"):  # round to nearest even, held as the float it rounds to
        x = f32_arg(gen, e.args[0], ctx)
        gen.uses_bf16 |= f == "bf16"
        gen.uses_half |= f == "f16"
        return f"{f}_to_f32(f32_to_{f}({x}))"
    if f == "f32":
        return f"((float)({gen.elem(e.args[0], gen.sub_ctx(e.args[0], ctx))}))"
    if f == "i32":
        return f"((int)({gen.elem(e.args[0], gen.sub_ctx(e.args[0], ctx))}))"
    if f == "arange":
        return ctx.pos[0]
    if f == "full":
        return gen.cast(gen.elem(e.args[1], None), e.args[1], e.ty.dtype)
    if f == "expand":
        axis = kw["axis"].value
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
    if f == "transpose":
        return transpose(gen, e, ctx)
    if f == "dot":
        val = dots.dot(gen, e, into=None)
        return gen.access(val, ctx) if ctx.native and ctx.kind == "2d" else gen.through_shared(val, ctx)
    raise CompileError(e.span, f"the CUDA backend cannot compile {f}()")


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
    v = a if isinstance(a, ir.Name) and isinstance(gen.vals.get(a.name), Val) else None
    val = gen.vals[a.name] if v is not None else gen.materialize(a, "2d")
    return gen.through_shared(val, flipped)
