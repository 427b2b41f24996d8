"""Checked kernel + binding -> one CUDA C++ __global__ function (the leaf).

Dims and tile values are compile-time constants; every tile is a register array spread over the
CTA as `layout.py` describes; element-wise chains become one unrolled loop over each thread's
register block; reductions, dot products and layout changes are hoisted before the loop that
uses them (`exprs.py`); dot stages its operands through shared memory (`mainloops/simt/dots.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import builtins
from compiler.cuda import analysis, int_ops, loops, mbarriers, mma, target, uniform
from compiler.cuda.emit import (
    CTYPE,
    FP8_PRELUDE,
    FP8_STORE_PRELUDE,
    HALF_PRELUDE,
    INT_SUFFIX,
    STORAGE_CTYPE,
    Emitter,
)
from compiler.cuda.exprs import ExprEmitter
from compiler.cuda.layout import ThreadGrid
from compiler.cuda.mainloops.pingpong import handover as pingpong
from compiler.cuda.mainloops.simt import dots
from compiler.cuda.mainloops.tma_ws import persistent
from compiler.cuda.mainloops.tma_ws import ring as tma
from compiler.cuda.mainloops.tma_ws import store as tma_store
from compiler.cuda.mainloops.tma_ws import tf32 as tma_tf32
from compiler.cuda.mainloops.wgmma import mma as wgmma
from compiler.cuda.render_plan import point_text, render_plan
from compiler.cuda.schedule import wide_blocks_searched
from compiler.cuda.stores import emit as stores
from compiler.cuda.values import Val
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

# Floats per thread a CUDA-core point may hold in registers through a loop (its tiles, and what the
# loop holds beside them: operands prefetched into registers, the largest let of its body, a k
# step's dot fragments) before it is pruned. matmul.phk at 8192^3 on sm_90 (ptxas 13.0), 8 x 16
# or 16 x 8 register blocks (128 accumulators): 164-192 assembled to 230-255 registers without
# spills; at TILE_K = 32, 200 spilled 40 bytes once (128 x 256) and not once (256 x 128), 216-232
# spilled 28-468 bytes.
REGISTER_BUDGET = 200
# ... and in the whole kernel (its tiles beside the largest let anywhere), with
# schedule.wide_blocks_searched() (else REGISTER_BUDGET): matmul's epilogue let c_old, read element
# by element into the store, beside the 128 accumulators assembled to 230 registers without spills.
KERNEL_REGISTER_BUDGET = 256
MAX_REGISTERS = 255  # a thread's, in a CTA of up to 256 threads (both budgets shrink in proportion past that)
# With tensor cores the operand fragments, the rounded copy of a register operand and the ring's
# addresses need registers too: past 128 tile values per thread ptxas spilled (mha D=128,
# BR=64, BC=128 held 132 and spilled 72 bytes at 255 registers).
TENSOR_CORE_REGISTER_BUDGET = 128
# shared-memory rings of a loop's operands (loops.ring_lets)
RINGS = ("ring", "regring", "tmaring", "tmatf32")
# Warpgroup MMA reads its operands from shared memory or straight from the tile (P's fragments
# are packed from it), so a CTA of two or more warpgroups holds more: mha D=128 at BR=BC=128
# holds 132 and assembles to 242 registers without spills (one CTA of 8 warps per SM). With one
# warpgroup each thread also issues twice the ring's copies: there the same point spills.
WARPGROUP_REGISTER_BUDGET = 136
# Four warpgroups (512 threads, attention's BR = 256) get at most 128 registers each: mha D=128,
# BC=32 holds 84 and assembles to 119 without spills; BC=64 holds 100 and spilled 32 bytes (144
# and serialized wgmma when rotated), as did D=64, BC=128 (100) when rotated.
WIDE_CTA_REGISTER_BUDGET = 96
# A TF32 dot on mma.sync reading its a operand from registers (attention's P, rounded to TF32 each
# k step) beside S = Q K^T: every such point holding 100 tile values per thread assembled to
# 249-255 registers, and mha_tf32 D=64, BR=64, BC=128 spilled 4 bytes once TF32 rounded with
# cvt.rn (with cvt.rna it did not, but D=64 and 128 at BR=64, BC=32, 3 stages spilled 8 and 48
# bytes: ptxas's luck at the edge). 96 keeps BC=32 (52 and 84 held) and D=64, BR=128, BC=64 (68).
TF32_REGISTER_OPERAND_BUDGET = 96


@dataclass(frozen=True)
class Generated:
    source: str
    entry: str
    params: tuple[str, ...]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    line_spans: tuple  # generated line (1-based) -> Span | None, index 0 unused
    need: target.Need = target.Need()  # what the code asks of the GPU (target.py picks NVRTC's -arch)
    # tensor_maps.MapSpec per extra parameter (bulk tensor copies, mainloops/tma_ws/ring.py)
    tensor_maps: tuple = ()


class KernelGen(ExprEmitter):
    """The emit stage: one leaf's CUDA C++ from the products of the earlier stages (stages.py)."""

    def __init__(self, leaf):
        super().__init__(render_plan(leaf))

    # -- statements -------------------------------------------------------------------------

    def stmt(self, s: ir.Stmt) -> None:
        self.out.span = s.span
        self.smem.scratch_cur = 0
        self.source_comment(s.span)
        if isinstance(s, ir.Let):
            self.let(s)
        elif isinstance(s, ir.VarDecl):
            self.var_decl(s)
        elif isinstance(s, ir.Assign):
            self.assign(s)
        elif isinstance(s, ir.Store):
            stores.store(self, s)
        elif isinstance(s, ir.For):
            self.for_loop(s)
        else:
            raise CompileError(s.span, f"the CUDA backend cannot compile {type(s).__name__}")

    def let(self, s: ir.Let) -> None:
        ty = s.value.ty
        if isinstance(ty, ir.ScalarType):
            c = self.scalar(s.value)
            cname = self.fresh("u_" + s.name)
            self.out.line(f"const {CTYPE[ty.dtype]} {cname} = {c};")
            self.scope.scalars[s.name] = (cname, ty.dtype)
            if ty.dtype == "i32":
                self.scope.ranges[s.name] = analysis.int_range(s.value, self.scope.ranges)
            return
        if s.name in self.plan.shared:
            self.scope.vals[s.name] = dots.stage_shared_let(self,
                s.name, s.value, self.plan.shared[s.name],
                analysis.shared_let_transposed(self.plan.kernel.body, s.name),
            )
            return
        kind = "2d" if ty.rank == 2 else self.plan.hints.get(s.name, "flat")
        before = self.registers.register_floats
        # tensor-core kernels: a mask that holds on the whole tile costs one test (causal attention)
        if not (self.plan.tensor_cores and uniform.materialize_masked(self, s.value, kind, s.name)):
            self.materialize(s.value, kind, name=s.name)
        # a let dies with its statement list; only the largest one counts against the budget
        floats = self.registers.register_floats - before
        self.registers.let_floats = max(self.registers.let_floats, floats)
        if self.loop.barriers:  # inside a loop
            self.registers.body_let = max(self.registers.body_let, floats)
        self.registers.register_floats = before

    def var_decl(self, s: ir.VarDecl) -> None:
        ty = s.declared
        if isinstance(ty, ir.ScalarType):
            cname = self.fresh("u_" + s.name)
            self.out.line(f"{CTYPE[ty.dtype]} {cname} = {self.cast(self.scalar(s.init), s.init, ty.dtype)};")
            self.scope.scalars[s.name] = (cname, ty.dtype)
            self.scope.ranges.pop(s.name, None)
            return
        shape = tuple(self.size(x) for x in ty.shape)
        if ty.rank > 2:
            raise CompileError(s.span, "the CUDA backend supports tiles of rank 1 and 2 only")
        kind = "2d" if ty.rank == 2 else self.plan.hints.get(s.name, "flat")
        val = self.declare(s.name, kind, shape, ty.dtype, ty.shape)
        self.assign_elementwise(val, "=", s.init)

    def assign(self, s: ir.Assign) -> None:
        if s.name in self.scope.scalars:
            cname, dtype = self.scope.scalars[s.name]
            value = self.cast(self.scalar(s.value), s.value, dtype)
            if s.op == "/=" and dtype in INT_SUFFIX:
                self.out.line(f"{cname} = {int_ops.divide(self, dtype, cname, value)};")
            elif s.op == "=":
                self.out.line(f"{cname} = {value};")
            else:
                self.out.line(f"{cname} {s.op} {value};")
            return
        val = self.scope.vals[s.name]
        dot, rest = self.dot_split(s)
        if dot is not None:
            rotation = self.loop.rotation
            if rotation is not None and dot is rotation.deferred:  # the kept group writes acc
                self.out.line("wg_wait_all();")
            if rest is not None:
                self.assign_elementwise(val, "=", rest)
            dots.dot(self, dot, into=val)
            return
        self.assign_elementwise(val, s.op, s.value)

    def dot_split(self, s: ir.Assign):
        """`acc += dot(a, b)` and `acc = X + dot(a, b)` accumulate the product straight into acc
        (when a and b do not read acc)."""
        from compiler.frontend import walk

        def reads_target(e: ir.Expr) -> bool:
            return any(isinstance(x, ir.Name) and x.name == s.name for x in walk.iter_exprs(e))

        def is_dot(e):
            return (
                builtins.is_contraction(e)
                and not reads_target(e)
                and tuple(x for x in e.ty.shape) == tuple(self.scope.vals[s.name].ty_shape)
            )

        if s.op == "+=" and is_dot(s.value):
            return s.value, None
        if s.op == "=" and isinstance(s.value, ir.BinOp) and s.value.op == "+":
            v = s.value
            if is_dot(v.rhs) and isinstance(v.lhs.ty, ir.TileType) and v.lhs.ty.shape == v.ty.shape:
                return v.rhs, v.lhs
            if is_dot(v.lhs) and isinstance(v.rhs.ty, ir.TileType) and v.rhs.ty.shape == v.ty.shape:
                return v.lhs, v.rhs
        return None, None

    def for_loop(self, s: ir.For) -> None:
        start = self.scalar(s.start)
        stop = self.scalar(s.stop)
        step = self.scalar(s.step)
        var = self.fresh("u_" + s.var)
        stop_name = self.fresh("stop")
        self.out.line(f"const int {stop_name} = {stop};")
        step_v = analysis.int_range(s.step, self.scope.ranges)
        var_range = analysis.loop_range(
            analysis.int_range(s.start, self.scope.ranges),
            analysis.int_range(s.stop, self.scope.ranges),
            max(step_v.lo, 1),
        )
        saved = self.scope.saved()
        self.scope.ranges[s.var] = var_range
        pipelined = loops.prefetch_first(self, s, start, stop_name, step)
        counted = self.registers.enter_loop()
        self.loop.rotation = loops.rotation(self, s)
        self.out.open(f"for (int {var} = {start}; {var} < {stop_name}; {var} += {step})")
        self.loop.barriers.append(False)
        self.scope.scalars[s.var] = (var, "i32")
        saved_pipe, saved_tail = self.loop.pipelined, self.loop.tail
        self.loop.tail = []  # code queued for the end of this loop's body (loops.ring_lets)
        self.loop.pipelined = {
            **self.loop.pipelined,
            **{n: (*v, s.var, var, step, stop_name) for n, v in pipelined.items()},
        }
        body = list(s.body)
        i = 0
        while i < len(body):
            run = []
            while i < len(body) and isinstance(body[i], ir.Let) and body[i].name in pipelined:
                run.append(body[i])
                i += 1
            rings = [x for x in run if self.loop.pipelined[x.name][0] in RINGS]
            regs = [x for x in run if self.loop.pipelined[x.name][0] not in RINGS]
            if rings:
                loops.ring_lets(self, rings)
            if regs:  # consecutive prefetched operands share one barrier pair
                loops.pipelined_lets(self, regs)
            else:
                self.stmt(body[i])
                i += 1
        for emit_tail in self.loop.tail:
            emit_tail()
        if self.loop.rotation is not None:
            loops.fill_rotation(self)
        self.loop.tail = saved_tail
        self.loop.pipelined = saved_pipe
        self.scope.restore(saved)
        self.loop.barriers.pop()
        self.registers.leave_loop(loops.prefetched_floats(pipelined), counted)
        self.out.span = s.span
        self.out.close()
        if self.loop.rotation is not None:
            loops.issue_kept(self)
        self.loop.rotation = None
        if self.used.wgmma and not self.loop.barriers:  # the last group, before acc is read
            self.out.line("wg_wait_all();")
            persistent.end_of_ring(self)  # a persistent grid's ring goes on into the next tile
        if self.loop.swap is not None:  # C^T's accumulator into acc (mainloops/tma_ws/tf32.py)
            tma_tf32.finish(self)

    def source_comment(self, span) -> None:
        """`// line N: <the kernel's line>` before the code of each statement (for readers of
        `compiler cuda`; NVRTC errors are mapped through line_spans, not through these)."""
        lines = self.plan.kernel.source.splitlines()
        i = span.line - self.plan.kernel.span.line
        if 0 <= i < len(lines):
            text = lines[i].strip().replace("*/", "* /")
            self.out.line(f"// line {span.line}: {text}")

    def pruned(self, span, why: str) -> CompileError:
        return pruned(self.plan.kernel, self.plan.binding, span, why)

    # -- the whole kernel -------------------------------------------------------------------

    def parameters(self) -> tuple[list[str], list[str]]:
        """The kernel's C parameters and their names in launch order: tensors, scalars, then the
        tensor maps of bulk tensor copies (passed by value, made from the launch's arrays:
        mainloops/tma_ws/maps.py)."""
        params, order = [], []
        stored = self.stored_tensors()
        for p in self.plan.kernel.params:
            if isinstance(p, ir.TensorParam):
                ctype = STORAGE_CTYPE[p.dtype]
                if p.name in stored:
                    params.append(f"{ctype}* __restrict__ t_{p.name}")
                else:
                    params.append(f"const {ctype}* __restrict__ t_{p.name}")
            else:
                params.append(f"{CTYPE[p.dtype]} s_{p.name}")
            order.append(p.name)
        for spec in self.used.tensor_maps:
            params.append(f"const __grid_constant__ TmaMap {spec.param}")
            order.append(spec.param)
        return params, order

    def register_budget(self) -> int:
        """Tile values a thread may hold before the point is pruned (see the constants)."""
        if not self.plan.tensor_cores:
            return REGISTER_BUDGET
        if self.used.tf32_register_operand:
            return TF32_REGISTER_OPERAND_BUDGET
        if self.plan.wgmma and self.plan.grid.threads >= 512:
            return WIDE_CTA_REGISTER_BUDGET
        wide = self.plan.wgmma and self.plan.grid.threads >= 256
        return WARPGROUP_REGISTER_BUDGET if wide else TENSOR_CORE_REGISTER_BUDGET

    def preludes(self) -> Emitter:
        """The device helpers the emitted body used (each prelude only where it is needed)."""
        head = Emitter()
        head.depth = 0
        if self.used.half or self.used.bf16 or self.used.fp8:
            head.block(HALF_PRELUDE.splitlines())
        if self.used.fp8:
            head.block(FP8_PRELUDE.splitlines())
            if self.plan.wgmma:  # fp8 tiles staged by threads (fp8 tensor cores: sm_90)
                head.block(FP8_STORE_PRELUDE.splitlines())
        head.block(PRELUDE.splitlines())
        head.block(int_ops.prelude(self.used.int_helpers))
        if self.plan.tensor_cores:
            head.block(mma.PRELUDE.splitlines())
        if self.used.wgmma:
            head.block(wgmma.PRELUDE.splitlines())
        if self.used.tensor_maps:
            head.block(tma.prelude(self.used.tensor_maps).splitlines())
        if self.used.tma_store:
            head.block(tma_store.PRELUDE.splitlines())
        if self.used.pingpong:  # the TMA prelude has the mbarrier helpers already
            helpers = [] if self.used.tensor_maps else [mbarriers.PRELUDE]
            head.block("\n".join([*helpers, pingpong.PRELUDE]).splitlines())
        return head

    def generate(self) -> Generated:
        k = self.plan.kernel
        tiles = persistent.asked(self)
        if tiles:  # the body runs once per tile of a persistent grid (mainloops/tma_ws/persistent.py)
            persistent.open_tiles(self)
        for s in k.body:
            self.stmt(s)
        if tiles:
            persistent.close_tiles(self)
        tma_store.check_used(self)
        shared_bytes = self.smem.bytes()
        if shared_bytes > self.plan.smem_limit:
            raise self.pruned(
                k.span,
                f"it needs {shared_bytes} bytes of shared memory (the limit is {self.plan.smem_limit})",
            )
        registers = self.registers
        held, budget = registers.register_floats + registers.let_floats, self.register_budget()
        if not self.plan.tensor_cores:  # CUDA cores: the loops' budget, and the whole kernel's
            # past 256 threads a thread has fewer than 255 registers (65536 per multiprocessor)
            cap = min(MAX_REGISTERS, 65536 // self.plan.grid.threads)
            looped = registers.register_floats + registers.loop_floats
            if looped > budget * cap // MAX_REGISTERS:
                raise self.pruned(k.span, f"it holds {looped} values per thread in registers through a loop "
                                  f"(budget {budget * cap // MAX_REGISTERS})")
            whole = KERNEL_REGISTER_BUDGET if wide_blocks_searched() else REGISTER_BUDGET
            budget = whole * cap // MAX_REGISTERS
        if held > budget:
            raise self.pruned(
                k.span, f"it holds {held} tile values per thread in registers (budget {budget})"
            )
        head = self.preludes()
        params, order = self.parameters()
        entry = f"phobos_{k.name}"
        threads = self.plan.grid.threads + (tma.PRODUCER_THREADS if self.loop.tma_split else 0)
        # a producer warpgroup's setmaxnreg needs the register cap of one CTA per multiprocessor
        split = self.loop.tma_split
        bounds = f"__launch_bounds__({threads}, 1)" if split else f"__launch_bounds__({threads})"
        head.line(f'extern "C" __global__ void {bounds} {entry}({", ".join(params)}) {{')
        head.depth = 1
        for name, value in sorted(self.plan.env.items()):
            head.line(f"constexpr int c_{name} = {value};")
        g = self.plan.grid
        head.line(f"constexpr int PERM = {self.smem.perm_floats};")
        align = " __align__(1024)" if self.used.wgmma else ""  # swizzled operands: 1024-byte tiles
        head.line(f"extern __shared__{align} float4 smem_raw[];")
        head.line("float* smem = reinterpret_cast<float*>(smem_raw);")
        head.line("const int th_id = threadIdx.x;")
        head.block(g.coordinates())
        if not tiles:
            head.block(self.plan.cta_order_lines)
        head.line("(void)smem; (void)th_r; (void)th_c;")
        lines = head.lines + self.out.lines + ["}"]
        spans = [None] + head.spans + self.out.spans + [None]
        return Generated(
            "\n".join(lines) + "\n",
            entry,
            tuple(order),
            persistent.grid(self.plan.counts, tiles) if tiles else self.plan.counts,
            (threads, 1, 1),
            shared_bytes,
            tuple(spans),
            target.need_of(self),
            tuple(self.used.tensor_maps),
        )


PRELUDE = r"""
__device__ __forceinline__ int floordiv_i(int a, int b) {
  int q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ int floormod_i(int a, int b) {
  int r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ float floormod_f(float a, float b) { return a - floorf(a / b) * b; }
__device__ __forceinline__ int shl_i(int a, int n) {
  return (unsigned)n >= 32u ? 0 : (int)((unsigned)a << n);
}
__device__ __forceinline__ int shr_i(int a, int n) { return a >> ((unsigned)n >= 32u ? 31 : n); }
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
""".strip("\n")


def pruned(kernel: ir.Kernel, binding, span, why: str) -> CompileError:
    """A point of the search space that does not fit the hardware: reported, never run."""
    if span == kernel.span and kernel.autotune is not None:
        span = kernel.autotune.span  # the search space the point comes from
    return CompileError(span, f"tile point {point_text(binding)} does not fit a CTA and is pruned: {why}")


__all__ = ["Generated", "KernelGen", "ThreadGrid", "Val", "pruned"]
