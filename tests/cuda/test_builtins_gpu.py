"""On the GPU: the built-ins added through the one table agree with the interpreter (their meaning)
at the bounds of docs/language.md §8.2-8.3, at every tile point, on ragged shapes. Outputs are
poisoned (NaN) first, so an unwritten element fails.

Tolerances (norm-wise relative, over all elements):
- accurate functions: per element, §8.2's ulp bound of each function (builtin_cases.accurate_bound:
  (b + 0.5) ulp of each term against the interpreter's once-rounded value, one ulp more for a sum's
  two roundings, 2^-126 for a flushed subnormal); floor and ceil exactly;
- fast functions: tanh.approx's 2^-10.987 relative bounds every row: 6e-4;
- f32 cumsum/cumprod of a line of L <= 512: L * 2^-24 (3e-5); cummax, take and i32 ops are exact;
- long f32 cumsums (L up to 4096, over several warps): per element 2 L 2^-24 of the sum of |x|
  up to it (each of the two scans is within L 2^-24 of the exact prefix).
"""

from __future__ import annotations

import builtin_cases as bc
import fold_cases as fc
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


def test_accurate_functions_on_the_gpu_are_within_their_ulp_bounds():
    k = bc.kernel(bc.FUNCTIONS.format(math="accurate"), "functions")
    rng = np.random.default_rng(11)
    for point in all_points(k):
        arrays = bc.function_inputs(rng, 37, 301)
        ref, got = _both(k, {"R": 37, "C": 301}, point, arrays)
        bound = bc.accurate_bound(arrays["x"], arrays["p"])
        for i in range(9):
            err = np.abs(got["y"][i].astype(np.float64) - ref["y"][i])
            worst = np.unravel_index(np.argmax(err - bound[i]), err.shape)
            assert np.all(err <= bound[i]), (point, i, worst, err[worst], bound[i][worst])


def test_fast_functions_on_the_gpu_equal_the_interpreter():
    k = bc.kernel(bc.FUNCTIONS.format(math="fast"), "functions")
    rng = np.random.default_rng(11)
    for point in all_points(k):
        ref, got = _both(k, {"R": 37, "C": 301}, point, bc.function_inputs(rng, 37, 301))
        for i in range(9):
            assert rel_err(got["y"][i], ref["y"][i]) <= 6e-4, (point, i)


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


def test_long_scans_on_the_gpu_are_within_the_scan_bound():
    """Lines of 1024 to 4096 elements spread over 2 to 32 warps: per element, an f32 cumsum is
    within L * 2^-24 of the sum of |x| up to it (both are inclusive scans of the same f32 values,
    rounded at each of at most L additions); cummax and the i32 cumsum are exact."""
    for threads in (256, 1024):
        k = fc.long_kernel(threads)
        n = 9000
        for point in all_points(k):
            block = point["B"]
            arrays = fc.long_inputs(np.random.default_rng(15), n, block)
            ref, got = _both(k, {"N": n, "NB": -(-n // block)}, point, arrays)
            bound = 2 * block * 2**-24 * fc.long_meaning(arrays, block)["s_abs"]
            assert np.all(np.abs(got["s"][0].astype(np.float64) - ref["s"][0]) <= bound), (threads, point)
            np.testing.assert_array_equal(got["s"][1], ref["s"][1])
            np.testing.assert_array_equal(got["sk"], ref["sk"])
    k = fc.kernel(fc.LONG_ROWS, "long_rows")
    for point in all_points(k):
        rows, cols = 9, point["BC"]
        arrays = fc.long_row_inputs(np.random.default_rng(16), rows, cols)
        ref, got = _both(k, {"R": rows, "C": cols}, point, arrays)
        x = np.abs(arrays["x"].astype(np.float64))
        bound = 2 * cols * 2**-24 * np.cumsum(x, axis=1)
        assert np.all(np.abs(got["s"].astype(np.float64) - ref["s"]) <= bound), point
        np.testing.assert_array_equal(got["sk"], ref["sk"])
