"""The interpreter's model of precision: the bf16()/f16() casts and TF32 rounding (docs/language.md
§4.1), the precision of each dot, and the multi-head attention examples in bf16 and TF32 against
float64 references at ragged sizes.

Error bounds follow from the operation. Rounding to p significant bits has relative error at most u
= 2^-p: u = 2^-8 for bf16 (8 bits), 2^-11 for f16 and TF32 (11 bits). In attention, O = sum_j p_j
v_j / l; rounding each p_j (or v_j) with relative error u moves O by at most u * sum_j p_j |v_j| /
l; rounding the output itself adds u * |O|. The f32 arithmetic around it is a further sqrt(n) *
2^-24 term, far smaller.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from compiler.frontend.binding import bind
from compiler.frontend.load import load_file, load_text
from compiler.interp import values as val
from compiler.interp.interpreter import run_kernel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BF16 = ml_dtypes.bfloat16
EPS32 = 2.0**-24


def rounded(x: np.ndarray, bits: int) -> np.ndarray:
    """x (normal numbers) rounded to `bits` significant bits, to nearest, ties to even, in float64,
    by frexp: a reference written apart from the interpreter's bit arithmetic and ml_dtypes."""
    mantissa, exponent = np.frexp(x.astype(np.float64))
    return np.ldexp(np.round(mantissa * 2.0**bits), exponent - bits)  # np.round: half to even


# ---------------------------------------------------------------------------------- rounding


@pytest.mark.parametrize(("kind", "bits"), [("bf16", 8), ("f16", 11), ("tf32", 11)])
def test_round_to_matches_frexp_reference(kind, bits):
    x = np.random.default_rng(1).standard_normal(20000).astype(np.float32) * 100
    ref = rounded(x, bits)
    got = val.round_to(kind, x)
    assert got.dtype == np.float32 and np.array_equal(got.astype(np.float64), ref)


def test_ties():
    one = np.float32(1.0)
    # halfway between 1 and the next bf16 (1 + 2^-7): ties to even -> 1; 1 + 3*2^-8 -> 1 + 2^-6
    assert val.round_to("bf16", np.array([one + 2.0**-8, one + 3 * 2.0**-8], np.float32)).tolist() == [
        1.0, 1.0 + 2.0**-6]
    assert val.round_to("f16", np.array([one + 2.0**-11], np.float32)).tolist() == [1.0]
    # TF32 (cvt.rn.tf32.f32): ties to even, on both signs
    halfway = np.array([1 + 2.0**-11, -(1 + 2.0**-11), 1 + 3 * 2.0**-11, -(1 + 3 * 2.0**-11)], np.float32)
    assert val.round_to("tf32", halfway).tolist() == [1.0, -1.0, 1 + 2.0**-9, -(1 + 2.0**-9)]


def test_specials_and_overflow():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 3.4e38, 70000.0, 1e-45], np.float32)
    tf32 = val.round_to("tf32", x)
    assert np.isinf(tf32[0]) and tf32[0] > 0 and np.isinf(tf32[1]) and tf32[1] < 0 and np.isnan(tf32[2])
    assert np.signbit(tf32[4]) and tf32[7] == 0.0  # subnormals round on the same 10 fraction bits
    assert val.round_to("tf32", np.array([2.0**-130], np.float32))[0] == 2.0**-130
    assert np.isinf(val.round_to("tf32", np.array([np.finfo(np.float32).max]))[0])  # rounds past max
    f16 = val.round_to("f16", x)
    assert np.isinf(f16[6]) and f16[7] == 0.0  # 70000 > 65504; 1e-45 underflows
    assert np.isinf(val.round_to("bf16", np.array([np.finfo(np.float32).max]))[0])
    assert val.round_to("bf16", np.array([16777217], np.int32)).tolist() == [16777216.0]  # via f32


# ------------------------------------------------------------------------------ casts, loads

CASTS = """@autotune(B in [32])
kernel casts(a: tensor<f32>[N], h: tensor<bf16>[N], i: tensor<i32>[N], ob: tensor<f32>[N],
             oh: tensor<f32>[N], oi: tensor<f32>[N], of: tensor<bf16>[N]) {
  let base = ctx.block.x * B
  ob[base :+ B] = f32(bf16(a[base :+ B]))
  oh[base :+ B] = f16(a[base :+ B]) * 1.0
  oi[base :+ B] = bf16(i[base :+ B])
  of[base :+ B] = load(h[base :+ B], fill = 0.1)
}
"""


def test_casts_and_a_narrow_fill_in_a_kernel():
    kernel = load_text(CASTS, "casts.phk").kernel()
    n = 45
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(n) * 1000).astype(np.float32)
    tensors = {"a": a, "h": rng.standard_normal(n).astype(BF16),
               "i": rng.integers(-300, 300, n, dtype=np.int32),
               "ob": np.zeros(n, np.float32), "oh": np.zeros(n, np.float32), "oi": np.zeros(n, np.float32),
               "of": np.zeros(n, BF16)}
    binding = bind(kernel, {"N": n}, {k: v.shape for k, v in tensors.items()})
    run_kernel(kernel, binding, tensors, {})
    assert np.array_equal(tensors["ob"], rounded(a, 8).astype(np.float32))
    assert np.array_equal(tensors["oh"], rounded(a, 11).astype(np.float32))
    assert np.array_equal(tensors["oi"], rounded(tensors["i"].astype(np.float32), 8))
    assert np.array_equal(tensors["of"], tensors["h"])  # inside the tensor: the values themselves


def test_narrow_fill_is_rounded():
    source = """kernel k(h: tensor<bf16>[N], o: tensor<f32>[M]) {
  o[0 :+ M] = f32(load(h[0 :+ M], fill = 0.1))
}
"""
    kernel = load_text(source, "fill.phk").kernel()
    tensors = {"h": np.ones(3, BF16), "o": np.zeros(5, np.float32)}
    run_kernel(kernel, bind(kernel, {"N": 3, "M": 5}), tensors, {})
    assert tensors["o"].tolist() == [1, 1, 1, float(np.float32(0.1).astype(BF16)), float(
        np.float32(0.1).astype(BF16))]


# ----------------------------------------------------------------------------- dot precision

PRECISIONS = """@precision(tf32)
kernel p(a: tensor<f32>[M, K], b: tensor<f32>[K, N], t: tensor<f32>[M, N], e: tensor<f32>[M, N]) {
  t[0 :+ M, 0 :+ N] = dot(a[0 :+ M, 0 :+ K], b[0 :+ K, 0 :+ N])
  e[0 :+ M, 0 :+ N] = dot(a[0 :+ M, 0 :+ K], b[0 :+ K, 0 :+ N], precision = f32)
}
"""


def test_kernel_tf32_and_a_dot_that_asks_for_f32():
    kernel = load_text(PRECISIONS, "p.phk").kernel()
    m, k, n = 9, 50, 7
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    tensors = {"a": a, "b": b, "t": np.zeros((m, n), np.float32), "e": np.zeros((m, n), np.float32)}
    run_kernel(kernel, bind(kernel, {"M": m, "K": k, "N": n}), tensors, {})
    bound = 8 * np.sqrt(k) * EPS32 * (np.abs(a.astype(np.float64)) @ np.abs(b))
    exact = a.astype(np.float64) @ b
    tf32 = rounded(a, 11) @ rounded(b, 11)
    assert np.all(np.abs(tensors["e"] - exact) <= bound)
    assert np.all(np.abs(tensors["t"] - tf32) <= bound)
    assert np.any(np.abs(tensors["t"] - exact) > bound)  # the two precisions do differ here


# ------------------------------------------------------------------- multi-head attention


def attention_reference(q, k, v, scale, causal):
    """float64 softmax(scale q k^T) v per head, with sum_j p_j |v_j| / l for the error bound."""
    s = np.einsum("hnd,hmd->hnm", q, k) * scale
    if causal:
        n = q.shape[1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    l = p.sum(axis=-1, keepdims=True)
    return np.einsum("hnm,hmd->hnd", p, v) / l, np.einsum("hnm,hmd->hnd", p, np.abs(v)) / l


def run_mha(name, h, n, d, dtype, tiles, seed=0):
    kernel = load_file(EXAMPLES / f"{name}.phk").kernel()
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((h, n, d)).astype(np.float32).astype(dtype) for _ in range(3))
    tensors = {"Q": q, "K": k, "V": v, "O": np.full((h, n, d), np.nan, np.float32).astype(dtype)}
    binding = bind(kernel, {"H": h, "N": n, "D": d}, {x: a.shape for x, a in tensors.items()}, tiles)
    assert binding.grid == (-(-n // binding.tile_values["BR"]), h)  # one launch: rows x heads
    run_kernel(kernel, binding, tensors, {"scale": 1 / np.sqrt(d)})
    return tensors["O"].astype(np.float64), q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)


POINTS = [None, {"BR": 128, "BC": 32}, {"BR": 64, "BC": 128}]


NARROW = [("mha_bf16", False, BF16, 2.0**-8), ("causal_mha_bf16", True, BF16, 2.0**-8),
          ("mha_f16", False, np.float16, 2.0**-11)]


@pytest.mark.parametrize("tiles", POINTS)
@pytest.mark.parametrize(("name", "causal", "dtype", "u"), NARROW)
def test_narrow_attention(name, causal, dtype, u, tiles):
    # q, k, v are bf16/f16 values (exact in float64); P is rounded to that type for the second dot
    # and O when stored: each a relative error of at most u (2^-8 bf16, 2^-11 f16; N(0, 1)
    # values are far from f16's range ends).
    out, q, k, v = run_mha(name, 3, 77, 24, dtype, tiles)
    ref, weight = attention_reference(q, k, v, 1 / np.sqrt(24), causal)
    bound = 1.01 * u * (weight + np.abs(ref)) + 1e-6
    assert np.all(np.abs(out - ref) <= bound), np.max(np.abs(out - ref) - bound)


@pytest.mark.parametrize("tiles", POINTS)
def test_tf32_attention(tiles):
    # Both dots round their operands to TF32 (u = 2^-11): Q and K move S by u * scale * |q||k|
    # (twice), which moves O by up to that times max|v|; P and V by u each.
    out, q, k, v = run_mha("mha_tf32", 2, 70, 16, np.float32, tiles, seed=4)
    scale = 1 / np.sqrt(16)
    ref, weight = attention_reference(q, k, v, scale, False)
    u = 2.0**-11
    s_error = 2 * u * scale * np.einsum("hnd,hmd->hnm", np.abs(q), np.abs(k)).max(axis=-1, keepdims=True)
    vmax = np.abs(v).max(axis=1, keepdims=True)
    bound = 1.01 * (2 * u * weight + 2 * s_error * vmax) + 1e-6
    assert np.all(np.abs(out - ref) <= bound), np.max(np.abs(out - ref) - bound)
    # and not the exact f32 result: dropping the rounding would shrink the error well below u
    exact = attention_reference(q, k, v, scale, False)[0]
    assert np.max(np.abs(out - exact)) > 64 * EPS32 * np.max(weight)


def test_heads_are_independent():
    """Head h of a multi-head launch equals a launch with only that head."""
    many = run_mha("mha_bf16", 3, 50, 16, BF16, None, seed=5)
    kernel = load_file(EXAMPLES / "mha_bf16.phk").kernel()
    q, k, v = (x.astype(np.float32).astype(BF16) for x in many[1:])
    for h in range(3):
        tensors = {"Q": q[h:h + 1].copy(), "K": k[h:h + 1].copy(), "V": v[h:h + 1].copy(),
                   "O": np.zeros((1, 50, 16), BF16)}
        run_kernel(kernel, bind(kernel, {"H": 1, "N": 50, "D": 16}), tensors, {"scale": 0.25})
        assert np.array_equal(tensors["O"][0].astype(np.float64), many[0][h])


def test_general_paths_agree_for_heads(monkeypatch):
    """The strided views over the heads axis are an optimisation: gather/scatter agrees."""
    from compiler.interp import interpreter as interp
    from compiler.interp import memory as interp_memory

    fast = run_mha("mha_bf16", 2, 40, 8, BF16, {"BR": 64, "BC": 32}, seed=6)[0]
    monkeypatch.setattr(interp_memory, "_plan", lambda windows: None)
    monkeypatch.setattr(interp, "match_dot_loop", lambda loop: None)
    general = run_mha("mha_bf16", 2, 40, 8, BF16, {"BR": 64, "BC": 32}, seed=6)[0]
    assert np.array_equal(fast, general)
