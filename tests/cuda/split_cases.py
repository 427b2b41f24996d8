"""Kernels of the split-loop tests (test_split_loop.py on the CPU, test_split_loop_gpu.py on the GPU)
and their inputs: grouped-query decode (an online softmax over S keys, examples/decode/gqa_decode.phk)
for G query rows, in bf16, f16 or f32, and a split-K matmul (a linear accumulator)."""

from __future__ import annotations

import numpy as np

from benchmarks.decode_kernel import decode_text
from compiler.frontend.load import load_text

GS = (1, 4, 8, 16, 32)
DTYPES = ("bf16", "f16", "f32")


def decode_source(dtype: str, g: int, bs: str = "64, 256") -> str:
    """examples/decode/gqa_decode.phk with KV in `dtype`, BG = g and BS over `bs` (its one home)."""
    return decode_text(dtype, g, bs)


SPLITK_SOURCE = """
@autotune(BM in [64], BN in [64], BK in [32])
kernel splitk(A: tensor<f32>[M, K], B: tensor<f32>[K, N], C: tensor<f32>[M, N], alpha: f32, beta: f32) {
  let r = ctx.block.y * BM
  let c = ctx.block.x * BN
  var acc: tile<f32>[BM, BN] = 0.0
  for k in range(0, K, BK) {
    acc += dot(A[r :+ BM, k :+ BK], B[k :+ BK, c :+ BN])
  }
  let c_old = C[r :+ BM, c :+ BN]
  C[r :+ BM, c :+ BN] = alpha * acc + beta * c_old
}
"""


def load(source: str, name: str = "<split test>"):
    return load_text(source, name).kernels[0]


def storage(dtype: str):
    import ml_dtypes

    return {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}[dtype]


def decode_inputs(dtype: str, g: int, s: int, rng) -> tuple[dict, dict]:
    st = storage(dtype)
    arrays = {
        "Q": rng.standard_normal((g, 128)).astype(st),
        "K": rng.standard_normal((s, 128)).astype(st),
        "V": rng.standard_normal((s, 128)).astype(st),
        "O": np.full((g, 128), np.nan, np.float32),
    }
    return arrays, {"scale": 1.0 / np.sqrt(128.0)}


def splitk_inputs(m: int, n: int, k: int, rng) -> tuple[dict, dict]:
    """A, B, C of SPLITK_SOURCE in f32, and its scalars (beta != 0: the store reads C back)."""
    arrays = {"A": rng.standard_normal((m, k)).astype(np.float32),
              "B": rng.standard_normal((k, n)).astype(np.float32),
              "C": rng.standard_normal((m, n)).astype(np.float32)}
    return arrays, {"alpha": 0.5, "beta": 2.0}


def splitk_case(m: int, n: int, k: int, seed: int):
    """(kernel, dims, arrays, scalars, C of the one-CTA loop on the interpreter) of SPLITK_SOURCE."""
    from compiler.frontend import binding
    from compiler.interp import interpreter

    kernel = load(SPLITK_SOURCE)
    dims = {"M": m, "N": n, "K": k}
    arrays, scalars = splitk_inputs(m, n, k, np.random.default_rng(seed))
    want = {name: a.copy() for name, a in arrays.items()}
    interpreter.run_kernel(kernel, binding.bind(kernel, dims), want, scalars)
    return kernel, dims, arrays, scalars, want["C"]
