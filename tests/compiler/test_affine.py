"""Affine forms of index expressions, followed through lets."""

from __future__ import annotations

from compiler.frontend import ir, walk
from compiler.frontend.affine import Affine, affine_of
from compiler.frontend.ir import Size
from compiler.frontend.load import load_text

SOURCE = """@autotune(T in [32, 64], U in [8])
kernel k(a: tensor<f32>[N, M], b: tensor<i32>[N], n: i32, s: f32) {
  let base = ctx.block.x * T
  let two = 2 * base + 3
  var v: i32 = 0
  for j in range(0, M, U) {
    let e1 = base + j * U - n
    let e2 = two - ctx.block.y * (T + U) + N
    let e3 = min(base, 4)
    let e4 = j * n
    let e5 = v + 1
    let e6 = -(base + N * M)
    let e7 = base / 2
    a[base :+ T, j :+ U] = 1.0
    a[0 :+ T, ctx.block.y * U :+ U] = f32(e1 + e2 + e3 + e4 + e5 + e6 + e7) + s
  }
}
"""


def forms() -> dict[str, Affine | None]:
    kernel = load_text(SOURCE, "aff.phk").kernels[0]
    out = {}
    for stmt, env in walk.iter_stmts_with_env(kernel.body):
        if isinstance(stmt, ir.Let):
            out[stmt.name] = affine_of(stmt.value, env)
    return out


def test_follows_lets_and_scales():
    f = forms()
    T, U = Size.sym("T"), Size.sym("U")
    assert f["base"] == Affine((("block.x", T),), Size())
    assert f["two"] == Affine((("block.x", T * 2),), Size.const(3))
    assert f["e1"] == Affine((("block.x", T), ("j", U), ("n", Size.const(-1))), Size())
    assert f["e2"] == Affine((("block.x", T * 2), ("block.y", -(T + U))), Size.const(3) + Size.sym("N"))
    assert f["e6"] == Affine((("block.x", -T),), -(Size.sym("N") * Size.sym("M")))


def test_non_affine_is_none():
    f = forms()
    assert f["e3"] is None  # min
    assert f["e4"] is None  # product of two runtime values
    assert f["e5"] is None  # a var changes at run time
    assert f["e7"] is None  # division


def test_block_terms_and_coefficients():
    form = forms()["e2"]
    assert dict(form.block_terms()) == {"x": Size.sym("T") * 2, "y": -(Size.sym("T") + Size.sym("U"))}
    assert form.coeff("j") == Size()
    assert not form.is_constant
    assert str(forms()["base"]) == "(T)*block.x"


def test_grid_from_second_axis_through_tile_not_u():
    # ctx.block.y * U :+ U defines grid axis y over M
    kernel = load_text(SOURCE, "aff.phk").kernels[0]
    assert [(g.axis, g.dim, g.tile) for g in kernel.grid] == [("x", "N", "T"), ("y", "M", "U")]
