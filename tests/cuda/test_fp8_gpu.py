"""On the GPU: fp8 kernels against the interpreter (their meaning). Outputs are poisoned (NaN)
first, so an unwritten element fails.

Tolerances: the products of fp8 values are exact in f32 on both sides, so the two results are
f32 sums of the same K products (times the same f32 scale product) in different orders: each is
within (K + 2) 2^-24 Σ_k |a b| |sa sb| of the exact value, so they differ by at most twice that,
element by element. A bf16 C adds one rounding on each side: 2^-7 |C| more (one bf16 ulp).
The conversions fp8 -> f32 are exact: all 256 bytes of each format, NaN where ml_dtypes has NaN.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from compiler.cuda.schedule import Schedule
from compiler.frontend import binding
from compiler.frontend.load import load_text
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu

EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "matmul_fp8.phk").read_text()
NUMPY = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
WGMMA = Schedule(stages=4, order="grouped", wgmma=True)
CONVERT = """@autotune(B in [128])
kernel cv(A: tensor<FMT>[N], C: tensor<f32>[N]) {
  C[ctx.block.x * B :+ B] = f32(A[ctx.block.x * B :+ B])
}
"""


def _run_both(kernel, dims, point, arrays, scalars, schedule):
    from compiler.cuda.launch import run_kernel_gpu

    b = binding.bind(kernel, dims, None, point)
    ref = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(kernel, b, ref, scalars)
    got = run_kernel_gpu(kernel, b, {n: a.copy() for n, a in arrays.items()}, scalars, schedule=schedule)
    return ref, got


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_every_fp8_byte_converts_exactly(fmt):
    kernel = load_text(CONVERT.replace("FMT", fmt), "cv.phk").kernels[0]
    a = np.arange(256, dtype=np.uint8).view(NUMPY[fmt])
    ref, got = _run_both(kernel, {"N": 256}, {}, {"A": a, "C": np.zeros(256, np.float32)}, {}, None)
    want = a.astype(np.float32)
    assert np.array_equal(np.isnan(got["C"]), np.isnan(want))
    assert np.array_equal(got["C"][~np.isnan(want)], want[~np.isnan(want)])
    assert np.array_equal(ref["C"][~np.isnan(want)], want[~np.isnan(want)])


def _inputs(fmt, m, n, k, out_dtype, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "A": (rng.standard_normal((m, k)) * 2).astype(NUMPY[fmt]),
        "Bt": (rng.standard_normal((n, k)) * 2).astype(NUMPY[fmt]),
        "SA": rng.uniform(0.25, 4, m).astype(np.float32),
        "SB": rng.uniform(0.25, 4, n).astype(np.float32),
        "C": np.full((m, n), np.nan, out_dtype),
    }


def _bound(arrays, k):
    mag = np.abs(arrays["A"].astype(np.float64)) @ np.abs(arrays["Bt"].astype(np.float64)).T
    mag *= arrays["SA"][:, None].astype(np.float64) * arrays["SB"][None, :]
    return 2 * (k + 2) * 2.0**-24 * mag


def _check(ref, got, bound, bf16_out):
    r, g = ref["C"].astype(np.float64), got["C"].astype(np.float64)
    assert np.isfinite(g).all(), "unwritten element"
    allowed = bound + (2.0**-7 * np.abs(r) if bf16_out else 0.0) + 1e-30
    assert np.all(np.abs(g - r) <= allowed), float(np.max(np.abs(g - r) / allowed))


CASES = [  # (fmt, C dtype, tile point, schedule): fp8 warpgroup MMA, and the f16 path of other schedules
    ("e4m3", "bf16", {"TILE_M": 128, "TILE_N": 256}, WGMMA),
    ("e4m3", "bf16", {"TILE_M": 64, "TILE_N": 128}, WGMMA),
    ("e4m3", "f32", {"TILE_M": 128, "TILE_N": 128}, Schedule(stages=3, wgmma=True, late_copies=True)),
    ("e5m2", "f32", {"TILE_M": 128, "TILE_N": 256}, WGMMA),
    ("e4m3", "bf16", {"TILE_M": 64, "TILE_N": 128}, Schedule()),
]


@pytest.mark.parametrize(("fmt", "out", "point", "schedule"), CASES)
@pytest.mark.parametrize("dims", [(512, 512, 1024), (300, 520, 1000)], ids=["aligned", "ragged"])
def test_fp8_gemm_on_the_gpu_equals_the_interpreter(fmt, out, point, schedule, dims):
    text = EXAMPLE.replace("e4m3", fmt).replace("C: tensor<bf16>", f"C: tensor<{out}>")
    kernel = load_text(text, "matmul_fp8.phk").kernels[0]
    m, n, k = dims
    bf16_out = out == "bf16"
    arrays = _inputs(fmt, m, n, k, ml_dtypes.bfloat16 if bf16_out else np.float32)
    ref, got = _run_both(kernel, {"M": m, "N": n, "K": k}, point, arrays, {}, schedule)
    _check(ref, got, _bound(arrays, k), bf16_out)


def test_per_tensor_scales_on_the_gpu():
    text = (EXAMPLE.replace("SA: tensor<f32>[M], SB: tensor<f32>[N]", "sa: f32, sb: f32")
            .replace("  let sa = SA[pm * TILE_M :+ TILE_M]\n", "")
            .replace("  let sb = SB[pn * TILE_N :+ TILE_N]\n", "")
            .replace("C: tensor<bf16>", "C: tensor<f32>"))
    kernel = load_text(text, "per_tensor.phk").kernels[0]
    arrays = _inputs("e4m3", 384, 512, 512, np.float32)
    sa, sb = 0.75, 3.0
    arrays.pop("SA"), arrays.pop("SB")
    ref, got = _run_both(kernel, {"M": 384, "N": 512, "K": 512}, {"TILE_M": 128, "TILE_N": 256}, arrays,
                         {"sa": sa, "sb": sb}, WGMMA)
    mag = np.abs(arrays["A"].astype(np.float64)) @ np.abs(arrays["Bt"].astype(np.float64)).T * sa * sb
    _check(ref, got, 2 * (512 + 2) * 2.0**-24 * mag, False)
