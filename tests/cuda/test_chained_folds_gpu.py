"""On the GPU: max and min folds run as interleaved chains (compiler/cuda/reductions.py) equal the
interpreter bit for bit (max and min are exact in any order), with NaNs, a row of NaNs (the
identity), infinities and signed zeros; the sum beside them (one chain, f32 in another order
than numpy's pairwise sum; NaN rows give NaN on both sides) within C * 2^-24 of the sum of |x|."""

from __future__ import annotations

import numpy as np
import pytest
from chained_fold_cases import COLUMNS, ROWS, special_rows

from compiler.cuda.launch import run_kernel_gpu
from compiler.cuda.schedule import Schedule
from compiler.frontend import binding
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu


def _both(kernel, dims, point, arrays, schedule=None):
    b = binding.bind(kernel, dims, None, point)
    ref = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(kernel, b, ref, {})
    poisoned = {n: (np.full_like(a, np.nan) if a.dtype == np.float32 and n != "X" else a.copy())
                for n, a in arrays.items()}
    return ref, run_kernel_gpu(kernel, b, poisoned, {}, schedule=schedule)


@pytest.mark.parametrize("bc,chains", [(8, 4), (256, 4), (256, 3), (256, 1)])
def test_row_folds_equal_the_interpreter(bc, chains):
    # 4 chains (the default), 3 (not a power of two: an uneven combining tree), 1 (Schedule.fold_chains)
    rng = np.random.default_rng(21 + bc)
    rows = 37
    x = special_rows(rng, rows, bc)
    arrays = {"X": x, **{n: np.zeros(rows, np.float32) for n in "MLS"}}
    ref, got = _both(ROWS, {"R": rows, "C": bc}, {"BR": 16, "BC": bc}, arrays, Schedule(fold_chains=chains))
    np.testing.assert_array_equal(got["M"], ref["M"])
    np.testing.assert_array_equal(got["L"], ref["L"])
    assert ref["M"][0] == -np.inf and ref["L"][0] == np.inf  # the row of NaNs: the identity
    finite = np.isfinite(ref["S"])
    np.testing.assert_array_equal(np.isnan(got["S"]), np.isnan(ref["S"]))
    bound = bc * 2**-24 * np.nansum(np.abs(x), axis=1)[finite]
    assert (np.abs(got["S"][finite] - ref["S"][finite]) <= bound).all()


def test_column_folds_equal_the_interpreter():
    rng = np.random.default_rng(23)
    cols = 40
    x = special_rows(rng, cols, 256).T.copy()  # each special row becomes a column
    ints = rng.integers(-(2**31), 2**31 - 1, size=(256, cols), dtype=np.int64).astype(np.int32)
    arrays = {"X": x, "I": ints, "M": np.zeros(cols, np.float32), "J": np.zeros(cols, np.int32)}
    ref, got = _both(COLUMNS, {"C": cols}, {"BR": 256, "BC": 16}, arrays)
    np.testing.assert_array_equal(got["M"], ref["M"])
    np.testing.assert_array_equal(got["J"], ref["J"])
    assert ref["M"][0] == -np.inf
