"""On the GPU: the integer and bool dtypes, conversions, wide take indices and the atomics agree
with the interpreter (their meaning, docs/language.md §4.3, §6.4, §8.3) at every tile point, on
ragged shapes. Outputs are poisoned first, so an unwritten element fails.

Exact everywhere (integers, bools, conversions, gathers, max/min atomics, reductions and scans
of integer tiles) except the f32
atomic_add, whose order is the hardware's: the sum of n contributions may differ by about
n * 2^-24 of the sum of their magnitudes.
"""

from __future__ import annotations

import fold_cases as fc
import int_cases as ic
import numpy as np
import pytest
from cuda_cases import all_points

from compiler.frontend import binding
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu


def _both(kernel, dims, point, arrays, scalars=None):
    from compiler.cuda.launch import run_kernel_gpu

    b = binding.bind(kernel, dims, None, point)
    ref = {n: a.copy() for n, a in arrays.items()}
    interp.run_kernel(kernel, b, ref, scalars or {})
    return ref, run_kernel_gpu(kernel, b, {n: a.copy() for n, a in arrays.items()}, scalars or {})


def test_integer_kernels_equal_the_interpreter():
    k = ic.kernel(ic.INTS, "ints")
    rng = np.random.default_rng(21)
    for point in all_points(k):
        arrays = ic.int_inputs(rng, 1001)
        arrays["y"][:] = -77
        arrays["z"][:] = 77
        arrays["w"][:] = 0xAB
        arrays["g"][:] = True  # an unwritten false fails
        ref, got = _both(k, {"N": 1001}, point, arrays, ic.INT_SCALARS)
        for name in ("y", "z", "w", "g"):
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} {point}")


def test_conversions_equal_the_interpreter():
    k = ic.kernel(ic.CONVERT, "convert")
    arrays = ic.convert_inputs(np.random.default_rng(22), 701)
    for name, poison in (("y", -77), ("z", -77), ("u", 77)):
        arrays[name][:] = poison
    ref, got = _both(k, {"N": 701}, {"B": 128}, arrays)
    for name in ("y", "z", "u"):
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)


def test_wide_take_equals_the_interpreter():
    k = ic.kernel(ic.GATHER_WIDE, "gather_wide")
    for point in all_points(k):
        arrays = ic.gather_inputs(np.random.default_rng(23), 50, 96, 45)
        ref, got = _both(k, {"V": 50, "D": 96, "M": 45}, point, arrays)
        np.testing.assert_array_equal(got["out"], ref["out"], err_msg=str(point))


def test_atomics_equal_the_interpreter():
    k = ic.kernel(ic.HIST, "hist")
    for point in all_points(k):
        arrays = ic.hist_inputs(np.random.default_rng(24), 5003, 7)
        ref, got = _both(k, {"N": 5003, "NB": 7}, point, arrays)
        for name in ("counts", "top", "low", "total"):
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} {point}")
        bound = 5003 * 2**-24 * np.bincount(arrays["x"], np.abs(arrays["w"]), minlength=7) + 1e-6
        assert np.all(np.abs(got["mass"] - ref["mass"]) <= bound), point


def test_tile_atomics_equal_the_interpreter():
    k = ic.kernel(ic.ROW_SUMS, "row_sums")
    for point in all_points(k):
        arrays = ic.row_sum_inputs(np.random.default_rng(25), 77, 333)
        ref, got = _both(k, {"R": 77, "C": 333}, point, arrays)
        np.testing.assert_array_equal(got["t"], ref["t"], err_msg=str(point))
        np.testing.assert_array_equal(got["m"], ref["m"], err_msg=str(point))
        bound = 333 * 2**-24 * (1 + np.abs(arrays["x"]).sum(axis=1))
        assert np.all(np.abs(got["s"] - ref["s"]) <= bound), point


def test_integer_reductions_and_scans_equal_the_interpreter():
    """i64, u32, i32 and u8 tiles: sum/max/min along each axis and the four scans along each
    axis, on a ragged last CTA (fills enter its column folds), exactly (integers wrap alike)."""
    k = fc.kernel(fc.FOLDS, "folds")
    rows = 19
    for point in all_points(k):
        br, bc = point["BR"], point["BC"]
        arrays = fc.fold_inputs(np.random.default_rng(26), rows, bc, br)
        ref, got = _both(k, {"R": rows, "C": bc, "NB": -(-rows // br)}, point, arrays)
        for name in ("rows", "cols", "sa", "su", "sk", "va", "vu", "vk"):
            assert got[name].dtype == ref[name].dtype, name
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} {point}")


@pytest.mark.parametrize("threads", [256, 1024])
def test_long_integer_lines_equal_the_interpreter(threads):
    """Whole 1-D tiles of 1024 to 4096 elements: scans spread over every warp and block-wide
    reductions of i64, u32 and i32, exactly."""
    k = fc.long_kernel(threads)
    n = 9000
    for point in all_points(k):
        arrays = fc.long_inputs(np.random.default_rng(27), n, point["B"])
        ref, got = _both(k, {"N": n, "NB": -(-n // point["B"])}, point, arrays)
        for name in ("sa", "su", "sk", "tot"):
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} {point}")


def test_float_max_and_min_with_nans_equal_the_interpreter():
    """fmaxf / fminf, elementwise, in reductions and in cummax / cummin: a NaN element counts as
    nothing, a line of NaNs gives -inf (+inf); bit for bit."""
    k = fc.kernel(fc.NAN_FOLDS, "nan_folds")
    for point in all_points(k):
        br = point["BR"]
        arrays = fc.nan_inputs(np.random.default_rng(28), 32, 64, br)
        ref, got = _both(k, {"R": 32, "C": 64, "NB": 32 // br}, point, arrays)
        for name in ("e", "r", "c"):
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{name} {point}")
