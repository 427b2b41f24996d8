"""Kernels whose max and min folds run as interleaved chains (compiler/cuda/reductions.py,
FOLD_CHAINS), and inputs that test what the chains must keep: NaN elements count as nothing, a
row of NaNs folds to the identity, infinities, ties of signed zeros. Shared by
test_chained_folds.py (CPU: which folds are chained) and test_chained_folds_gpu.py."""

from __future__ import annotations

import numpy as np

from compiler.frontend import load as frontend

# along the columns (axis = 1): BC = 256 gives each thread 16 or more elements of a row, BC = 8
# fewer than CHAINED_FOLD (one chain); a sum beside them stays one chain
ROWS = frontend.load_text("""
@autotune(BR in [16], BC in [8, 256])
kernel rowfolds(X: tensor<f32>[R, C], M: tensor<f32>[R], L: tensor<f32>[R], S: tensor<f32>[R]) {
  let x = X[ctx.block.x * BR :+ BR, 0 :+ BC]
  M[ctx.block.x * BR :+ BR] = max(x, axis = 1)
  L[ctx.block.x * BR :+ BR] = min(x * 2.0, axis = 1)
  S[ctx.block.x * BR :+ BR] = sum(x, axis = 1)
}
""").kernel()

# along the rows (axis = 0), i32 too
COLUMNS = frontend.load_text("""
@autotune(BR in [256], BC in [16])
kernel colfolds(X: tensor<f32>[BR, C], I: tensor<i32>[BR, C], M: tensor<f32>[C], J: tensor<i32>[C]) {
  let cols = ctx.block.x * BC
  M[cols :+ BC] = max(X[0 :+ BR, cols :+ BC], axis = 0)
  J[cols :+ BC] = min(I[0 :+ BR, cols :+ BC], axis = 0)
}
""").kernel()


def special_rows(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Normal values, with: a row of NaNs, a row of NaNs but one, a row with +inf, one of -inf
    only, one of signed zeros, and NaNs scattered over a tenth of the rest."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[rng.random((rows, cols)) < 0.1] = np.nan
    x[0] = np.nan
    x[1] = np.nan
    x[1, cols // 2] = 3.0
    x[2, cols - 1] = np.inf
    x[3] = -np.inf
    x[4] = np.where(np.arange(cols) % 2 == 0, 0.0, -0.0)
    return x
