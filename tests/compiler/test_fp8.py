"""fp8 operands (docs/language.md §4.2, §8.1): the type rules with their file:line:col errors, the
interpreter's meaning against a float64 reference of the fp8 values (ml_dtypes), and fp8 .npy
files through storage."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from user_errors import assert_reported

from common import storage
from compiler.frontend import binding
from compiler.frontend.load import load_file, load_text
from compiler.interp import interpreter as interp

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)

HEADER = ("@autotune(BM in [16], BN in [32], BK in [32])\n"
          "kernel k(A: tensor<{a}>[M, K], B: tensor<{b}>[K, N], C: tensor<f32>[M, N], S: tensor<f32>[M],\n"
          "         s: f32) {{\n"
          "  let a = A[ctx.block.x * BM :+ BM, 0 :+ BK]\n"
          "  let b = B[0 :+ BK, ctx.block.y * BN :+ BN]\n")


def src(line: str, a: str = "e4m3", b: str = "e4m3") -> str:
    """A kernel whose line 6 is `line`."""
    return HEADER.format(a=a, b=b) + line + "\n  C[ctx.block.x * BM :+ BM, ctx.block.y * BN :+ BN] = 0.0\n}\n"


ERRORS = [
    ("arith", src("  let x = a + 1.0"), "6:11", "'+' cannot take tile<e4m3>[BM, BK]: an fp8 value is only"),
    ("unary", src("  let x = -a"), "6:12", "'-' cannot take tile<e4m3>"),
    ("function", src("  let x = exp(a)"), "6:15", "exp() cannot take tile<e4m3>"),
    ("reduce", src("  let x = sum(a, axis = 1)"), "6:15", "sum() cannot take tile<e4m3>"),
    ("var", src("  var x: tile<f32>[BM, BK] = a"), "6:30", "var 'x' cannot take tile<e4m3>"),
    ("mixed", src("  let x = dot(a, b, scale_a = 1.0, scale_b = 1.0)", b="e5m2"), "6:18",
     "dot operands differ in type: tile<e4m3>[BM, BK] times tile<e5m2>[BK, BN]"),
    ("no_scales", src("  let x = dot(a, b)"), "6:11", "a dot of e4m3 operands needs its scales"),
    ("one_scale", src("  let x = dot(a, b, scale_a = s)"), "6:11", "(missing scale_b;"),
    ("scale_on_f32", src("  let x = dot(f32(a), f32(b), scale_a = s, scale_b = s)"), "6:41",
     "scale_a applies only to a dot of fp8 operands"),
    ("scale_shape", src("  let x = dot(a, b, scale_a = s, scale_b = S[0 :+ BM])"), "6:44",
     "scale_b must be a scalar or a tile of one scale per column of b, tile<f32>[BN]"),
    ("precision", src("  let x = dot(a, b, precision = tf32, scale_a = s, scale_b = s)"), "6:33",
     "precision = tf32 applies only to a dot of f32 operands; these are e4m3"),
    ("store_fp8", src("  A[0, 0] = 1.0"), "6:13", "tensor 'A' holds e4m3: fp8 tensors are read-only"),
    ("store_value", src("  C[0, 0] = A[0, 0]"), "6:13", "a store cannot take e4m3"),
    ("fill", src("  let x = load(A[0 :+ BM, 0 :+ BK], fill = 1.0)"), "6:44", "reads 0 outside: no fill"),
]


@pytest.mark.parametrize(("source", "where", "message"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_fp8_type_errors(source, where, message):
    assert_reported(source, where, message)


def test_fp8_values_may_be_converted_transposed_and_dotted():
    ok = src("  let x = f32(a) + bf16(a) + f16(a)\n"
             "  let y = dot(a, transpose(transpose(b)), scale_a = S[0 :+ BM], scale_b = 2)")
    load_text(ok, "ok.phk")


def _fp8(rng, shape, dtype, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_interpreter_scaled_dot_equals_the_fp8_reference(dtype, tmp_path):
    fmt = "e4m3" if dtype == E4M3 else "e5m2"
    text = (
        "@autotune(BM in [32], BN in [64], BK in [64])\n"
        f"kernel g(A: tensor<{fmt}>[M, K], Bt: tensor<{fmt}>[N, K], SA: tensor<f32>[M], sb: f32,\n"
        "         C: tensor<f32>[M, N]) {\n"
        "  var acc: tile<f32>[BM, BN] = 0.0\n"
        "  for k in range(0, K, BK) {\n"
        "    let b = Bt[ctx.block.y * BN :+ BN, k :+ BK]\n"
        "    acc += dot(A[ctx.block.x * BM :+ BM, k :+ BK], transpose(b),\n"
        "               scale_a = SA[ctx.block.x * BM :+ BM], scale_b = sb)\n"
        "  }\n"
        "  C[ctx.block.x * BM :+ BM, ctx.block.y * BN :+ BN] = acc\n"
        "}\n"
    )
    kernel = load_text(text, "g.phk").kernels[0]
    rng = np.random.default_rng(3)
    m, n, k = 70, 90, 200  # ragged in every dimension
    arrays = {"A": _fp8(rng, (m, k), dtype), "Bt": _fp8(rng, (n, k), dtype),
              "SA": rng.uniform(0.25, 4, m).astype(np.float32), "C": np.full((m, n), np.nan, np.float32)}
    interp.run_kernel(kernel, binding.bind(kernel, {"M": m, "N": n, "K": k}), arrays, {"sb": 0.5})
    exact = (arrays["A"].astype(np.float64) @ arrays["Bt"].astype(np.float64).T) * arrays["SA"][:, None] * 0.5
    # products of fp8 values are exact in f32; the error is the f32 sums' (K terms, 2^-24 each) and
    # the scaling's: |err| <= (K + 2) 2^-24 sum_k |a b| s
    a64, b64 = arrays["A"].astype(np.float64), arrays["Bt"].astype(np.float64)
    bound = (k + 2) * 2.0**-24 * (np.abs(a64) @ np.abs(b64).T)
    bound *= arrays["SA"][:, None] * 0.5
    assert np.all(np.abs(arrays["C"] - exact) <= bound + 1e-30)


def test_example_fp8_gemm_through_the_interpreter():
    kernel = load_file("examples/matmul_fp8.phk").kernels[0]
    rng = np.random.default_rng(5)
    m, n, k = 130, 200, 300
    arrays = {"A": _fp8(rng, (m, k), E4M3), "Bt": _fp8(rng, (n, k), E4M3),
              "SA": rng.uniform(0.5, 2, m).astype(np.float32),
              "SB": rng.uniform(0.5, 2, n).astype(np.float32), "C": np.zeros((m, n), ml_dtypes.bfloat16)}
    interp.run_kernel(kernel, binding.bind(kernel, {"M": m, "N": n, "K": k}), arrays, {})
    exact = (arrays["A"].astype(np.float64) @ arrays["Bt"].astype(np.float64).T)
    exact *= arrays["SA"][:, None] * arrays["SB"][None, :]
    got = arrays["C"].astype(np.float64)
    # C is rounded once to bf16 (half an ulp: 2^-8 relative) after f32 sums of exact products
    scale = (np.abs(arrays["A"].astype(np.float64)) @ np.abs(arrays["Bt"].astype(np.float64)).T)
    scale *= arrays["SA"][:, None] * arrays["SB"][None, :]
    assert np.all(np.abs(got - exact) <= 2.0**-8 * np.abs(exact) + (k + 3) * 2.0**-24 * scale)


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_fp8_npy_files_keep_their_format(dtype, tmp_path):
    values = np.arange(-8, 8, dtype=np.float32).reshape(4, 4).astype(dtype)
    path = tmp_path / "x.npy"
    with open(path, "wb") as f:
        storage.write_npy(f, values)
    shape, name = storage.tensor_meta(path)
    assert (shape, name) == ((4, 4), "e4m3" if dtype == E4M3 else "e5m2")
    back = np.load(path)
    assert back.dtype == dtype and np.array_equal(back.astype(np.float32), values.astype(np.float32))


def test_an_opaque_one_byte_npy_is_refused(tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, np.zeros(4, E4M3))  # numpy writes '<V1': e4m3 or e5m2 cannot be told apart
    with pytest.raises(storage.UserError, match="could be e4m3 or e5m2"):
        storage.tensor_meta(path)


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_interpreter_loads_every_fp8_byte_exactly(dtype):
    fmt = "e4m3" if dtype == E4M3 else "e5m2"
    text = (f"@autotune(B in [64])\nkernel cv(A: tensor<{fmt}>[N], C: tensor<f32>[N]) {{\n"
            "  C[ctx.block.x * B :+ B] = f32(A[ctx.block.x * B :+ B])\n}\n")
    kernel = load_text(text, "cv.phk").kernels[0]
    a = np.arange(256, dtype=np.uint8).view(dtype)
    arrays = {"A": a, "C": np.zeros(256, np.float32)}
    interp.run_kernel(kernel, binding.bind(kernel, {"N": 256}), arrays, {})
    want = a.astype(np.float32)
    assert np.array_equal(arrays["C"], want, equal_nan=True)
