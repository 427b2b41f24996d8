"""Kernels and points of the TMA-store epilogue (compiler/cuda/mainloops/tma_ws/store.py), shared by its CPU
tests (test_tma_store.py: every point compiles, assembles without spills, lays its tile out as
the tensor map's swizzle reads it) and its GPU tests (test_tma_store_gpu.py: equal to the
interpreter)."""

from __future__ import annotations

from cuda_cases import load_example

from benchmarks.issue36_rows import LINEAR_BIAS_RELU, TF32_KERNEL_LEVEL
from compiler.cuda.schedule import Schedule
from compiler.frontend import load as frontend

# linear + bias + ReLU with a bf16 output, and an f32 matmul with @precision(tf32) on the kernel,
# as a user writes them (issue 36's rows)
LINEAR_RELU, TF32_KERNEL = LINEAR_BIAS_RELU, TF32_KERNEL_LEVEL
# an f16 output scaled by a scalar, f32 bias
SCALED_F16 = """
@autotune(TILE_M in [64, 128], TILE_N in [128, 256], TILE_K in [64])
kernel scaled_f16(A: tensor<f16>[M, K], B: tensor<f16>[K, N], bias: tensor<f32>[N],
                  C: tensor<f16>[M, N], alpha: f32) {
  let m = ctx.block.x * TILE_M
  let n = ctx.block.y * TILE_N
  var acc: tile<f32>[TILE_M, TILE_N] = 0.0
  for kt in range(0, K, TILE_K) {
    acc += dot(A[m :+ TILE_M, kt :+ TILE_K], B[kt :+ TILE_K, n :+ TILE_N])
  }
  C[m :+ TILE_M, n :+ TILE_N] = f16(alpha * acc + expand(bias[n :+ TILE_N], axis = 0))
}
"""
# a batch of matmuls: 3-D tensor maps, a box clipped at the end of one batch's rows
BATCHED = """
@autotune(TILE_M in [64, 128], TILE_N in [128, 256], TILE_K in [64])
kernel bmm(A: tensor<bf16>[G, M, K], B: tensor<bf16>[G, K, N], C: tensor<bf16>[G, M, N], alpha: f32) {
  let g = ctx.block.z
  let m = ctx.block.x * TILE_M
  let n = ctx.block.y * TILE_N
  var acc: tile<f32>[TILE_M, TILE_N] = 0.0
  for kt in range(0, K, TILE_K) {
    acc += dot(A[g, m :+ TILE_M, kt :+ TILE_K], B[g, kt :+ TILE_K, n :+ TILE_N])
  }
  C[g, m :+ TILE_M, n :+ TILE_N] = bf16(alpha * acc)
}
"""
TEXTS = {"linear_relu": LINEAR_RELU, "scaled_f16": SCALED_F16, "bmm": BATCHED, "tf32": TF32_KERNEL}


def kernel(name: str):
    if name.endswith(".phk"):
        return load_example(name)
    return frontend.select_kernel(frontend.load_text(TEXTS[name]), None)


def store_schedule(stages: int = 4, order: str = "grouped", group: int = 8) -> Schedule:
    return Schedule(wgmma=True, stages=stages, order=order, group=group, tma=True, tma_store=True)


# one and two consumer warpgroups, 1 to 4 boxes per tile (f32: 32-wide boxes, 16-bit: 64-wide)
POINTS = [
    ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, store_schedule()),
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, store_schedule(stages=6, order="row")),
    ({"TILE_M": 64, "TILE_N": 128, "TILE_K": 64}, store_schedule(stages=3, order="row")),
    ({"TILE_M": 64, "TILE_N": 256, "TILE_K": 64}, store_schedule(group=3)),
]
# the TMA-fed TF32 ring's tiles (mainloops/tma_ws/tf32.py: 64 columns per consumer warpgroup, k = 32)
TF32_POINTS = [
    ({"TILE_M": 256, "TILE_N": 128, "TILE_K": 32}, store_schedule()),
    ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, store_schedule(stages=6, order="row")),
    ({"TILE_M": 64, "TILE_N": 64, "TILE_K": 32}, store_schedule(group=3)),
    ({"TILE_M": 256, "TILE_N": 64, "TILE_K": 32}, store_schedule(stages=3, order="row")),
]
TF32_DIMS = [{"M": 256, "N": 384, "K": 128}, {"M": 203, "N": 316, "K": 136}, {"M": 300, "N": 260, "K": 1000}]


def points_of(name: str):
    return TF32_POINTS if name == "tf32" else POINTS


# (kernel, its dims at which every point compiles): ragged M, N and K (N in 16-byte rows, which
# the tensor maps need), a ring that wraps many times (K = 1000)
CASES = [
    ("linear_relu", [{"M": 256, "N": 384, "K": 128}, {"M": 203, "N": 320, "K": 136},
                     {"M": 77, "N": 1000, "K": 264}, {"M": 300, "N": 520, "K": 1000}]),
    ("matmul_bf16.phk", [{"M": 256, "N": 384, "K": 128}, {"M": 203, "N": 328, "K": 136}]),
    ("matmul_f16.phk", [{"M": 77, "N": 1000, "K": 264}]),
    ("scaled_f16", [{"M": 203, "N": 320, "K": 136}]),
    ("bmm", [{"G": 3, "M": 200, "N": 256, "K": 128}, {"G": 2, "M": 77, "N": 392, "K": 72}]),
    ("tf32", TF32_DIMS),
]
