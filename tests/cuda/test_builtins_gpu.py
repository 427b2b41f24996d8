"""On the GPU: the built-ins added through the one table agree with the interpreter (their meaning)
at the bounds of docs/language.md §8.2-8.3, at every tile point, on ragged shapes. Outputs are
poisoned (NaN) first, so an unwritten element fails.

Tolerances (norm-wise relative, over all elements):
- accurate functions: a few ulp each (2 ulp tanhf/erff; sums of two functions: one rounding more),
  plus subnormals flushed to zero: 1e-6;
- fast functions: tanh.approx's 2^-10.987 relative bounds every row: 6e-4;
- f32 cumsum/cumprod of a line of L <= 512: L * 2^-24 (3e-5); cummax, take and i32 ops are exact.
"""

from __future__ import annotations

import builtin_cases as bc
import numpy as np
import pytest
from cuda_cases import all_points, rel_err

from compiler.frontend import binding
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu


def _both(kernel, dims, point, arrays):
    from compiler.cuda.launch import run_kernel_gpu

    b = binding.bind(kernel, dims, None, point)
    ref = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(kernel, b, ref, {})
    return ref, run_kernel_gpu(kernel, b, {n: a.copy() for n, a in arrays.items()}, {})


@pytest.mark.parametrize("math,tol", [("accurate", 1e-6), ("fast", 6e-4)])
def test_functions_on_the_gpu_equal_the_interpreter(math, tol):
    k = bc.kernel(bc.FUNCTIONS.format(math=math), "functions")
    rng = np.random.default_rng(11)
    for point in all_points(k):
        ref, got = _both(k, {"R": 37, "C": 301}, point, bc.function_inputs(rng, 37, 301))
        for i in range(9):
            assert rel_err(got["y"][i], ref["y"][i]) <= tol, (point, i)


def test_scans_on_the_gpu_equal_the_interpreter():
    k = bc.kernel(bc.SCANS, "scans")
    rng = np.random.default_rng(12)
    for point in all_points(k):
        rows, cols = 24, point["BC"]
        ref, got = _both(k, {"R": rows, "C": cols}, point, bc.scan_inputs(rng, rows, cols))
        np.testing.assert_array_equal(got["m"], ref["m"])
        for name in ("s", "v", "pr"):
            assert rel_err(got[name], ref[name]) <= 3e-5, (point, name)


def test_take_on_the_gpu_gathers_exactly():
    k = bc.kernel(bc.GATHER, "gather")
    rng = np.random.default_rng(13)
    for point in all_points(k):
        dims = {"V": 97, "D": 200, "M": 45}
        ref, got = _both(k, dims, point, bc.gather_inputs(rng, 97, 200, 45))
        np.testing.assert_array_equal(got["out"], ref["out"])


def test_bit_operations_on_the_gpu_are_exact():
    k = bc.kernel(bc.BITS, "bits")
    rng = np.random.default_rng(14)
    for point in all_points(k):
        ref, got = _both(k, {"N": 5001}, point, bc.bit_inputs(rng, 5001))
        np.testing.assert_array_equal(got["y"], ref["y"])
