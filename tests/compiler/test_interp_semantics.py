"""The language's meaning, one rule at a time, on small kernels written as source text."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from compiler.frontend import ir
from compiler.frontend.binding import bind
from compiler.frontend.load import load_text
from compiler.interp.interpreter import run_kernel

BF16 = ml_dtypes.bfloat16


def run_src(src: str, dims: dict, tensors: dict, scalars: dict | None = None, tiles: dict | None = None):
    kernel = load_text(src).kernel()
    binding = bind(kernel, dims, {n: a.shape for n, a in tensors.items()}, tiles)
    run_kernel(kernel, binding, tensors, scalars or {})
    return tensors


COPY = """
@autotune(B in [8, 64])
kernel copy(a: tensor<{src}>[N], b: tensor<{dst}>[N]) {{
  let i = ctx.block.x * B
  b[i :+ B] = a[i :+ B] * 1.0
}}
"""


@pytest.mark.parametrize("dtype,name", [(np.float16, "f16"), (BF16, "bf16")])
def test_half_storage_round_trips_exactly(dtype, name):
    a = np.random.default_rng(0).standard_normal(100).astype(dtype)
    out = run_src(COPY.format(src=name, dst=name), {"N": 100}, {"a": a, "b": np.zeros(100, dtype)})
    assert out["b"].dtype == dtype
    assert np.array_equal(out["b"].view(np.uint16), a.view(np.uint16))


@pytest.mark.parametrize("dtype,name", [(np.float16, "f16"), (BF16, "bf16")])
def test_store_to_half_rounds_to_nearest(dtype, name):
    # Values between representable halves: round-to-nearest-even is what numpy/ml_dtypes' casts do.
    a = (1 + np.arange(100, dtype=np.float32) * 2.0**-12).astype(np.float32)
    out = run_src(COPY.format(src="f32", dst=name), {"N": 100}, {"a": a, "b": np.zeros(100, dtype)})
    assert np.array_equal(out["b"].view(np.uint16), a.astype(dtype).view(np.uint16))


def test_half_load_widens_to_f32_before_arithmetic():
    src = """
@autotune(B in [16])
kernel k(a: tensor<f16>[N], b: tensor<f32>[N]) {
  let i = ctx.block.x * B
  b[i :+ B] = a[i :+ B] * 3.0 + 70000.0
}
"""
    a = np.linspace(-2, 2, 40).astype(np.float16)
    out = run_src(src, {"N": 40}, {"a": a, "b": np.zeros(40, np.float32)})
    # 70000 does not fit f16 (max 65504): only f32 arithmetic gets this right.
    np.testing.assert_array_equal(out["b"], a.astype(np.float32) * np.float32(3) + np.float32(70000))


def test_load_outside_reads_fill_and_store_outside_is_dropped():
    src = """
@autotune(B in [8])
kernel shift(x: tensor<f32>[N], y: tensor<f32>[N], v: f32) {
  let i = ctx.block.x * B
  y[i + 3 :+ B] = load(x[i - 5 :+ B], fill = v) + load(x[i + 100 :+ B])
}
"""
    n = 21
    x = np.arange(1, n + 1, dtype=np.float32)
    y = np.full(n, -1, np.float32)
    out = run_src(src, {"N": n}, {"x": x, "y": y}, {"v": 7.5})
    # y[j] for j >= 3 written by the CTA covering j - 3, from x[j - 8] (fill 7.5 below 0)
    expect = np.full(n, -1, np.float32)
    for j in range(3, min(n, 3 + 3 * 8)):
        expect[j] = x[j - 8] if j - 8 >= 0 else 7.5
    np.testing.assert_array_equal(out["y"], expect)


def test_i32_division_floors_and_modulo_follows_it():
    src = """
@autotune(B in [4])
kernel k(a: tensor<i32>[N], q: tensor<i32>[N], r: tensor<i32>[N], t: tensor<i32>[N], d: i32) {
  let i = ctx.block.x * B
  let x = a[i :+ B]
  q[i :+ B] = x / d
  r[i :+ B] = x % d
  t[i :+ B] = i32(f32(x) / 2.0) + 0 * x
}
"""
    a = np.arange(-10, 10, dtype=np.int32)
    for d in (3, -3):
        out = run_src(src, {"N": 20}, {"a": a, "q": np.zeros(20, np.int32), "r": np.zeros(20, np.int32),
                                      "t": np.zeros(20, np.int32)}, {"d": d})
        np.testing.assert_array_equal(out["q"], a // d)
        np.testing.assert_array_equal(out["r"], a % d)
        np.testing.assert_array_equal(out["t"], np.trunc(a / 2).astype(np.int32))  # C-style truncation


def test_mixed_i32_f32_promotes_to_f32():
    src = """
@autotune(B in [4])
kernel k(a: tensor<i32>[N], b: tensor<f32>[N]) {
  let i = ctx.block.x * B
  b[i :+ B] = a[i :+ B] / 2 + a[i :+ B] * 0.5 + f32(arange(B))
}
"""
    a = np.arange(-5, 7, dtype=np.int32)
    out = run_src(src, {"N": 12}, {"a": a, "b": np.zeros(12, np.float32)})
    np.testing.assert_array_equal(out["b"], (a // 2) + a * 0.5 + np.tile(np.arange(4), 3))


@pytest.mark.parametrize("op,func", [("+=", np.add), ("-=", np.subtract), ("*=", np.multiply),
                                     ("/=", np.divide)])
def test_compound_store_is_read_modify_write(op, func):
    src = f"""
@autotune(B in [16])
kernel k(a: tensor<f32>[N], c: tensor<f32>[N]) {{
  let i = ctx.block.x * B
  c[i :+ B] {op} a[i :+ B]
}}
"""
    a = np.arange(1, 41, dtype=np.float32)
    c = np.linspace(1, 2, 40, dtype=np.float32)
    expect = func(c, a)
    out = run_src(src, {"N": 40}, {"a": a, "c": c.copy()})
    np.testing.assert_array_equal(out["c"], expect)


def test_loop_with_per_cta_bound_masks_assignments_and_stores():
    src = """
@autotune(B in [1])
kernel k(out: tensor<i32>[N], hits: tensor<i32>[N, N]) {
  let i = ctx.block.x * B
  var count: i32 = 0
  for j in range(ctx.block.x, N, 2) {
    count += 1
    hits[i :+ B, j :+ 1] = i32(full([B, 1], 1.0))
  }
  out[i :+ B] = i32(full([B], f32(count)))
}
"""
    n = 7
    out = run_src(src, {"N": n}, {"out": np.zeros(n, np.int32), "hits": np.zeros((n, n), np.int32)})
    np.testing.assert_array_equal(out["out"], [len(range(b, n, 2)) for b in range(n)])
    expect = np.zeros((n, n), np.int32)
    for b in range(n):
        expect[b, b:n:2] = 1
    np.testing.assert_array_equal(out["hits"], expect)


def test_vars_declared_in_loops_and_lets_are_scoped_per_iteration():
    src = """
@autotune(B in [4])
kernel k(x: tensor<f32>[N], y: tensor<f32>[N]) {
  let i = ctx.block.x * B
  var total: tile<f32>[B] = 0.0
  for j in range(0, 3, 1) {
    var t: tile<f32>[B] = x[i :+ B]
    t *= f32(j)
    total += t
  }
  y[i :+ B] = total
}
"""
    x = np.arange(8, dtype=np.float32)
    out = run_src(src, {"N": 8}, {"x": x, "y": np.zeros(8, np.float32)})
    np.testing.assert_array_equal(out["y"], 3 * x)


def test_index_slices_drop_axes_and_whole_axes_load_everything():
    src = """
@autotune(B in [2])
kernel k(x: tensor<f32>[R, C], y: tensor<f32>[C, R], s: tensor<f32>[R]) {
  let r = ctx.block.x * B
  let rows = x[r :+ B, :]
  y[:, r :+ B] = transpose(rows)
  s[r :+ B] = sum(rows, axis = 1) + x[2, 3]
}
"""
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    tensors = {"x": x, "y": np.zeros((3, 5), np.float32), "s": np.zeros(5, np.float32)}
    out = run_src(src, {"R": 5, "C": 3}, tensors)
    np.testing.assert_array_equal(out["y"], x.T)
    # x[2, 3] is outside (C = 3): a single index outside reads 0.
    np.testing.assert_array_equal(out["s"], x.sum(axis=1))


def test_reductions_where_minmax_full_and_arange():
    src = """
@autotune(BR in [4], BC in [8])
kernel k(x: tensor<f32>[R, C], a: tensor<f32>[R], b: tensor<f32>[R], c: tensor<f32>[R, C]) {
  let r = ctx.block.x * BR
  let t = load(x[r :+ BR, 0 :+ BC], fill = inf)
  a[r :+ BR] = min(t, axis = 1)
  b[r :+ BR] = max(where(t < 0.5, t, full([BR, BC], -1.0)), axis = 1)
  let cols = expand(arange(BC), axis = 0)
  c[r :+ BR, 0 :+ BC] = max(min(t, 0.75), f32(cols) * 0.0 - abs(t))
}
"""
    rng = np.random.default_rng(3)
    x = rng.random((10, 6)).astype(np.float32)
    tensors = {"x": x, "a": np.zeros(10, np.float32), "b": np.zeros(10, np.float32),
               "c": np.zeros((10, 6), np.float32)}
    out = run_src(src, {"R": 10, "C": 6}, tensors)
    np.testing.assert_array_equal(out["a"], x.min(axis=1))
    np.testing.assert_array_equal(out["b"], np.where(x < 0.5, x, -1.0).max(axis=1))
    np.testing.assert_array_equal(out["c"], np.maximum(np.minimum(x, 0.75), -np.abs(x)))


def test_dot_with_shared_grid_axes_is_batched():
    """A[x, z] . B[z, y]-style dependences: z is shared (batch), x only in A, y only in B."""
    src = """
@autotune(BM in [4], BN in [8], BK in [5], BH in [1])
kernel bmm(A: tensor<f32>[H, M, K], B: tensor<f32>[H, K, N], C: tensor<f32>[H, M, N]) {
  let m = ctx.block.x * BM
  let n = ctx.block.y * BN
  let h = ctx.block.z * BH
  var acc: tile<f32>[BM, BN] = 0.0
  for k in range(0, K, BK) {
    acc += dot(A[h, m :+ BM, k :+ BK], B[h, k :+ BK, n :+ BN])
  }
  C[h :+ BH, m :+ BM, n :+ BN] = expand(acc, axis = 0)
}
"""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 10, 12)).astype(np.float32)
    b = rng.standard_normal((3, 12, 17)).astype(np.float32)
    assert [g.axis for g in load_text(src).kernel().grid] == ["x", "y", "z"]
    out = run_src(src, {"H": 3, "M": 10, "K": 12, "N": 17},
                  {"A": a, "B": b, "C": np.zeros((3, 10, 17), np.float32)})
    # 12-term f32 dot products of unit normals: error well below 1e-5 (see test_interp_examples).
    np.testing.assert_allclose(out["C"], a.astype(np.float64) @ b, rtol=0, atol=1e-5)


def test_irregular_starts_use_the_general_gather_and_scatter():
    """Starts that are no arithmetic progression over the grid (block^2) and two tensor axes
    driven by one grid axis (diagonal blocks) still load and store the right elements."""
    src = """
@autotune(B in [3])
kernel k(x: tensor<f32>[N, N], d: tensor<f32>[N, N], s: tensor<f32>[N]) {
  let b = ctx.block.x * B
  let q = ctx.block.x * ctx.block.x
  d[b :+ B, b :+ B] = x[b :+ B, b :+ B] * 2.0
  s[q :+ B] = load(x[0, q :+ B], fill = -1.0)
}
"""
    n = 10
    x = np.arange(n * n, dtype=np.float32).reshape(n, n)
    out = run_src(src, {"N": n}, {"x": x, "d": np.zeros((n, n), np.float32), "s": np.zeros(n, np.float32)})
    expect_d = np.zeros((n, n), np.float32)
    for g in range(4):
        sl = slice(3 * g, 3 * g + 3)
        expect_d[sl, sl] = 2 * x[sl, sl]
    np.testing.assert_array_equal(out["d"], expect_d)
    expect_s = np.zeros(n, np.float32)
    for g in range(4):
        for t in range(3):
            if g * g + t < n:
                expect_s[g * g + t] = x[0, g * g + t]
    np.testing.assert_array_equal(out["s"], expect_s)


def test_matmul_result_is_exact_on_small_integers():
    """With small integer values every f32 product and partial sum is exact, so any tiling must
    give exactly A @ B: this pins down the per-CTA bookkeeping of the batched dot."""
    from tests.compiler.test_interp_examples import EXAMPLES

    kernel = load_text((EXAMPLES / "matmul_plain.phk").read_text()).kernel()
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (50, 33)).astype(np.float32)
    b = rng.integers(-3, 4, (33, 70)).astype(np.float32)
    for tiles in ({"TILE_M": 32, "TILE_N": 128, "TILE_K": 8}, {"TILE_M": 128, "TILE_N": 32, "TILE_K": 32}):
        c = np.zeros((50, 70), np.float32)
        binding = bind(kernel, {"M": 50, "N": 70, "K": 33}, tile_values=tiles)
        run_kernel(kernel, binding, {"A": a, "B": b, "C": c}, {})
        np.testing.assert_array_equal(c, a @ b)


def test_stores_sticking_out_on_either_side_are_clipped():
    src = """
@autotune(B in [2])
kernel k(x: tensor<f32>[N], y: tensor<f32>[N], z: tensor<f32>[R, N]) {
  let i = ctx.block.x * B
  y[i - 13 :+ B] = x[i :+ B]
  z[R, i :+ B] = x[i :+ B]
  z[1, 0 - 1 :+ 3] = x[0 :+ 3] * 2.0
  z[0, i + 1 :+ B] = x[i :+ B] + 1.0
}
"""
    n, r = 21, 3
    x = np.arange(1, n + 1, dtype=np.float32)
    tensors = {"x": x, "y": np.zeros(n, np.float32), "z": np.zeros((r, n), np.float32)}
    out = run_src(src, {"N": n, "R": r}, tensors)
    expect_y = np.zeros(n, np.float32)
    expect_y[: n - 13] = x[13:]
    np.testing.assert_array_equal(out["y"], expect_y)
    expect_z = np.zeros((r, n), np.float32)
    expect_z[1, :2] = 2 * x[1:3]
    expect_z[0, 1:] = x[:-1] + 1
    np.testing.assert_array_equal(out["z"], expect_z)


def test_a_let_keeps_the_value_a_var_had_when_it_was_bound():
    """Compound assignments may update an accumulator in place; a let bound to the var before
    must still see the old value."""
    src = """
@autotune(B in [4])
kernel k(x: tensor<f32>[N], y: tensor<f32>[N], z: tensor<f32>[N]) {
  let i = ctx.block.x * B
  var acc: tile<f32>[B] = 0.0
  for j in range(0, 3, 1) {
    acc += x[i :+ B]
  }
  let snapshot = acc
  acc += x[i :+ B]
  acc *= 2.0
  y[i :+ B] = snapshot
  z[i :+ B] = acc
}
"""
    x = np.arange(8, dtype=np.float32)
    out = run_src(src, {"N": 8}, {"x": x, "y": np.zeros(8, np.float32), "z": np.zeros(8, np.float32)})
    np.testing.assert_array_equal(out["y"], 3 * x)
    np.testing.assert_array_equal(out["z"], 8 * x)


FUSABLE = """
@autotune(BM in [4], BN in [8], BK in [3])
kernel k(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N], lo: i32) {
  let m = ctx.block.x * BM
  let n = ctx.block.y * BN
  var acc: tile<f32>[BM, BN] = 1.0
  for kt in range(lo, K + 2, BK) {
    let a = A[m :+ BM, kt + 1 :+ BK]
    acc += dot(a, B[1 + kt :+ BK, n :+ BN])
  }
  C[m :+ BM, n :+ BN] = acc
}
"""


def _fusable_reference(a, b, lo):
    """The loop reads K-chunks starting at kt + 1 for kt = lo, lo + 3, ... < K + 2 (zeros past K)."""
    k = a.shape[1]
    out = np.ones((a.shape[0], b.shape[1]))
    for kt in range(lo, k + 2, 3):
        for kk in range(kt + 1, kt + 4):
            if 0 <= kk < k:
                out += np.outer(a[:, kk], b[kk, :])
    return out


@pytest.mark.parametrize("lo", [-4, 0, 2, 30])
def test_dot_accumulating_loops_fused_or_not_give_the_same_sums(lo, monkeypatch):
    from compiler.interp import interpreter as interp

    rng = np.random.default_rng(6)
    a = rng.integers(-3, 4, (10, 13)).astype(np.float32)  # small integers: exact sums
    b = rng.integers(-3, 4, (13, 9)).astype(np.float32)
    expect = _fusable_reference(a, b, lo)
    calls = []
    real = interp.match_dot_loop
    monkeypatch.setattr(interp, "match_dot_loop", lambda loop: calls.append(loop) or real(loop))
    fused = run_src(FUSABLE, {"M": 10, "N": 9, "K": 13}, {"A": a, "B": b, "C": np.zeros((10, 9), np.float32)},
                    {"lo": lo})["C"]
    np.testing.assert_array_equal(fused, expect)
    if lo < 13 + 2:
        assert calls and real(calls[0]) is not None  # the loop did take the fused path
    monkeypatch.setattr(interp, "match_dot_loop", lambda loop: None)
    plain = run_src(FUSABLE, {"M": 10, "N": 9, "K": 13}, {"A": a, "B": b, "C": np.zeros((10, 9), np.float32)},
                    {"lo": lo})["C"]
    np.testing.assert_array_equal(plain, expect)


def test_loops_that_are_not_plain_dot_sums_are_not_fused():
    from compiler.interp.fusion import match_dot_loop

    def loop_of(body):
        src = f"""
@autotune(B in [4])
kernel k(A: tensor<f32>[N, N], C: tensor<f32>[N, N]) {{
  let i = ctx.block.x * B
  var acc: tile<f32>[B, B] = 0.0
  for kt in range(0, N, B) {{
{body}
  }}
  C[i :+ B, 0 :+ B] = acc
}}
"""
        return next(s for s in load_text(src).kernel().body if isinstance(s, ir.For))

    assert match_dot_loop(loop_of("    acc += dot(A[i :+ B, kt :+ B], A[kt :+ B, 0 :+ B])")) is not None
    for body in (
        "    acc += dot(A[i :+ B, kt :+ B], A[kt :+ B, kt :+ B])",  # kt in a second axis
        "    acc += dot(A[kt :+ B, i :+ B], A[kt :+ B, 0 :+ B])",  # kt on a's rows
        "    acc += dot(A[i :+ B, 2 * kt :+ B], A[2 * kt :+ B, 0 :+ B])",  # not kt + c
        "    acc = acc + dot(A[i :+ B, kt :+ B], A[kt :+ B, 0 :+ B])",  # not +=
        "    acc += dot(A[i :+ B, kt :+ B], A[kt :+ B, 0 :+ B]) * 2.0",  # not a bare dot
        "    let a = A[i :+ B, kt :+ B]\n    C[i :+ B, kt :+ B] = a\n    acc += dot(a, a)",  # a store
    ):
        assert match_dot_loop(loop_of(body)) is None, body


def test_far_apart_windows_partly_outside_read_the_fill():
    src = """
@autotune(B in [2])
kernel k(x: tensor<f32>[N], y: tensor<f32>[M]) {
  let i = ctx.block.x * B
  y[i :+ B] = load(x[ctx.block.x * 1000 - 1 :+ B], fill = 9.0)
}
"""
    x = np.arange(3000, dtype=np.float32)
    out = run_src(src, {"N": 3000, "M": 10}, {"x": x, "y": np.zeros(10, np.float32)})
    np.testing.assert_array_equal(out["y"], [9, 0, 999, 1000, 1999, 2000, 2999, 9, 9, 9])


def test_grid_indices_on_two_axes_and_a_ragged_slice():
    """Batch on grid y and heads on grid z by grid indices, rows on x by a grid slice: every
    [b, h] block of rows gets its own scale, and rows past N are dropped."""
    src = """@autotune(BR in [16])
kernel scale_heads(x: tensor<f32>[B, H, N, D], s: tensor<f32>[B, H], y: tensor<f32>[B, H, N, D]) {
  let b = ctx.block.y
  let h = ctx.block.z
  y[b, h, ctx.block.x * BR :+ BR, :] = x[b, h, ctx.block.x * BR :+ BR, :] * s[b, h]
}
"""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 37, 5)).astype(np.float32)
    s = rng.standard_normal((2, 3)).astype(np.float32)
    out = run_src(src, {"B": 2, "H": 3, "N": 37, "D": 5}, {"x": x, "s": s, "y": np.zeros_like(x)})
    assert np.array_equal(out["y"], x * s[:, :, None, None])
