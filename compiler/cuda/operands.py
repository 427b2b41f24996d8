"""Tensor-core operands in shared memory (MmaTile) and how they get there: 16-byte cp.async copies
in the source's orientation (zero-filled past the tensor's edge), element by element where no copy
fits, or from registers; rows padded by 16 bytes (16-bit) so that ldmatrix and the copies are free
of bank conflicts. Used by mma.py (mma.sync) and, for its core-matrix tiles, mainloops/wgmma/mma.py."""

from __future__ import annotations

from dataclasses import dataclass

from compiler import builtins
from compiler.cuda.emit import from_f32
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

MMA_K = 16
ROW_PAD = 8  # elements (16 bytes) of padding after each stored row


def element_bytes(dtype: str) -> int:
    """Bytes of one stored element of a tensor-core operand (f32 holds TF32 values)."""
    return 4 if dtype == "f32" else 1 if dtype in ir.FP8 else 2


def element_ctype(dtype: str) -> str:
    return "float" if dtype == "f32" else "unsigned char" if dtype in ir.FP8 else "unsigned short"


@dataclass(frozen=True)
class MmaTile:
    """A dot operand in shared memory, stored [rows][cols] with row stride `ld`; `dtype` is the
    storage type (bf16, f16, or f32 for TF32). `role` 'a' ([x, k] as dot sees it) or 'b'
    ([k, x]); `k_contiguous`: the stored cols are k."""

    ptr: str  # C expression of type ctype*
    role: str
    k: int
    x: int
    k_contiguous: bool
    dtype: str

    @property
    def elem_bytes(self) -> int:
        return element_bytes(self.dtype)

    @property
    def ctype(self) -> str:
        return element_ctype(self.dtype)

    @property
    def pad(self) -> int:
        """16-bit: 16 bytes (ldmatrix rows in distinct bank groups). f32, k-contiguous: 4 words,
        so the 8 16-byte rows of an ldmatrix phase fall in distinct bank groups (and a scalar
        read of row g col t puts the 32 lanes in 32 banks); otherwise 8 words: scalar reads of
        row t col g, 8 mod 32 words apart, land in 32 banks."""
        if self.elem_bytes == 2:
            return ROW_PAD
        return 4 if self.k_contiguous else 8

    @property
    def vector(self) -> int:
        return 16 // self.elem_bytes

    @property
    def rows(self) -> int:
        return self.x if self.k_contiguous else self.k

    @property
    def cols(self) -> int:
        return self.k if self.k_contiguous else self.x

    @property
    def ld(self) -> int:
        return self.cols + self.pad

    @property
    def elements(self) -> int:
        return self.rows * self.ld


def tile_floats(tile) -> int:
    """Shared-memory size of an MmaTile in 4-byte words."""
    return (tile.elements * tile.elem_bytes + 3) // 4


def make_tile(ptr: str, role: str, k: int, x: int, k_contiguous: bool, dtype: str, span) -> MmaTile:
    step = 8 if dtype == "f32" else MMA_K
    if k % step:
        raise CompileError(
            span, f"dot's inner extent {k} is not a multiple of {step} (the tensor-core k step)"
        )
    t = MmaTile(ptr, role, k, x, k_contiguous, dtype)
    if t.cols % t.vector:
        raise CompileError(
            span,
            f"dot operand extent {t.cols} is not a multiple of {t.vector} (one 16-byte shared-memory row)",
        )
    return t


# -- staging into shared memory -------------------------------------------------------------------


def copy_plan(gen, tile: MmaTile, load: ir.Load) -> dict | None:
    """16-byte cp.async copies of `load` (stored as it lies in memory) or None: the tensor's last
    dim and the slice start along it must be multiples of 8 elements, and the fill zero."""
    from compiler.cuda import analysis

    param = gen.tensor(load.tensor, load.span)
    if param.dtype != tile.dtype or isinstance(load.index[-1], ir.SliceIndex):
        return None
    if load.fill is not None:
        fill = load.fill
        if not (isinstance(fill, ir.Const) and float(fill.value) == 0.0):
            return None
    v = tile.vector
    if gen.dims_of(param)[-1] % v:
        return None
    last = load.index[-1]
    if isinstance(last, ir.SliceRange) and analysis.int_range(last.start, gen.scope.ranges).divisor % v:
        return None
    chunks = tile.rows * tile.cols // v
    return {"chunks": chunks, "per_row": tile.cols // v, "iters": -(-chunks // gen.plan.grid.threads)}


def issue_copy(gen, plan: dict, tile: MmaTile, load: ir.Load) -> None:
    """Issue the cp.async copies of one operand tile (the caller commits and waits)."""
    t = gen.plan.grid.threads
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int it_ = 0; it_ < {plan['iters']}; ++it_)")
    gen.out.line(f"const int e_ = it_ * {t} + th_id;")
    if plan["chunks"] % t:
        gen.out.line(f"if (e_ >= {plan['chunks']}) break;")
    if hasattr(tile, "chunk"):
        o, q = tile.chunk("e_", plan["per_row"])
        gen.out.line(f"const int o_ = {o}, q_ = {q};")
    else:
        gen.out.line(f"const int o_ = e_ / {plan['per_row']}, q_ = (e_ % {plan['per_row']}) * {tile.vector};")
    dst = stored_at(tile, "o_", "q_")
    ptr, pred = gen.element_address(gen.tensor(load.tensor, load.span), load.index, ("o_", "q_"))
    if pred == "true":
        gen.out.line(f"cp_async16({tile.ptr} + {dst}, &{ptr}, true);")
    else:  # out of bounds: zero-filled, from a valid address
        gen.out.line(f"const bool in_ = {pred};")
        base = f"t_{load.tensor}"
        gen.out.line(f"cp_async16({tile.ptr} + {dst}, in_ ? &{ptr} : {base}, in_);")
    gen.out.close()


def stored_at(tile, row: str, col: str) -> str:
    """Element offset of stored row `row`, column `col` (C expressions) in an MmaTile or in
    warpgroup MMA's core-matrix layout (wgmma.CoreTile, which has its own)."""
    return tile.offset(row, col) if hasattr(tile, "offset") else f"({row}) * {tile.ld} + {col}"


def write_elements(gen, tile: MmaTile, load: ir.Load) -> None:
    """Element by element (converted to the operand type), where no 16-byte copy fits."""
    from compiler.cuda.values import Ctx

    t = gen.plan.grid.threads
    total = tile.rows * tile.cols
    gen.out.line("#pragma unroll 4")
    gen.out.open(f"for (int e_ = th_id; e_ < {total}; e_ += {t})")
    gen.out.line(f"const int q_ = e_ % {tile.cols}; const int o_ = e_ / {tile.cols};")
    ctx = Ctx((tile.rows, tile.cols), "2d", ("0", "0"), ("o_", "q_"), native=False)
    value = gen.load_elem(load, ctx)
    dst = stored_at(tile, "o_", "q_")
    gen.out.line(f"{tile.ptr}[{dst}] = {from_f32(tile.dtype, value)};")
    gen.out.close()


def write_registers(gen, tile: MmaTile, val, transposed: bool) -> None:
    """A register tile (any layout) into the operand buffer, rounded to the operand type."""
    ctx = gen.ctx_for("2d", val.shape)
    row, col = ("_c", "_r") if transposed else ("_r", "_c")  # operand coordinates
    k, x = (col, row) if tile.role == "a" else (row, col)
    r, c = (x, k) if tile.k_contiguous else (k, x)
    value = from_f32(tile.dtype, gen.access(val, ctx))
    gen.emit_loop(ctx, [f"{tile.ptr}[{stored_at(tile, r, c)}] = {value};"])


def alloc_tile(gen, role: str, k: int, x: int, k_contiguous: bool, dtype: str, span) -> MmaTile:
    probe = make_tile("", role, k, x, k_contiguous, dtype, span)
    ptr = f"reinterpret_cast<{probe.ctype}*>{gen.smem.alloc_perm(tile_floats(probe))}"
    return make_tile(f"({ptr})", role, k, x, k_contiguous, dtype, span)


def operand_orientation(role: str, arg: ir.Expr) -> tuple[ir.Expr, bool, bool]:
    """(inner expression, transposed, k_contiguous) of a dot operand staged from `arg`."""
    transposed = builtins.is_transpose(arg)
    inner = arg.args[0] if transposed else arg
    if isinstance(inner, ir.Load) and inner.ty.rank == 2:
        return inner, transposed, (role == "a") != transposed
    return inner, transposed, role == "a"


def stage_load(gen, tile: MmaTile, load: ir.Load) -> bool:
    """Copy `load` into `tile`; True when cp.async copies were issued (the caller commits)."""
    plan = copy_plan(gen, tile, load)
    if plan is None:
        write_elements(gen, tile, load)
        return False
    issue_copy(gen, plan, tile, load)
    return True
