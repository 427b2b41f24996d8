"""On the GPU: fp8 kernels against the interpreter (their meaning). Outputs are poisoned (NaN)
first, so an unwritten element fails.

Tolerances follow from the operation each side runs (fp8_accumulation.py, docs/language.md
§8.1): the products of fp8 values are exact in f32 on both sides; the interpreter sums them in
f32 ((K + 2) 2^-24 Σ_k |a b| |sa sb| from the exact value). The f16 path of the GPU does the
same in another order. On fp8 warpgroup MMA each k tile of 128 products is summed by the tensor
core from zero, off the exact value by what fp8_accumulation.tile_sums computes (the tensor
core's truncation to 13 bits, exactly, for these inputs), and the tiles' sums are added in f32.
A bf16 C adds one rounding on each side (rounded_bound). test_fp8_accumulation.py checks, with
no GPU, that this tolerance refuses the k loop run as one tensor-core chain (the defect the H100
showed) and that the model reproduces the H100's numbers. The conversions fp8 -> f32 are exact:
all 256 bytes of each format, NaN where ml_dtypes has NaN.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from fp8_accumulation import MANTISSA, f32_difference_bound, gpu_result, rounded_bound, tile_sums
from fp8_cases import EXAMPLE, NUMPY, per_tensor_text
from fp8_cases import inputs as _inputs

from compiler.cuda.schedule import Schedule
from compiler.frontend import binding
from compiler.frontend.load import load_text
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu

TMA = Schedule(stages=4, order="grouped", wgmma=True, tma=True)
OVERLAP = Schedule(stages=4, order="grouped", wgmma=True, fp8_overlap=True)  # fp8_promote's two temporaries
TMA_OVERLAP = Schedule(stages=4, order="grouped", wgmma=True, tma=True, fp8_overlap=True)
WGMMA = Schedule(stages=4, order="grouped", wgmma=True)
K256 = {"TILE_K": 256}  # fp8_promote's k tile of two groups (the TMA ring only)
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


def _check(arrays, scale, ref, got, schedule, bf16_out):
    """GPU C against the interpreter's within the bound of the operation both ran; on the fp8
    warpgroup-MMA path also against the model of its accumulation itself."""
    fp8_mma = schedule.wgmma  # fp8.keeps_fp8: the example's dots are K-major, k = 128
    r, g = ref["C"].astype(np.float64), got["C"].astype(np.float64)
    assert np.isfinite(g).all(), "unwritten element"
    bound = f32_difference_bound(arrays["A"], arrays["Bt"], scale, fp8_mma)
    if bf16_out:
        bound = rounded_bound(bound, r, 2.0**-8)
    assert np.all(np.abs(g - r) <= bound + 1e-30), float(np.max(np.abs(g - r) / (bound + 1e-30)))


CASES = [  # (fmt, C dtype, tile point, schedule): fp8 warpgroup MMA (cp.async and TMA rings), and
    # the f16 path of other schedules
    ("e4m3", "bf16", {"TILE_M": 128, "TILE_N": 256}, WGMMA),
    ("e4m3", "bf16", {"TILE_M": 64, "TILE_N": 128}, WGMMA),
    ("e4m3", "f32", {"TILE_M": 128, "TILE_N": 128}, Schedule(stages=3, wgmma=True, late_copies=True)),
    ("e5m2", "f32", {"TILE_M": 128, "TILE_N": 256}, WGMMA),
    ("e4m3", "f32", {"TILE_M": 64, "TILE_N": 256}, WGMMA),
    ("e4m3", "f32", {"TILE_M": 128, "TILE_N": 256}, TMA),
    ("e5m2", "bf16", {"TILE_M": 128, "TILE_N": 128}, TMA),
    ("e4m3", "f32", {"TILE_M": 64, "TILE_N": 128}, TMA),
    ("e4m3", "f32", {"TILE_M": 128, "TILE_N": 256}, OVERLAP),
    ("e4m3", "bf16", {"TILE_M": 128, "TILE_N": 256}, TMA_OVERLAP),
    ("e5m2", "f32", {"TILE_M": 64, "TILE_N": 128}, OVERLAP),
    ("e4m3", "bf16", {"TILE_M": 64, "TILE_N": 128}, Schedule()),
    ("e4m3", "f32", {"TILE_M": 64, "TILE_N": 128}, Schedule()),
    # k tiles of 256 on the TMA ring: two 128-byte blocks a row, two chains in flight in turn
    ("e4m3", "bf16", K256 | {"TILE_M": 128, "TILE_N": 128}, TMA),
    ("e5m2", "f32", K256 | {"TILE_M": 64, "TILE_N": 128}, TMA),
]


@pytest.mark.parametrize(("fmt", "out", "point", "schedule"), CASES)
@pytest.mark.parametrize("dims", [(512, 512, 1024), (300, 520, 1000)], ids=["aligned", "ragged"])
def test_fp8_gemm_on_the_gpu_equals_the_interpreter(fmt, out, point, schedule, dims):
    text = EXAMPLE.replace("e4m3", fmt).replace("C: tensor<bf16>", f"C: tensor<{out}>")
    kernel = load_text(text, "matmul_fp8.phk").kernels[0]
    m, n, k = dims
    # a tensor map's rows: a multiple of 16 bytes (mainloops/tma_ws/ring.py prunes others)
    if schedule.tma and k % 16:
        k += 16 - k % 16  # still ragged against TILE_K = 128
    bf16_out = out == "bf16"
    arrays = _inputs(fmt, m, n, k, ml_dtypes.bfloat16 if bf16_out else np.float32)
    ref, got = _run_both(kernel, {"M": m, "N": n, "K": k}, point, arrays, {}, schedule)
    _check(arrays, arrays["SA"][:, None] * arrays["SB"][None, :], ref, got, schedule, bf16_out)


@pytest.mark.parametrize(("schedule", "tile_k"), [(WGMMA, 128), (TMA, 128), (TMA_OVERLAP, 128), (TMA, 256)],
                         ids=["cp-async", "tma", "tma-overlap", "tma-k256"])
def test_the_gpu_runs_the_documented_fp8_accumulation(schedule, tile_k):
    """fp8 warpgroup MMA computes what docs/language.md §8.1 says (fp8_accumulation.gpu_result):
    the same k tiles' tensor-core sums, added in the same order; allowed: two units of the last
    of the 13 bits kept in each tile's sum, for the two places the tensor core may round where
    the model truncates (the addends' alignment and the step's sum): the H100 differed from the
    model by up to 1.93 units with one allowed, whatever the schedule."""
    kernel = load_text(EXAMPLE.replace("C: tensor<bf16>", "C: tensor<f32>"), "matmul_fp8.phk").kernels[0]
    m, n, k = 256, 384, 768
    arrays = _inputs("e4m3", m, n, k, np.float32, seed=3)
    point = {"TILE_M": 128, "TILE_N": 128, "TILE_K": tile_k}
    _, got = _run_both(kernel, {"M": m, "N": n, "K": k}, point, arrays, {}, schedule)
    scale = arrays["SA"][:, None] * arrays["SB"][None, :]
    want = gpu_result(arrays["A"], arrays["Bt"], scale).astype(np.float64)
    sums = tile_sums(arrays["A"], arrays["Bt"])
    last_bits = np.exp2(np.floor(np.log2(np.maximum(np.abs(sums), 1e-30))) - MANTISSA).sum(0)
    allowed = (2 * last_bits + (sums.shape[0] + 2) * 2.0**-24 * np.abs(sums).sum(0)) * np.abs(scale)
    diff = np.abs(got["C"].astype(np.float64) - want)
    assert np.all(diff <= allowed), float(np.max(diff / allowed))


@pytest.mark.parametrize("schedule", [WGMMA, TMA], ids=["cp-async", "tma"])
def test_per_tensor_scales_on_the_gpu(schedule):
    text = per_tensor_text(EXAMPLE).replace("C: tensor<bf16>", "C: tensor<f32>")
    kernel = load_text(text, "per_tensor.phk").kernels[0]
    arrays = _inputs("e4m3", 384, 512, 512, np.float32)
    sa, sb = 0.75, 3.0
    arrays.pop("SA"), arrays.pop("SB")
    ref, got = _run_both(kernel, {"M": 384, "N": 512, "K": 512}, {"TILE_M": 128, "TILE_N": 256}, arrays,
                         {"sa": sa, "sb": sb}, schedule)
    # the scale product sa sb, one f32 rounding (exact here), applied once on both paths
    scale = np.full((384, 512), np.float32(sa) * np.float32(sb), np.float32)
    _check(arrays, scale, ref, got, schedule, False)


def test_a_k_tile_of_256_whose_second_block_lies_past_k():
    """K = 784: the last k tile's first block holds 16 columns of A and Bt, its second none (the
    tensor map's zeros), so that chain adds exact zeros."""
    kernel = load_text(EXAMPLE.replace("C: tensor<bf16>", "C: tensor<f32>"), "matmul_fp8.phk").kernels[0]
    arrays = _inputs("e4m3", 256, 384, 784, np.float32, seed=5)
    point = K256 | {"TILE_M": 128, "TILE_N": 128}
    ref, got = _run_both(kernel, {"M": 256, "N": 384, "K": 784}, point, arrays, {}, TMA)
    _check(arrays, arrays["SA"][:, None] * arrays["SB"][None, :], ref, got, TMA, False)
