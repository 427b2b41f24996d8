"""dot(a, b): operands staged through shared memory, a register-blocked FMA loop.

Both operands are kept K-major in shared memory, S[k][x] with row stride x + 4 (16-byte aligned
rows, so each thread reads its 4-wide groups of rows of a and columns of b as float4): a is
S_a[k][m], b is S_b[k][n]. Each thread then owns an (M/TR) x (N/TC) block of the result and per k
does (M/TR) + (N/TC) shared loads and (M/TR)*(N/TC) FMAs.

Staging from a tensor: when the tensor's contiguous axis is the buffer's x axis, float4 global
loads are stored as float4 ("direct"); when it is the k axis (a in A[m, k], or b = transpose of a
row-major tile), float4 loads along k are stored as four scalars ("transposing"). A register tile
operand (flash attention's p) is written to shared memory by the threads that hold it.
"""

from __future__ import annotations

from compiler import ir
from compiler.diagnostics import CompileError

PAD = 4


class DotMixin:
    def dot(self, e: ir.Call, into):
        from compiler.cuda.exprs import SharedTile

        a, b = e.args
        m, kk = (self.size(s) for s in a.ty.shape)
        n = self.size(b.ty.shape[1])
        self.out.line(f"// dot [{m}x{kk}] x [{kk}x{n}]")
        ops = []
        writes = []
        for role, arg in (("a", a), ("b", b)):
            staged = self._staged(arg)
            if staged is not None:
                ops.append(staged)
                continue
            x = m if role == "a" else n
            ptr = self.alloc_perm(kk * (x + PAD))
            tile = SharedTile(ptr, role, kk, x, x + PAD)
            ops.append(tile)
            writes.append((tile, arg))
        if writes:
            # registers first (they may need their own hoisted code), then one barrier pair
            prepared = [(t, self._prepare(arg, t)) for t, arg in writes]
            self.out.line("__syncthreads();")
            for tile, prep in prepared:
                self._write(tile, prep)
            self.out.line("__syncthreads();")
        sa, sb = ops
        if into is None:
            from compiler.cuda.exprs import Val  # noqa: F401

            into = self.declare(None, "2d", (m, n), "f32")
            self.emit_loop(self.ctx_for("2d", (m, n)), [f"{self.access(into, self.ctx_for('2d', (m, n)))} = 0.0f;"])
        self._fma_loop(into, sa, sb, m, n, kk)
        return into

    def _staged(self, arg: ir.Expr):
        from compiler.cuda.exprs import SharedTile

        name = arg.name if isinstance(arg, ir.Name) else None
        if isinstance(arg, ir.Call) and arg.func == "transpose" and isinstance(arg.args[0], ir.Name):
            name = arg.args[0].name
        v = self.vals.get(name) if name else None
        return v if isinstance(v, SharedTile) else None

    def stage_shared_let(self, name: str, load: ir.Load, role: str, transposed: bool):
        from compiler.cuda.exprs import SharedTile

        r, c = (self.size(s) for s in load.ty.shape)
        # operand tile (as dot sees it): a is [x, k], b is [k, x]
        tr_, tc_ = (c, r) if transposed else (r, c)
        k, x = (tc_, tr_) if role == "a" else (tr_, tc_)
        ptr = self.alloc_perm(k * (x + PAD))
        tile = SharedTile(ptr, role, k, x, x + PAD)
        arg = ir.Call("transpose", (load,), load.span, ty=ir.TileType("f32", (load.ty.shape[1], load.ty.shape[0]))) \
            if transposed else load
        prep = self._prepare(arg, tile)
        self.out.line("__syncthreads();")
        self._write(tile, prep)
        self.out.line("__syncthreads();")
        return tile

    def _prepare(self, arg: ir.Expr, tile):
        """What a staging write needs: a plain 2-D load (maybe transposed), or a register tile."""
        transposed = isinstance(arg, ir.Call) and arg.func == "transpose"
        inner = arg.args[0] if transposed else arg
        if isinstance(inner, ir.Load) and inner.ty.rank == 2:
            return ("load", inner, transposed)
        from compiler.cuda.exprs import Val

        if isinstance(inner, ir.Name) and isinstance(self.vals.get(inner.name), Val) and self.vals[inner.name].kind == "2d":
            return ("regs", self.vals[inner.name], transposed)
        return ("regs", self.materialize(inner, "2d"), transposed)

    def _write(self, tile, prep) -> None:
        what, src, transposed = prep
        if what == "regs":
            self._write_regs(tile, src, transposed)
        else:
            self._write_load(tile, src, transposed)

    def _write_regs(self, tile, val, transposed: bool) -> None:
        ctx = self.ctx_for("2d", val.shape)
        # tile coordinates (row, col) of the operand as dot sees it
        row, col = ("_c", "_r") if transposed else ("_r", "_c")
        k, x = (col, row) if tile.role == "a" else (row, col)
        self.emit_loop(ctx, [f"{tile.ptr}[{k} * {tile.ld} + {x}] = {self.access(val, ctx)};"])

    def _write_load(self, tile, load: ir.Load, transposed: bool) -> None:
        from compiler.cuda.exprs import Ctx

        # the load's own tile axes (u, v): v is the tensor-contiguous one
        # operand element (row, col) = load(u, v) or load(v, u) when transposed
        # buffer S[k][x]: role a -> operand (x, k); role b -> operand (k, x)
        op_row_is_x = tile.role == "a"
        u_is_x = op_row_is_x != transposed  # load axis 0 corresponds to x?
        direct = not u_is_x  # load axis 1 (contiguous) is x
        t = self.grid.threads
        kk, x = tile.k, tile.x
        ctx_dummy = Ctx((x, kk) if u_is_x else (kk, x), "2d", ("0", "0"), ("0", "0"), native=False)
        vec = self.vector_ok(load, Ctx(ctx_dummy.shape, "flat", ("_f",), ("_p",))) if False else self._vec_ok(load)
        contiguous_extent = x if direct else kk
        if vec and contiguous_extent % 4 == 0:
            total = kk * x // 4
            per_row = contiguous_extent // 4
            iters = (total + t - 1) // t
            self.out.line("#pragma unroll")
            self.out.open(f"for (int it_ = 0; it_ < {iters}; ++it_)")
            self.out.line(f"const int e_ = it_ * {t} + th_id;")
            if total % t:
                self.out.line(f"if (e_ < {total}) {{")
            self.out.line(f"const int q_ = (e_ % {per_row}) * 4; const int o_ = e_ / {per_row};")
            pos = ("o_", "q_")  # load axis 0 = outer, axis 1 = contiguous
            ptr, pred = self.element_address(self.tensor(load.tensor, load.span), load.index, pos)
            fill = self.elem(load.fill, None) if load.fill is not None else "0.0f"
            self.out.line(f"float4 v4 = make_float4({fill}, {fill}, {fill}, {fill});")
            ld = f"v4 = __ldg(reinterpret_cast<const float4*>(&{ptr}));"
            self.out.line(ld if pred == "true" else f"if ({pred}) {ld}")
            if direct:  # o_ is k, q_ is x
                self.out.line(f"*reinterpret_cast<float4*>(&{tile.ptr}[o_ * {tile.ld} + q_]) = v4;")
            else:  # o_ is x, q_ is k
                for q, comp in enumerate("xyzw"):
                    self.out.line(f"{tile.ptr}[(q_ + {q}) * {tile.ld} + o_] = v4.{comp};")
            if total % t:
                self.out.line("}")
            self.out.close()
            return
        total = kk * x
        iters = (total + t - 1) // t
        inner = x if direct else kk
        self.out.line("#pragma unroll")
        self.out.open(f"for (int it_ = 0; it_ < {iters}; ++it_)")
        self.out.line(f"const int e_ = it_ * {t} + th_id;")
        self.out.open(f"if (e_ < {total})")
        self.out.line(f"const int q_ = e_ % {inner}; const int o_ = e_ / {inner};")
        ctx = Ctx(ctx_dummy.shape, "2d", ("0", "0"), ("o_", "q_"), native=False)
        value = self.load_elem(load, ctx)
        if direct:
            self.out.line(f"{tile.ptr}[o_ * {tile.ld} + q_] = {value};")
        else:
            self.out.line(f"{tile.ptr}[q_ * {tile.ld} + o_] = {value};")
        self.out.close()
        self.out.close()

    def _vec_ok(self, load: ir.Load) -> bool:
        from compiler.cuda import analysis

        param = self.tensor(load.tensor, load.span)
        if param.dtype != "f32" or isinstance(load.index[-1], ir.SliceIndex):
            return False
        if self.dims_of(param)[-1] % 4:
            return False
        last = load.index[-1]
        if isinstance(last, ir.SliceRange):
            if analysis.int_range(last.start, self.ranges).divisor % 4:
                return False
            if self.size(last.extent) % 4:
                return False
        return True

    def _fma_loop(self, acc, sa, sb, m: int, n: int, kk: int) -> None:
        dr, dc = self.dists("2d", (m, n))
        if sa.x != m or sb.x != n or sa.k != kk or sb.k != kk:
            raise CompileError(self.out.span, "internal: dot operand shapes disagree")
        self.out.line("#pragma unroll 4" if kk > 16 else "#pragma unroll")
        self.out.open(f"for (int k_ = 0; k_ < {kk}; ++k_)")
        self.out.line(f"float ar_[{dr.count}], br_[{dc.count}];")
        for d, s, reg in ((dr, sa, "ar_"), (dc, sb, "br_")):
            if d.vector == 4:
                self.out.line("#pragma unroll")
                self.out.open(f"for (int g_ = 0; g_ < {d.count}; g_ += 4)")
                self.out.line(f"const float4 w4 = *reinterpret_cast<const float4*>("
                              f"&{s.ptr}[k_ * {s.ld} + {d.position('g_')}]);")
                self.out.line(f"{reg}[g_] = w4.x; {reg}[g_ + 1] = w4.y; {reg}[g_ + 2] = w4.z; {reg}[g_ + 3] = w4.w;")
                self.out.close()
            else:
                self.out.line("#pragma unroll")
                self.out.line(f"for (int g_ = 0; g_ < {d.count}; ++g_) {reg}[g_] = {s.ptr}[k_ * {s.ld} + {d.position('g_')}];")
        self.out.line("#pragma unroll")
        self.out.open(f"for (int _i = 0; _i < {dr.count}; ++_i)")
        self.out.line("#pragma unroll")
        self.out.line(f"for (int _j = 0; _j < {dc.count}; ++_j) "
                      f"{acc.cname}[_i][_j] = fmaf(ar_[_i], br_[_j], {acc.cname}[_i][_j]);")
        self.out.close()
        self.out.close()
