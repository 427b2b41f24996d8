"""Expressions: each tile expression is emitted as the C expression of one element of the
current thread's register block (`Ctx` names the loop indices and element positions); whatever
needs the whole tile first (reductions, dot, layout changes, transposes of computed tiles, vector
loads) is hoisted: emitted before the loop, into a register array or shared memory."""

from __future__ import annotations

from compiler import builtins
from compiler.cuda import analysis, int_ops, reductions
from compiler.cuda.emit import CTYPE, FLOATS, INT_SUFFIX, Emitter, c_float, to_f32
from compiler.cuda.layout import Dist, LayoutError
from compiler.cuda.mainloops.simt import dots
from compiler.cuda.render_plan import RenderPlan, block_ranges
from compiler.cuda.render_state import LoopState, Registers, Scope, SharedMemory, Used
from compiler.cuda.values import LOCALS, POSITIONS, Ctx, SharedTile, Val
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError


class ExprEmitter:
    """Renders expressions from a frozen plan (`self.plan`) into `self.out`; its mutable state
    is the name counter and the small parts of render_state.py."""

    def __init__(self, plan: RenderPlan):
        self.plan = plan
        self.out = Emitter()
        self.counter = 0  # fresh C names
        kernel = plan.kernel
        scalars = {p.name: (f"s_{p.name}", p.dtype) for p in kernel.scalars}
        scalars.update({n: (f"c_{n}", "i32") for n in plan.env})
        ranges = {n: analysis.IntRange.exact(v) for n, v in plan.env.items()}
        self.scope = Scope({}, scalars, {**ranges, **block_ranges(plan.counts)})
        self.smem = SharedMemory()
        self.registers = Registers()
        self.used = Used(
            half=any(p.dtype == "f16" for p in kernel.tensors),
            bf16=plan.tensor_cores or any(p.dtype == "bf16" for p in kernel.tensors),
            fp8=any(p.dtype in ir.FP8 for p in kernel.tensors),
        )
        self.loop = LoopState()

    # -- small helpers ----------------------------------------------------------------------

    def sync(self) -> None:
        if self.loop.tma_split:  # the producer warpgroup has returned: the consumers' named barrier
            self.out.line(f'asm volatile("bar.sync 1, {self.loop.tma_split};" ::: "memory");')
        else:
            self.out.line("__syncthreads();")
        if self.loop.barriers:
            self.loop.barriers[-1] = True

    def sync_before_overwrite(self) -> None:
        """The barrier that keeps a write to a permanent shared buffer from overtaking the reads
        of its previous contents. Every buffer from `alloc_perm` is written at one place only, so
        outside loops there is nothing to overtake; inside a loop the previous reads happened in
        an earlier iteration, and a barrier already emitted earlier in the innermost loop's body
        (not in a nested loop, which may run no iteration) lies on every path from them to here."""
        if self.loop.barriers and not self.loop.barriers[-1]:
            self.sync()

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}_{self.counter}"

    def size(self, e: ir.Expr | ir.Size) -> int:
        if isinstance(e, ir.Size):
            return e.evaluate(self.plan.env)
        r = analysis.int_range(e, self.scope.ranges)
        if r.lo != r.hi:
            raise CompileError(e.span, "expected a compile-time size")
        return r.lo

    def tensor(self, name: str, span) -> ir.TensorParam:
        p = self.plan.params.get(name)
        if not isinstance(p, ir.TensorParam):
            raise CompileError(span, f"{name} is not a tensor")
        return p

    def dims_of(self, p: ir.TensorParam) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else self.plan.env[d] for d in p.dims)

    def dists(self, kind: str, shape: tuple[int, ...]) -> tuple[Dist, ...]:
        try:
            if kind == "2d":
                return self.plan.grid.dist2(shape)
            return (self.plan.grid.dist1(shape[0], kind),)
        except LayoutError as e:
            raise self.pruned(self.out.span or self.plan.kernel.span, f"cannot lay out a tile: {e}") from None

    def counts(self, kind: str, shape) -> tuple[int, ...]:
        return tuple(d.count for d in self.dists(kind, shape))

    def owner(self, kind: str, shape) -> str:
        """True on exactly one thread per element (replicas and the other rows/cols are false)."""
        ds = self.dists(kind, shape)
        conds = [d.primary() for d in ds]
        if kind == "row":
            conds.append("(th_c == 0)")
        elif kind == "col":
            conds.append("(th_r == 0)")
        conds = [c for c in conds if c != "true"]
        return " && ".join(conds) or "true"

    def ctx_for(self, kind: str, shape: tuple[int, ...]) -> Ctx:
        return Ctx(shape, kind, LOCALS[kind], POSITIONS[kind])

    def emit_loop(self, ctx: Ctx, body: list[str]) -> None:
        """The unrolled loop over this thread's elements of a standard context."""
        ds = self.dists(ctx.kind, ctx.shape)
        depth = 0
        for d, loc, pos in zip(ds, ctx.local, ctx.pos, strict=True):
            self.out.line("#pragma unroll")
            self.out.open(f"for (int {loc} = 0; {loc} < {d.count}; ++{loc})")
            self.out.line(f"const int {pos} = {d.position(loc)}; (void){pos};")
            depth += 1
        self.out.block(body)
        for _ in range(depth):
            self.out.close()

    def array_decl(self, cname: str, kind: str, shape, dtype: str) -> str:
        dims = "".join(f"[{c}]" for c in self.counts(kind, shape))
        return f"{CTYPE[dtype]} {cname}{dims};"

    def declare(self, name: str | None, kind: str, shape, dtype: str, ty_shape=()) -> Val:
        cname = self.fresh("u_" + name if name else "v")
        self.out.line(self.array_decl(cname, kind, shape, dtype))
        n = 1
        for c in self.counts(kind, shape):
            n *= c
        self.registers.register_floats += n if name else 0
        val = Val(cname, kind, shape, dtype, ty_shape)
        if name:
            self.scope.vals[name] = val
        return val

    def access(self, val: Val, ctx: Ctx) -> str:
        idx = []
        for axis, loc in enumerate(ctx.local):
            idx.append("0" if val.shape[axis] == 1 else loc)
        return val.cname + "".join(f"[{i}]" for i in idx)

    def materialize(self, expr: ir.Expr, kind: str, name: str | None = None) -> Val:
        shape = tuple(self.size(s) for s in expr.ty.shape)
        if len(shape) > 2:
            raise CompileError(expr.span, "the CUDA backend supports tiles of rank 1 and 2 only")
        ctx = self.ctx_for(kind, shape)
        body = self.tile_elem(expr, ctx)
        val = self.declare(name, kind, shape, expr.ty.dtype, expr.ty.shape)
        self.emit_loop(ctx, [f"{self.access(val, ctx)} = {body};"])
        return val

    def assign_elementwise(self, val: Val, op: str, value: ir.Expr) -> None:
        ctx = self.ctx_for(val.kind, val.shape)
        if isinstance(value.ty, ir.TileType):
            v = self.tile_elem(value, ctx)
        else:
            v = self.scalar(value)
        v = self.cast(v, value, val.dtype)
        target = self.access(val, ctx)
        if op == "=":
            line = f"{target} = {v};"
        elif op == "/=" and val.dtype in INT_SUFFIX:
            line = f"{target} = {int_ops.divide(self, val.dtype, target, v)};"
        else:
            line = f"{target} {op} {v};"
        self.emit_loop(ctx, [line])

    def cast(self, c: str, expr: ir.Expr, dtype: str) -> str:
        src = expr.ty.dtype if expr.ty is not None else dtype
        if src == dtype or src in ("bf16", "f16", "e4m3", "e5m2") and dtype == "f32":
            return c
        if dtype in ("bf16", "f16"):  # into a narrow variable: rounded, as bf16() / f16() do
            self.used.bf16 |= dtype == "bf16"
            self.used.half |= dtype == "f16"
            return f"{dtype}_to_f32(f32_to_{dtype}((float)({c})))"
        return f"(({CTYPE[dtype]})({c}))"

    # -- scalars ----------------------------------------------------------------------------

    def scalar(self, e: ir.Expr) -> str:
        return self.elem(e, None)

    # -- tiles ------------------------------------------------------------------------------

    def tile_elem(self, e: ir.Expr, ctx: Ctx) -> str:
        return self.elem(e, ctx)

    def sub_ctx(self, e: ir.Expr, ctx: Ctx | None) -> Ctx | None:
        """The context of operand `e` inside `ctx`: scalars have none; axes of extent 1 broadcast."""
        if ctx is None or not isinstance(e.ty, ir.TileType):
            return None
        shape = tuple(self.size(s) for s in e.ty.shape)
        if shape == ctx.shape:
            return ctx
        local = tuple(
            "0" if s == 1 and c != 1 else loc for s, c, loc in zip(shape, ctx.shape, ctx.local, strict=True)
        )
        pos = tuple(
            "0" if s == 1 and c != 1 else p for s, c, p in zip(shape, ctx.shape, ctx.pos, strict=True)
        )
        return Ctx(shape, ctx.kind, local, pos, ctx.native)

    def elem(self, e: ir.Expr, ctx: Ctx | None) -> str:
        if isinstance(e, ir.Const):
            if isinstance(e.value, bool):
                return "true" if e.value else "false"
            if e.ty is not None and e.ty.dtype == "f32" or isinstance(e.value, float):
                return c_float(float(e.value))
            return f"({int(e.value)}{INT_SUFFIX.get(e.ty.dtype, '') if e.ty is not None else ''})"
        if isinstance(e, ir.Name):
            return self.name_elem(e, ctx)
        if isinstance(e, ir.BlockIndex):
            if e.axis in self.plan.block_remap:
                return self.plan.block_remap[e.axis]
            if e.axis in self.plan.reversed_blocks:
                return f"({self.plan.reversed_blocks[e.axis] - 1} - (int)blockIdx.{e.axis})"
            return f"((int)blockIdx.{e.axis})"
        if isinstance(e, ir.UnaryOp):
            inner = self.elem(e.operand, self.sub_ctx(e.operand, ctx))
            return f"(-{inner})" if e.op == "-" else f"(!{inner})"
        if isinstance(e, ir.BinOp):
            return self.binop(e, ctx)
        if isinstance(e, ir.Load):
            return self.load_elem(e, ctx)
        if isinstance(e, ir.Call):
            return builtins.lookup(e.func).cuda(self, e, ctx)
        raise CompileError(e.span, f"the CUDA backend cannot compile {type(e).__name__} here")

    def dot_elem(self, e: ir.Call, ctx: Ctx | None) -> str:
        """An element of a dot: the product is hoisted into registers (mainloops/simt/dots.py), then read."""
        val = dots.dot(self, e, into=None)
        return self.access(val, ctx) if ctx.native and ctx.kind == "2d" else self.through_shared(val, ctx)

    def reduce_elem(self, e: ir.Call, ctx: Ctx | None) -> str:
        return reductions.reduction(self, e, ctx)

    def name_elem(self, e: ir.Name, ctx: Ctx | None) -> str:
        if e.name in self.scope.scalars and not isinstance(e.ty, ir.TileType):
            return self.scope.scalars[e.name][0]
        v = self.scope.vals.get(e.name)
        if v is None:
            raise CompileError(e.span, f"{e.name} is not available in generated code")
        if isinstance(v, SharedTile):
            raise CompileError(e.span, f"{e.name} lives in shared memory and can only feed dot")
        if ctx is None:
            raise CompileError(e.span, f"tile {e.name} used as a scalar")
        if ctx.native and ctx.kind == v.kind:
            return self.access(v, ctx)
        return self.through_shared(v, ctx)

    def through_shared(self, v: Val, ctx: Ctx) -> str:
        """Read a register tile in another layout: every owner writes its elements to shared
        memory, then the element is read back by position."""
        n = 1
        for s in v.shape:
            n *= s
        wide = v.dtype == "i64"  # two words an element
        buf = self.smem.alloc_scratch(2 * n if wide else n)
        src = self.ctx_for(v.kind, v.shape)
        self.sync()
        flat = " + ".join(f"{p} * {self.stride(v.shape, a)}" for a, p in enumerate(src.pos))
        # shared memory is float words: an integer tile goes through them bit for bit (a value
        # conversion would round indices above 2^24 and make the read a float)
        into, out = int_ops.SHARED_BITS.get(v.dtype, ("{}", "{}"))
        words = f"reinterpret_cast<long long*>({buf})" if wide else buf
        self.emit_loop(src, [f"{words}[{flat}] = {into.format(self.access(v, src))};"])
        self.sync()
        flat_ctx = " + ".join(f"({p}) * {self.stride(v.shape, a)}" for a, p in enumerate(ctx.pos))
        return out.format(f"{words}[{flat_ctx}]")

    @staticmethod
    def stride(shape, axis) -> int:
        s = 1
        for x in shape[axis + 1 :]:
            s *= x
        return s

    def binop(self, e: ir.BinOp, ctx: Ctx | None) -> str:
        a = self.elem(e.lhs, self.sub_ctx(e.lhs, ctx))
        b = self.elem(e.rhs, self.sub_ctx(e.rhs, ctx))
        ta, tb = e.lhs.ty.dtype, e.rhs.ty.dtype
        if e.op in ("and", "or"):
            return f"({a} {'&&' if e.op == 'and' else '||'} {b})"
        if ta in FLOATS or tb in FLOATS:  # bf16 / f16 values are held as exact floats
            a = a if ta in FLOATS else f"((float)({a}))"
            b = b if tb in FLOATS else f"((float)({b}))"
            if e.op == "%":
                return f"floormod_f({a}, {b})"
            return f"({a} {e.op} {b})"
        if e.op == "/":
            return int_ops.divide(self, e.ty.dtype, a, b)
        if e.op == "%":
            return int_ops.modulo(self, e.ty.dtype, a, b)
        return f"({a} {e.op} {b})"

    # -- loads ------------------------------------------------------------------------------

    def item_extent(self, item, param: ir.TensorParam, dim: int) -> int:
        if isinstance(item, ir.SliceAll):
            return self.dims_of(param)[dim]
        return self.size(item.extent)

    def element_address(self, param: ir.TensorParam, index, positions) -> tuple[str, str]:
        """The C lvalue of the element at tile `positions` and the in-bounds condition (only the
        checks that range analysis cannot prove unnecessary)."""
        dims = self.dims_of(param)
        terms, conds = [], []
        positions = list(positions)
        for d, item in enumerate(index):
            if isinstance(item, ir.SliceIndex):
                idx = self.scalar(item.index)
                r = analysis.int_range(item.index, self.scope.ranges)
                if not (r.lo >= 0 and r.hi < dims[d]):
                    conds.append(f"((unsigned)({idx}) < {dims[d]}u)")
            elif isinstance(item, ir.SliceAll):
                idx = positions.pop(0)
            else:
                start = self.scalar(item.start)
                ext = self.size(item.extent)
                idx = f"({start} + {positions.pop(0)})"
                r = analysis.int_range(item.start, self.scope.ranges)
                if not (r.lo >= 0 and r.hi + ext <= dims[d]):
                    conds.append(f"((unsigned){idx} < {dims[d]}u)")
            stride = self.stride(dims, d)
            terms.append(f"{idx} * {stride}" if stride != 1 else idx)
        ptr = f"t_{param.name}[{' + '.join(terms)}]"
        return ptr, " && ".join(conds) or "true"

    def read_global(self, param: ir.TensorParam, ptr: str) -> str:
        if param.dtype == "f32" and param.name not in self.stored_tensors():
            return f"__ldg(&{ptr})"
        return to_f32(param.dtype, ptr)

    def stored_tensors(self) -> frozenset[str]:
        """The tensors the kernel writes (walk.stored_tensors)."""
        return self.plan.stored

    def load_elem(self, e: ir.Load, ctx: Ctx | None) -> str:
        param = self.tensor(e.tensor, e.span)
        fill = self.elem(e.fill, None) if e.fill is not None else int_ops.zero(param.dtype)
        if ctx is not None and ctx.standard and self.vector_ok(e, ctx) and self.small(ctx):
            return self.vector_load(e, ctx, fill)
        ptr, pred = self.element_address(param, e.index, ctx.pos if ctx else ())
        value = self.read_global(param, ptr)
        return value if pred == "true" else f"({pred} ? {value} : {fill})"

    def small(self, ctx: Ctx) -> bool:
        """Hoisted vector loads hold the whole block in registers: only for small blocks."""
        n = 1
        for c in self.counts(ctx.kind, ctx.shape):
            n *= c
        return n <= 64

    def vector_ok(self, e: ir.Load, ctx: Ctx) -> bool:
        """16-byte loads: f32, last tile axis along the tensor's last dim, 4-element groups that
        are aligned and wholly inside or outside the tensor."""
        param = self.tensor(e.tensor, e.span)
        if param.dtype != "f32" or isinstance(e.index[-1], ir.SliceIndex):
            return False
        d = self.dists(ctx.kind, ctx.shape)[-1]
        if d.vector != 4 or self.dims_of(param)[-1] % 4:
            return False
        last = e.index[-1]
        if isinstance(last, ir.SliceRange) and analysis.int_range(last.start, self.scope.ranges).divisor % 4:
            return False
        return True

    def vector_load(self, e: ir.Load, ctx: Ctx, fill: str) -> str:
        param = self.tensor(e.tensor, e.span)
        shape = ctx.shape
        val = self.declare(None, ctx.kind, shape, "f32")
        ds = self.dists(ctx.kind, shape)
        depth = 0
        locs = list(ctx.local)
        for a, (d, loc, pos) in enumerate(zip(ds, ctx.local, ctx.pos, strict=True)):
            last = a == len(ds) - 1
            self.out.line("#pragma unroll")
            if last:
                self.out.open(f"for (int {loc} = 0; {loc} < {d.count}; {loc} += 4)")
            else:
                self.out.open(f"for (int {loc} = 0; {loc} < {d.count}; ++{loc})")
            self.out.line(f"const int {pos} = {d.position(loc)}; (void){pos};")
            depth += 1
        ptr, pred = self.element_address(param, e.index, ctx.pos)
        self.out.line(f"float4 v4 = make_float4({fill}, {fill}, {fill}, {fill});")
        load = f"v4 = __ldg(reinterpret_cast<const float4*>(&{ptr}));"
        self.out.line(load if pred == "true" else f"if ({pred}) {load}")
        base = val.cname + "".join(f"[{x}]" for x in locs[:-1])
        for q, comp in enumerate("xyzw"):
            self.out.line(f"{base}[{locs[-1]} + {q}] = v4.{comp};")
        for _ in range(depth):
            self.out.close()
        return self.access(val, ctx)
