"""The checker's typing and shape rules on small kernels that are right."""

from __future__ import annotations

import pytest

from compiler.frontend import ir, walk
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import F32, I32, Size, TileType
from compiler.frontend.load import load_text

S = Size.sym


def lets(source: str) -> dict[str, ir.Type]:
    """The type of every let in the (only) kernel of `source`."""
    kernel = load_text(source, "ok.phk").kernels[0]
    return {s.name: s.value.ty for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let)}


def kernel_source(
    body: str,
    attrs: str = "@autotune(B in [32, 64], D in [64])",
    params: str = "a: tensor<f32>[N, D], h: tensor<bf16>[N], n: tensor<i32>[N], x: f32, k: i32",
) -> str:
    return f"{attrs}\nkernel t({params}) {{\n{body}\n}}\n"


def test_scalar_promotion_and_comparisons():
    types = lets(
        kernel_source(
            "  let p = k + 1\n  let q = k * x\n  let r = k / 2\n  let c = k < 3\n"
            "  let d = c and not c\n  let e = inf\n  let f = -inf"
        )
    )
    assert types == {"p": I32, "q": F32, "r": I32, "c": ir.BOOL, "d": ir.BOOL, "e": F32, "f": F32}


def test_loads_by_storage_type_and_dropped_axes():
    types = lets(
        kernel_source(
            "  let t = a[0 :+ B, :]\n  let row = a[k, :]\n  let one = a[k, 3]\n"
            "  let hb = h[0 :+ B]\n  let ni = n[0 :+ B]\n  let m = load(a[0 :+ B, :], fill = -inf)"
        )
    )
    assert types["t"] == TileType("f32", (S("B"), S("D")))
    assert types["row"] == TileType("f32", (S("D"),))
    assert types["one"] == F32
    assert types["hb"] == TileType("bf16", (S("B"),))  # bf16 storage loads as a narrow float
    assert types["ni"] == TileType("i32", (S("B"),))
    assert types["m"] == TileType("f32", (S("B"), S("D")))


def test_builtins():
    body = """  let t = a[0 :+ B, :]
  let rows = sum(t, axis = 1)
  let cols = max(t, axis = 0)
  let total = sum(rows, axis = 0)
  let tt = transpose(t)
  let d = dot(t, tt)
  let idx = arange(B)
  let col = expand(idx, axis = 1)
  let w = where(col < 3, t, 0.0)
  let f = full([B, 2 * B], k)
  let e = exp(t) * abs(k)
  let conv = i32(t)
  let mm = min(t, expand(rows, axis = 1))"""
    types = lets(kernel_source(body))
    assert types["rows"] == TileType("f32", (S("B"),))
    assert types["cols"] == TileType("f32", (S("D"),))
    assert types["total"] == F32
    assert types["tt"] == TileType("f32", (S("D"), S("B")))
    assert types["d"] == TileType("f32", (S("B"), S("B")))
    assert types["idx"] == TileType("i32", (S("B"),))
    assert types["col"] == TileType("i32", (S("B"), Size.const(1)))
    assert types["w"] == TileType("f32", (S("B"), S("D")))
    assert types["f"] == TileType("f32", (S("B"), S("B") * 2))
    assert types["e"] == TileType("f32", (S("B"), S("D")))
    assert types["conv"] == TileType("i32", (S("B"), S("D")))
    assert types["mm"] == TileType("f32", (S("B"), S("D")))


def test_fixed_dimension_equals_its_value():
    # D in [64]: tile[B, 64] is the same shape as tile[B, D]
    body = "  var acc: tile<f32>[B, 64] = 0.0\n  acc += a[0 :+ B, :]\n  acc = acc * 2.0\n  a[0 :+ B, :] = acc"
    load_text(kernel_source(body), "ok.phk")


def test_cluster_names_are_substituted_as_without_the_line():
    # B has one @autotune value; @cluster gives it others only at the cluster level, where the
    # body never runs (its leaves are checked without the line): on one GPU tile[B] is tile[32].
    body = "  var acc: tile<f32>[32] = 0.0\n  acc = h[0 :+ B]"
    with_line = kernel_source(body, attrs="@cluster(B in [1024, 4096])\n@autotune(B in [32], D in [64])")
    load_text(with_line, "ok.phk")
    load_text(kernel_source(body, attrs="@autotune(B in [32], D in [64])"), "ok.phk")


def test_broadcasting_literal_one_both_sides():
    body = "  let r = expand(arange(B), axis = 1)\n  let c = expand(arange(D), axis = 0)\n  let s = r * c + r"
    assert lets(kernel_source(body))["s"] == TileType("i32", (S("B"), S("D")))


def test_compound_assignment_and_scalar_store():
    body = """  var acc: tile<f32>[B, D] = a[0 :+ B, :]
  acc *= expand(sum(acc, axis = 1), axis = 1)
  var count: i32 = 0
  for j in range(ctx.block.x * B, min(k, N), B + 1) {
    count += 1
    acc -= 1
  }
  a[ctx.block.x * B :+ B, :] = acc
  a[0, :] = 0.0
  n[k] += count"""
    kernel = load_text(kernel_source(body), "ok.phk").kernels[0]
    assert [(g.axis, g.dim, g.tile) for g in kernel.grid] == [("x", "N", "B")]
    assert walk.stored_tensors(kernel) == ("a", "n")
    assert walk.loaded_tensors(kernel) == ("a",)
    assert walk.read_tensors(kernel) == ("a", "n")


def test_name_kinds():
    body = (
        "  let v = k + N + B + D\n  var w: f32 = x\n"
        "  for j in range(0, N, B) {\n    w = w + f32(j + v)\n  }"
    )
    kernel = load_text(kernel_source(body), "ok.phk").kernels[0]
    kinds = {e.name: e.kind for e in walk.iter_body_exprs(kernel.body) if isinstance(e, ir.Name)}
    assert kinds == {
        "k": "scalar",
        "N": "dim",
        "B": "tile",
        "D": "dim",
        "x": "scalar",
        "w": "var",
        "j": "loop",
        "v": "let",
    }


def test_search_values_expand():
    kernel = load_text(
        kernel_source("", attrs="@autotune(B in [16, 100], C in [8, 8], E in [3, 1, 2])"), "ok.phk"
    ).kernels[0]
    values = {d.name: d.values for d in kernel.autotune.dims}
    assert values == {"B": (16, 32, 64, 100), "C": (8,), "E": (3, 1, 2)}
    assert kernel.default_tile_values() == {"B": 16, "C": 8, "E": 3}


def test_statements_separated_by_semicolons_and_wrapped_lines():
    source = (
        "kernel t(a: tensor<f32>[N],\n         b: tensor<f32>[N]) {\n"
        "  let x = 1; let y = 2\n  b[x :+ 4] = a[\n    y :+ 4\n  ]\n}\n"
    )
    assert len(load_text(source, "ok.phk").kernels[0].body) == 3


def test_multiple_kernels():
    source = kernel_source("") + "\n// second\n" + kernel_source("", attrs="@launch(threads = 128)")
    source = source.replace("kernel t(", "kernel u(", 1)
    module = load_text(source, "two.phk")
    assert [k.name for k in module.kernels] == ["u", "t"]
    assert module.kernel("t").threads == 128


# ---- narrow floats, dot precision, grid indices ---------------------------------------------

NARROW_PARAMS = "h: tensor<bf16>[N, N], g: tensor<f16>[N, N], a: tensor<f32>[N, N], n: tensor<i32>[N, N]"


def test_narrow_floats_stay_narrow_only_through_data_movement():
    body = """  let hb = h[0 :+ B, 0 :+ B]
  let one = h[0, 0]
  let ht = transpose(hb)
  let he = expand(hb, axis = 0)
  let cast = bf16(a[0 :+ B, 0 :+ B])
  let from_i32 = f16(n[0 :+ B, 0 :+ B])
  let twice = hb + hb
  let neg = -hb
  let ab = abs(hb)
  let rows = max(hb, axis = 1)
  let mixed = where(hb < 0.0, hb, g[0 :+ B, 0 :+ B])
  let back = f32(hb)"""
    types = lets(kernel_source(body, attrs="@autotune(B in [32])", params=NARROW_PARAMS))
    bb = (S("B"), S("B"))
    assert types["hb"] == TileType("bf16", bb) and types["one"] == ir.ScalarType("bf16")
    assert types["ht"] == TileType("bf16", bb) and types["he"] == TileType("bf16", (Size.const(1),) + bb)
    assert types["cast"] == TileType("bf16", bb) and types["from_i32"] == TileType("f16", bb)
    for name in ("twice", "neg", "ab", "mixed", "back"):
        assert types[name] == TileType("f32", bb), name
    assert types["rows"] == TileType("f32", (S("B"),))


def _dots(source: str) -> list[ir.Call]:
    kernel = load_text(source, "ok.phk").kernels[0]
    return [e for e in walk.iter_body_exprs(kernel.body) if isinstance(e, ir.Call) and e.func == "dot"]


def test_dot_precision_is_resolved_on_every_dot():
    body = """  let x = dot(h[0 :+ B, 0 :+ B], transpose(h[0 :+ B, 0 :+ B]))
  let y = dot(g[0 :+ B, 0 :+ B], g[0 :+ B, 0 :+ B])
  let z = dot(a[0 :+ B, 0 :+ B], a[0 :+ B, 0 :+ B])
  let t = dot(a[0 :+ B, 0 :+ B], n[0 :+ B, 0 :+ B], precision = tf32)"""
    x, y, z, t = _dots(kernel_source(body, attrs="@autotune(B in [32])", params=NARROW_PARAMS))
    assert [d.precision.mode for d in (x, y, z, t)] == ["bf16", "f16", "f32", "tf32"]
    assert [d.precision.origin for d in (x, y, z, t)] == ["operands"] * 3 + ["dot"]
    assert (t.precision.span.line, t.precision.span.col) == (6, 65) and t.kwargs == ()
    assert x.precision.span == x.span
    assert all(d.ty == TileType("f32", (S("B"), S("B"))) for d in (x, y, z, t))


def test_kernel_precision_and_a_dot_that_overrides_it():
    body = """  let z = dot(a[0 :+ B, 0 :+ B], a[0 :+ B, 0 :+ B])
  let e = dot(a[0 :+ B, 0 :+ B], a[0 :+ B, 0 :+ B], precision = f32)
  let x = dot(h[0 :+ B, 0 :+ B], h[0 :+ B, 0 :+ B])"""
    source = kernel_source(body, attrs="@precision(tf32)\n@autotune(B in [32])", params=NARROW_PARAMS)
    z, e, x = _dots(source)
    assert (z.precision.mode, z.precision.origin, z.precision.span.line) == ("tf32", "kernel", 1)
    assert (e.precision.mode, e.precision.origin) == ("f32", "dot")
    assert x.precision.mode == "bf16"
    kernel = load_text(source, "ok.phk").kernels[0]
    assert kernel.precision == ir.Precision("tf32", kernel.precision.span)
    assert walk.dot_modes(kernel) == ("bf16", "f32", "tf32")


def test_grid_index_ties_an_axis_one_cta_per_element():
    source = """@autotune(BR in [64])
kernel k(q: tensor<bf16>[H, N, D], o: tensor<f32>[H, N, D]) {
  let head = ctx.block.y
  o[head, ctx.block.x * BR :+ BR, :] = q[head, ctx.block.x * BR :+ BR, :]
}
"""
    kernel = load_text(source, "ok.phk").kernels[0]
    assert [(g.axis, g.dim, g.tile) for g in kernel.grid] == [("x", "N", "BR"), ("y", "H", None)]
    from compiler.frontend.binding import bind

    assert bind(kernel, {"H": 5, "N": 130, "D": 8}).grid == (3, 5)


def test_a_grid_slice_wins_over_a_grid_index():
    # one partial result per CTA: the index by ctx.block.x is an ordinary index, x stays N / B
    source = """@autotune(B in [64])
kernel partial_sums(a: tensor<f32>[N], partial: tensor<f32>[P]) {
  partial[ctx.block.x] = sum(a[ctx.block.x * B :+ B], axis = 0)
}
"""
    kernel = load_text(source, "ok.phk").kernels[0]
    assert [(g.axis, g.dim, g.tile) for g in kernel.grid] == [("x", "N", "B")]


def test_an_offset_or_scaled_block_index_is_not_a_grid_index():
    for index in ("ctx.block.x + 1", "2 * ctx.block.x"):
        source = f"""kernel k(a: tensor<f32>[H, N], o: tensor<f32>[H, N]) {{
  o[{index}, 0 :+ 4] = a[0, 0 :+ 4]
}}
"""
        with pytest.raises(CompileError, match="ctx.block.x is used, but no slice"):
            load_text(source, "bad.phk")
