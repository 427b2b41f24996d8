"""Scans along an axis of a tile (cumsum, cumprod, cummax) on the GPU: O(n) work per line.

The tile goes to shared memory (every owner writes its elements). Each warp takes lines (rows
for axis = 1 of a 2-D tile, columns for axis = 0, the whole tile for a 1-D one) in turn; along
a line of L elements each lane scans its own chunk of ceil(L / 32) consecutive elements in
order, the 32 chunk totals are scanned by warp shuffles (__shfl_up_sync, log2 32 = 5 steps), and
each lane folds the total of the chunks before its own into its chunk. The element is then read
back by position, as any tile read through shared memory.

Order of operations, for the tolerance of f32 results: a chunk sums in order, the chunk prefixes
by a 5-level tree; the interpreter sums the whole line in order. Both are inclusive scans of the
same values, so they differ by at most about L * 2^-24 * (the sum of |x| along the line) for
cumsum, and relatively by about L * 2^-24 for cumprod of values of one sign; cummax is exact."""

from __future__ import annotations

from compiler.cuda.values import Ctx
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

# by the scan's operator (compiler/builtins.py combine) and whether the tile is float
_IDENT = {
    ("add", True): "0.0f", ("add", False): "0",
    ("mul", True): "1.0f", ("mul", False): "1",
    ("max", True): "__int_as_float(0xff800000)", ("max", False): "(-2147483647 - 1)",
}
_COMBINE = {
    ("add", True): "({0} + {1})", ("add", False): "({0} + {1})",
    ("mul", True): "({0} * {1})", ("mul", False): "({0} * {1})",
    ("max", True): "fmaxf({0}, {1})", ("max", False): "max({0}, {1})",
}


def _combine(combine: str, is_float: bool, a: str, b: str) -> str:
    return _COMBINE[(combine, is_float)].format(a, b)


def scan(combine: str, gen, e: ir.Call, ctx: Ctx) -> str:
    """The scan applying `combine` ("add", "mul", "max"), as compiler/builtins.py gives it."""
    x = e.args[0]
    axis = dict(e.kwargs)["axis"].value
    shape = tuple(gen.size(s) for s in x.ty.shape)
    if e.ty.dtype in ("i64", "u32"):
        raise CompileError(e.span, f"the CUDA backend scans f32 and i32 tiles, not {e.ty.dtype} "
                                   "(convert with i32(...) or f32(...) first)")
    is_float = e.ty.dtype in ("f32", "bf16", "f16")
    ctype = "float" if is_float else "int"
    kind = "2d" if len(shape) == 2 else "flat"
    src = gen.ctx_for(kind, shape)
    body = gen.elem(x, src)
    n = 1
    for s in shape:
        n *= s
    buf = gen.smem.alloc_scratch(n)
    gen.sync()
    flat = " + ".join(f"{p} * {gen.stride(shape, a)}" for a, p in enumerate(src.pos))
    gen.emit_loop(src, [f"{buf}[{flat}] = ({ctype})({body});"])
    gen.sync()
    length = shape[axis]
    lines = n // length
    step = gen.stride(shape, axis)  # between consecutive elements of a line
    _emit_lines(gen, combine, is_float, ctype, buf, length, lines, step, shape, axis)
    gen.sync()
    where = " + ".join(f"({p}) * {gen.stride(shape, a)}" for a, p in enumerate(ctx.pos))
    return f"{buf}[{where}]"


def _emit_lines(gen, combine, is_float, ctype, buf, length, lines, step, shape, axis) -> None:
    ident = _IDENT[(combine, is_float)]
    chunk = -(-length // 32)
    warps = gen.plan.grid.threads // 32
    # the start of line `l`: its position along the other axis times that axis's stride
    other = gen.stride(shape, 1 - axis) if len(shape) == 2 else 0
    out = gen.out
    out.open("")
    out.line("const int lane = threadIdx.x & 31;")
    out.open(f"for (int line = threadIdx.x >> 5; line < {lines}; line += {warps})")
    out.line(f"{ctype}* base = {buf} + line * {other};")
    out.line(f"const int lo = lane * {chunk}, hi = min(lo + {chunk}, {length});")
    out.line(f"{ctype} run = {ident};")
    out.open("for (int i = lo; i < hi; ++i)")
    out.line(f"run = {_combine(combine, is_float, 'run', f'base[i * {step}]')}; base[i * {step}] = run;")
    out.close()
    out.line(f"{ctype} incl = run;")
    out.line("#pragma unroll")
    out.open("for (int o = 1; o < 32; o <<= 1)")
    out.line(f"{ctype} up = __shfl_up_sync(0xffffffffu, incl, o);")
    out.line(f"if (lane >= o) incl = {_combine(combine, is_float, 'up', 'incl')};")
    out.close()
    out.line(f"{ctype} before = __shfl_up_sync(0xffffffffu, incl, 1);")
    out.open("if (lane > 0)")
    out.open("for (int i = lo; i < hi; ++i)")
    out.line(f"base[i * {step}] = {_combine(combine, is_float, 'before', f'base[i * {step}]')};")
    out.close()
    out.close()
    out.close()
    out.close()
