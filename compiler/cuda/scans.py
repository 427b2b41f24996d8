"""Scans along an axis of a tile (cumsum, cumprod, cummax, cummin) on the GPU: O(n) work per
line, warp shuffles and a block-level scan, for f32 (every float widens to it) and the integers
i32, i64 and u32 (wrapping, exact).

The tile goes to shared memory (every owner writes its elements, integers bit for bit through a
view of their own C type). A *line* is what one scan runs along: a row for axis = 1 of a 2-D
tile, a column for axis = 0, the whole tile for a 1-D one. Two plans:

- **warps** (a line's elements adjacent in memory, or too few lines for a thread each): a group
  of G warps takes a line, in passes of 32 G consecutive elements. In a pass each lane holds one
  element; the warp scans its 32 by `__shfl_up_sync` (5 steps); with G > 1 the warps' totals
  meet in shared memory, and each warp adds the totals of the warps before it (the block-level
  scan); the carry of the passes before is folded in last. G is the largest power of two with G
  warps for each line (at most what the line's length can use), so a single long line (a 1-D
  tile, a [1, 4096] row) is spread over every warp of the CTA. Reads and writes of a pass are
  consecutive words: no bank conflicts.
- **threads** (axis = 0 with at least 32 columns): each thread scans its own columns in order;
  neighbouring threads read neighbouring words.

The element is then read back by position, as any tile read through shared memory.

Order of operations, for the tolerance of f32 results: the interpreter scans each line in order.
The warps plan adds each element to a 5-level shuffle tree of its pass, then the warps' totals
before it, then the carry; the threads plan is the interpreter's order. Both are inclusive scans
of the same values, so an f32 cumsum differs by at most about L * 2^-24 * (the sum of |x| along
the line) and a cumprod of values of one sign relatively by about L * 2^-24; cummax, cummin and
every integer scan are exact."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda import int_ops
from compiler.cuda.values import Ctx
from compiler.frontend import ir

_FOLD = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}


@dataclass(frozen=True)
class _Op:
    """The scan's combine on values of `dtype` (f32 or an integer type), as C."""

    func: str
    dtype: str

    @property
    def ctype(self) -> str:
        return int_ops.value_ctype(self.dtype)

    @property
    def ident(self) -> str:
        return int_ops.identity(_FOLD[self.func], self.dtype)

    def __call__(self, a: str, b: str) -> str:
        """a combined with b, a the earlier part of the line."""
        if self.func == "cumsum":
            return f"({a} + {b})"
        if self.func == "cumprod":
            return f"({a} * {b})"
        f = "max" if self.func == "cummax" else "min"
        return f"f{f}f({a}, {b})" if self.ctype == "float" else f"{f}({a}, {b})"

    def view(self, buf: str) -> str:
        """A shared buffer of float words as an array of this C type."""
        return buf if self.ctype == "float" else f"reinterpret_cast<{self.ctype}*>({buf})"


@dataclass(frozen=True)
class Lines:
    """The lines of one scan over a tile in shared memory: `count` lines of `length` elements,
    `step` words between an element and the next of its line, `stride` between line starts."""

    count: int
    length: int
    step: int
    stride: int


def lines_of(shape: tuple[int, ...], axis: int) -> Lines:
    n = 1
    for s in shape:
        n *= s
    length = shape[axis]
    if len(shape) == 1:
        return Lines(1, length, 1, 0)
    if axis == 1:
        return Lines(n // length, length, 1, shape[1])
    return Lines(n // length, length, shape[1], 1)


def warps_per_line(lines: Lines, warps: int) -> int:
    """G: the largest power of two with G * lines <= warps, at most the warps of 32 elements the
    line fills (a 64-element line takes 2). 1 when there are at least as many lines as warps."""
    useful = -(-lines.length // 32)
    g = 1
    while 2 * g * lines.count <= warps and g < useful:
        g *= 2
    return g


def uses_threads(lines: Lines) -> bool:
    """The threads plan: a line's elements are not adjacent (axis 0) and there are enough lines
    for every lane of a warp to take its own."""
    return lines.step > 1 and lines.count >= 32


def scan(gen, e: ir.Call, ctx: Ctx) -> str:
    x = e.args[0]
    axis = dict(e.kwargs)["axis"].value
    shape = tuple(gen.size(s) for s in x.ty.shape)
    op = _Op(e.func, e.ty.dtype)
    kind = "2d" if len(shape) == 2 else "flat"
    src = gen.ctx_for(kind, shape)
    body = gen.elem(x, src)
    n = 1
    for s in shape:
        n *= s
    buf = op.view(gen.smem.alloc_scratch(n * int_ops.shared_words(op.dtype)))
    gen.sync()
    flat = " + ".join(f"{p} * {gen.stride(shape, a)}" for a, p in enumerate(src.pos))
    gen.emit_loop(src, [f"{buf}[{flat}] = ({op.ctype})({body});"])
    gen.sync()
    lines = lines_of(shape, axis)
    if uses_threads(lines):
        _emit_threads(gen, op, buf, lines)
    else:
        _emit_warps(gen, op, buf, lines)
    gen.sync()
    where = " + ".join(f"({p}) * {gen.stride(shape, a)}" for a, p in enumerate(ctx.pos))
    return f"{buf}[{where}]"


def _emit_threads(gen, op: _Op, buf: str, lines: Lines) -> None:
    out = gen.out
    out.open(f"for (int line_ = th_id; line_ < {lines.count}; line_ += {gen.plan.grid.threads})")
    out.line(f"{op.ctype}* base_ = {buf} + line_ * {lines.stride};")
    out.line(f"{op.ctype} run_ = {op.ident};")
    out.open(f"for (int i_ = 0; i_ < {lines.length}; ++i_)")
    out.line(f"run_ = {op('run_', f'base_[i_ * {lines.step}]')}; base_[i_ * {lines.step}] = run_;")
    out.close()
    out.close()


def _emit_warps(gen, op: _Op, buf: str, lines: Lines) -> None:
    warps = gen.plan.grid.threads // 32
    g = warps_per_line(lines, warps)
    groups = warps // g
    totals = op.view(gen.smem.alloc_scratch(warps * int_ops.shared_words(op.dtype))) if g > 1 else None
    out = gen.out
    out.open("")
    out.line("const int lane_ = th_id & 31, warp_ = th_id >> 5;")
    out.line(f"const int part_ = warp_ % {g}, group_ = warp_ / {g}; (void)part_;")
    # every thread runs both loops the same number of times: the barriers inside are uniform
    out.open(f"for (int first_ = 0; first_ < {lines.count}; first_ += {groups})")
    out.line("const int line_ = first_ + group_;")
    out.line(f"const bool live_ = line_ < {lines.count};")
    out.line(f"{op.ctype}* base_ = {buf} + (live_ ? line_ : 0) * {lines.stride};")
    out.line(f"{op.ctype} carry_ = {op.ident};")
    out.open(f"for (int pass_ = 0; pass_ < {lines.length}; pass_ += {32 * g})")
    out.line("const int i_ = pass_ + part_ * 32 + lane_;")
    out.line(f"const bool in_ = live_ && i_ < {lines.length};")
    out.line(f"{op.ctype} x_ = in_ ? base_[i_ * {lines.step}] : {op.ident};")
    out.line("#pragma unroll")
    out.open("for (int o_ = 1; o_ < 32; o_ <<= 1)")
    out.line(f"const {op.ctype} up_ = __shfl_up_sync(0xffffffffu, x_, o_);")
    out.line(f"if (lane_ >= o_) x_ = {op('up_', 'x_')};")
    out.close()
    if totals is None:
        out.line(f"const {op.ctype} total_ = __shfl_sync(0xffffffffu, x_, 31);")
    else:
        _block_level(gen, op, totals, g)
    out.line(f"x_ = {op('carry_', 'x_')};")
    out.line(f"if (in_) base_[i_ * {lines.step}] = x_;")
    out.line(f"carry_ = {op('carry_', 'total_')};")
    out.close()
    out.close()
    out.close()


def _block_level(gen, op: _Op, totals: str, g: int) -> None:
    """The G warps of a line meet in shared memory: each adds the totals of the warps before it
    on its line; every one of them learns the pass's total."""
    out = gen.out
    out.line(f"if (lane_ == 31) {totals}[warp_] = x_;")
    gen.sync()
    out.line(f"{op.ctype} before_ = {op.ident}, total_ = {op.ident};")
    out.open(f"for (int q_ = 0; q_ < {g}; ++q_)")
    out.line(f"const {op.ctype} t_ = {totals}[group_ * {g} + q_];")
    out.line(f"if (q_ < part_) before_ = {op('before_', 't_')};")
    out.line(f"total_ = {op('total_', 't_')};")
    out.close()
    gen.sync()  # every warp has read the totals before the next pass writes them
    out.line(f"x_ = {op('before_', 'x_')};")
