"""The fp8 GEMM cases the fp8 tests share: examples/matmul_fp8.phk, its per-tensor form and the
seeded inputs the GPU tests run (and test_fp8_accumulation.py replays without a GPU)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "matmul_fp8.phk").read_text()
NUMPY = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def per_tensor_text(text: str) -> str:
    """The example with two f32 scalar scales instead of the per-row and per-column ones."""
    return (text.replace("SA: tensor<f32>[M], SB: tensor<f32>[N]", "sa: f32, sb: f32")
            .replace("  let sa = SA[pm * TILE_M :+ TILE_M]\n", "")
            .replace("  let sb = SB[pn * TILE_N :+ TILE_N]\n", ""))


def inputs(fmt, m, n, k, out_dtype, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "A": (rng.standard_normal((m, k)) * 2).astype(NUMPY[fmt]),
        "Bt": (rng.standard_normal((n, k)) * 2).astype(NUMPY[fmt]),
        "SA": rng.uniform(0.25, 4, m).astype(np.float32),
        "SB": rng.uniform(0.25, 4, n).astype(np.float32),
        "C": np.full((m, n), np.nan, out_dtype),
    }
