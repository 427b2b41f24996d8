"""The fp8 stage of the CUDA leaf compiler: an fp8 `dot` (e4m3 / e5m2 operands, docs/language.md
§8.1) becomes what the later stages know how to emit.

Scales. `dot(a, b, scale_a = sa, scale_b = sb)` means (sa ⊗ sb) ⊙ (a b): the later stages see
a plain dot times the outer product of the scales, `dot(a, b) * (expand(sa, axis = 1) *
expand(sb, axis = 0))`. In the GEMM form

    var acc: tile<f32>[M, N] = 0.0          (nothing between it and the loop touches acc)
    for k ... { ... acc += dot(a, b, scale_a = sa, scale_b = sb) ... }   (acc's only use there)

with scales that the loop does not change, the loop accumulates the plain dots and one
`acc *= S` follows it: Σ_k S ⊙ p_k and S ⊙ Σ_k p_k differ only in the rounding of f32
operations (S's product is the same f32 number either way), the freedom a schedule has (§9.1),
and each k tile's tensor-core sum is added into acc as it is (mainloops/wgmma/fp8_promote.py), with no scaling
pass over the accumulator per iteration.

Operands. Where the leaf runs its dots as Hopper warpgroup MMA (compute capability 9.0, a
wgmma schedule) and each fp8 dot reads both operands K-major from tensor loads with k = 128
(128 bytes: one swizzled row), the dot stays fp8: wgmma.mma_async ... k32 .e4m3 / .e5m2
(mainloops/wgmma/mma.py). Elsewhere its operands are converted to f16, which holds every e4m3 and e5m2 value
exactly, so the products and f32 sums are those of the fp8 dot and only the speed differs: on
a GPU without fp8 tensor cores (below 9.0 here; Blackwell runs the sm_90 PTX without wgmma) this
is said once per kernel on stderr.
"""

from __future__ import annotations

import dataclasses
import sys

from compiler import builtins
from compiler.cuda import analysis, target
from compiler.cuda.hoist import _rewrite_body
from compiler.frontend import ir, walk
from compiler.frontend.ir import ScalarType, Size, TileType

WGMMA_K = 128  # fp8 elements of one 128-byte swizzled K-major row
# k tiles the TMA ring also takes: two 128-byte blocks per operand row (mainloops/tma_ws/ring.py),
# each its own promoted chain (mainloops/wgmma/fp8_promote.py)
TMA_K = (WGMMA_K, 2 * WGMMA_K)
_NOTED: set[tuple[str, int]] = set()


def is_fp8_dot(e) -> bool:
    mode = e.precision.mode if builtins.is_contraction(e) and e.precision else None
    return mode in ir.FP8


def fp8_dots(kernel: ir.Kernel) -> list[ir.Call]:
    return [e for e in walk.iter_body_exprs(kernel.body) if is_fp8_dot(e)]


def lower(kernel: ir.Kernel, env: dict, schedule, cc: int, binding=None) -> ir.Kernel:
    dots = fp8_dots(kernel)
    if not dots:
        return kernel
    kernel = lower_scales(kernel)
    if cc == target.HOPPER and schedule.wgmma and not schedule.tma:
        wide = [d for d in fp8_dots(kernel) if d.args[0].ty.shape[1].evaluate(env) in TMA_K[1:]]
        if wide:  # the cp.async ring lays fp8 out in 128-byte rows only: not measured as f16 either
            from compiler.cuda.codegen import pruned

            raise pruned(kernel, binding, wide[0].span, "an fp8 k tile of 256 takes the TMA ring")
    if keeps_fp8(kernel, env, schedule, cc):
        return kernel
    if cc != target.HOPPER and (kernel.name, cc) not in _NOTED:
        _NOTED.add((kernel.name, cc))
        print(
            f"note: kernel '{kernel.name}': compute capability {target.cc_text(cc)} has no fp8 warpgroup "
            "MMA; its fp8 dots convert their operands to f16 (exactly) and run on mma.sync or CUDA cores",
            file=sys.stderr,
        )
    return to_f16(kernel)


# -- scales ----------------------------------------------------------------------------------------


def scale_product(call: ir.Call) -> ir.Expr:
    """expand(sa, axis = 1) * expand(sb, axis = 0), a scalar side as it is; typed."""
    s = dict(call.kwargs)
    sa, sb = s["scale_a"], s["scale_b"]

    def side(e: ir.Expr, axis: int) -> ir.Expr:
        if isinstance(e.ty, ScalarType):
            return e if e.ty.dtype == "f32" else _f32(e)
        e = e if e.ty.dtype == "f32" else _f32(e)
        shape = (e.ty.shape[0], Size.const(1)) if axis == 1 else (Size.const(1), e.ty.shape[0])
        k = ir.Const(axis, e.span, ir.I32)
        return ir.Call("expand", (e,), e.span, (("axis", k),), TileType("f32", shape))

    a, b = side(sa, 1), side(sb, 0)
    if isinstance(a.ty, TileType) and isinstance(b.ty, TileType):
        ty = TileType("f32", (a.ty.shape[0], b.ty.shape[1]))
    else:
        ty = a.ty if isinstance(a.ty, TileType) else b.ty
    return ir.BinOp("*", a, b, call.span, ty)


def _f32(e: ir.Expr) -> ir.Expr:
    ty = TileType("f32", e.ty.shape) if isinstance(e.ty, TileType) else ir.F32
    return ir.Call("f32", (e,), e.span, (), ty)


def _plain(call: ir.Call) -> ir.Call:
    kept = tuple((k, v) for k, v in call.kwargs if k not in ("scale_a", "scale_b"))
    return dataclasses.replace(call, kwargs=kept)


def lower_scales(kernel: ir.Kernel) -> ir.Kernel:
    stored = set(walk.stored_tensors(kernel))
    body = _hoist_scales(kernel.body, stored)

    def on_dot(e: ir.Call) -> ir.Expr:
        if not is_fp8_dot(e) or not any(k == "scale_a" for k, _ in e.kwargs):
            return e
        return ir.BinOp("*", _plain(e), scale_product(e), e.span, e.ty)

    return dataclasses.replace(kernel, body=_rewrite_body(body, on_dot))


def _hoist_scales(stmts: tuple[ir.Stmt, ...], stored: set[str]) -> tuple[ir.Stmt, ...]:
    """The GEMM form (module doc) in this block, and in the blocks of its loops. A scale that is a
    let of this block holding a tensor load is loaded after the loop instead (its let dropped
    when nothing else reads it): the accumulator and a per-column scale of 256 values would not
    both fit in registers through the loop."""
    out: list[ir.Stmt] = []
    zeroed: set[str] = set()  # vars declared = 0 in this block and untouched since
    loads: dict[str, ir.Expr] = {}  # lets of this block bound to loads of tensors never stored
    for s in stmts:
        if isinstance(s, ir.For):
            acc = _scaled_accumulation(s, zeroed, stored)
            body = _hoist_scales(s.body, stored)
            if acc is not None:
                i, assign = acc
                call = assign.value
                body = body[:i] + (dataclasses.replace(assign, value=_plain(call)),) + body[i + 1:]
                out.append(dataclasses.replace(s, body=body))
                late = tuple((k, _late(v, loads)) for k, v in call.kwargs)
                product = scale_product(dataclasses.replace(call, kwargs=late))
                out.append(ir.Assign(assign.name, "*=", product, assign.span))
                zeroed.discard(assign.name)
                continue
            s = dataclasses.replace(s, body=body)
        zeroed -= _names_in(s)
        if isinstance(s, ir.VarDecl) and isinstance(s.init, ir.Const) and s.init.value == 0:
            zeroed.add(s.name)
        if isinstance(s, ir.Let) and isinstance(s.value, ir.Load) and _invariant(s.value, set(), stored):
            loads[s.name] = s.value
        out.append(s)
    used = set().union(*(_names_in(t) - ({t.name} if isinstance(t, ir.Let) else set()) for t in out))
    return tuple(t for t in out if not (isinstance(t, ir.Let) and t.name in loads and t.name not in used))


def _late(e: ir.Expr, loads: dict[str, ir.Expr]) -> ir.Expr:
    return loads[e.name] if isinstance(e, ir.Name) and e.name in loads else e


def _scaled_accumulation(loop: ir.For, zeroed: set[str], stored: set[str]):
    """(index, statement) of `acc += dot(.., scale_a, scale_b)` at the top level of the loop's
    body when acc is a zeroed var used nowhere else in the loop and the scales are the same in
    every iteration; else None."""
    for i, s in enumerate(loop.body):
        if not (isinstance(s, ir.Assign) and s.op == "+=" and s.name in zeroed and is_fp8_dot(s.value)):
            continue
        scales = dict(s.value.kwargs)
        if "scale_a" not in scales:
            continue
        others = [t for j, t in enumerate(loop.body) if j != i]
        if any(s.name in _names_in(t) for t in others) or s.name in _names_in(s.value):
            continue
        inner = _declared_in(loop)
        if all(_invariant(scales[k], inner, stored) for k in ("scale_a", "scale_b")):
            return i, s
    return None


def _invariant(e: ir.Expr, inner: set[str], stored: set[str]) -> bool:
    for x in walk.iter_exprs(e):
        if isinstance(x, ir.Name) and (x.name in inner or x.kind == "var"):
            return False
        if isinstance(x, ir.Load) and x.tensor in stored:
            return False
    return True


def _declared_in(loop: ir.For) -> set[str]:
    names = {loop.var}
    for s in walk.iter_stmts(loop.body):
        if isinstance(s, ir.Let | ir.VarDecl):
            names.add(s.name)
        elif isinstance(s, ir.For):
            names.add(s.var)
    return names


def _names_in(node) -> set[str]:
    names = set()
    stmts = [node] if not isinstance(node, ir.For) else [node, *walk.iter_stmts(node.body)]
    for s in stmts:
        if isinstance(s, ir.Assign | ir.VarDecl):
            names.add(s.name)
        for x in walk.iter_exprs(s):
            if isinstance(x, ir.Name):
                names.add(x.name)
    return names


# -- operands --------------------------------------------------------------------------------------


def keeps_fp8(kernel: ir.Kernel, env: dict, schedule, cc: int) -> bool:
    """Whether the leaf's fp8 dots run as fp8 warpgroup MMA (module doc)."""
    if cc != target.HOPPER or not schedule.wgmma:
        return False
    return all(_k_major_operands(d, kernel, env, schedule) for d in fp8_dots(kernel))


def _k_major_operands(dot: ir.Call, kernel: ir.Kernel, env: dict, schedule) -> bool:
    a, b = dot.args
    k = a.ty.shape[1].evaluate(env)
    if k != WGMMA_K and not (schedule.tma and k in TMA_K):
        return False
    return _k_contiguous_load(a, kernel) and builtins.is_transpose(b) and (
        _k_contiguous_load(b.args[0], kernel))


def _k_contiguous_load(e: ir.Expr, kernel: ir.Kernel) -> bool:
    """A 2-D tensor load (or a let of one) whose tile's last axis runs along the tensor's last."""
    if isinstance(e, ir.Name):
        lets = [s for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let) and s.name == e.name]
        return len(lets) == 1 and _k_contiguous_load(lets[0].value, kernel)
    return analysis.is_plain_2d_load(e) and isinstance(e.index[-1], ir.SliceRange | ir.SliceAll)


def to_f16(kernel: ir.Kernel) -> ir.Kernel:
    def on_dot(e: ir.Call) -> ir.Expr:
        if not is_fp8_dot(e):
            return e
        args = tuple(_as_f16(x) for x in e.args)
        return dataclasses.replace(e, args=args, precision=dataclasses.replace(e.precision, mode="f16"))

    return dataclasses.replace(kernel, body=_rewrite_body(kernel.body, on_dot))


def _as_f16(x: ir.Expr) -> ir.Expr:
    """f16(x), inside a transpose (transpose(f16(y))): the operand is then written into its f16
    buffer in the tensor's orientation, with no f32 staging buffer for the transpose."""
    if builtins.is_transpose(x):
        inner = _as_f16(x.args[0])
        return dataclasses.replace(x, args=(inner,), ty=TileType("f16", x.ty.shape))
    return ir.Call("f16", (x,), x.span, (), TileType("f16", x.ty.shape))
