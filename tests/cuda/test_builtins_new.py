"""The built-ins added through the one table (float functions, scans, take, bit operations): the
interpreter (the language's meaning) against numpy, and NVRTC compiles their CUDA at every point.
The GPU agrees with the interpreter in test_builtins_gpu.py.

Tolerances: each float function is computed in float64 and rounded once (2^-24 relative), the sums
of two functions add a rounding, so 4e-7 norm-wise; f32 scans of a line of L elements reorder
nothing in the interpreter but round at each step: L * 2^-24 relative at most (L <= 512: 3e-5).
"""

from __future__ import annotations

import builtin_cases as bc
import numpy as np
import pytest
from cuda_cases import all_points, rel_err

from compiler.cuda.compiled import compile_kernel
from compiler.frontend import binding
from compiler.interp import interpreter as interp


def _run(kernel, dims, point, arrays):
    b = binding.bind(kernel, dims, None, point)
    interp.run_kernel(kernel, b, arrays, {})
    return arrays


@pytest.mark.parametrize("math", ["accurate", "fast"])
def test_functions_mean_float64_rounded_once(math):
    k = bc.kernel(bc.FUNCTIONS.format(math=math), "functions")
    rng = np.random.default_rng(1)
    arrays = _run(k, {"R": 21, "C": 300}, {"BR": 16, "BC": 256}, bc.function_inputs(rng, 21, 300))
    want = bc.function_meaning(arrays["x"], arrays["p"])
    for i in range(9):
        assert rel_err(arrays["y"][i], want[i]) <= 4e-7, i


@pytest.mark.parametrize("point", [{"BR": 2, "BC": 512}, {"BR": 8, "BC": 512}])
def test_scans_are_inclusive_scans(point):
    k = bc.kernel(bc.SCANS, "scans")
    rng = np.random.default_rng(2)
    rows, cols = 16, 512
    arrays = _run(k, {"R": rows, "C": cols}, point, bc.scan_inputs(rng, rows, cols))
    want = bc.scan_meaning(arrays["x"], point["BR"])
    np.testing.assert_array_equal(arrays["m"], want["m"].astype(np.float32))  # a max never rounds
    for name in ("s", "v", "pr"):
        assert rel_err(arrays[name], want[name]) <= 3e-5, name


def test_take_gathers_rows_and_reads_zero_outside():
    k = bc.kernel(bc.GATHER, "gather")
    rng = np.random.default_rng(3)
    arrays = _run(k, {"V": 50, "D": 96, "M": 40}, {"BM": 8, "BD": 32}, bc.gather_inputs(rng, 50, 96, 40))
    np.testing.assert_array_equal(arrays["out"], bc.gather_meaning(arrays["E"], arrays["ids"]))


def test_bit_operations_on_i32():
    k = bc.kernel(bc.BITS, "bits")
    rng = np.random.default_rng(4)
    arrays = _run(k, {"N": 3000}, {"B": 1024}, bc.bit_inputs(rng, 3000))
    np.testing.assert_array_equal(arrays["y"], bc.bit_meaning(arrays["a"], arrays["b"]))


KERNELS = {
    "functions_accurate": (bc.FUNCTIONS.format(math="accurate"), {"R": 21, "C": 300}),
    "functions_fast": (bc.FUNCTIONS.format(math="fast"), {"R": 21, "C": 300}),
    "scans": (bc.SCANS, {"R": 16, "C": 512}),
    "gather": (bc.GATHER, {"V": 50, "D": 96, "M": 40}),
    "bits": (bc.BITS, {"N": 3000}),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_nvrtc_compiles_every_point(name):
    text, dims = KERNELS[name]
    k = bc.kernel(text, name.split("_")[0])
    for point in all_points(k):
        compiled = compile_kernel(k, binding.bind(k, dims, None, point))
        assert compiled.entry in compiled.ptx, (name, point)


@pytest.mark.parametrize("math", ["accurate", "fast"])
def test_only_the_fast_tanh_is_the_hardware_approximation(math):
    """--use_fast_math turns tanhf into tanh.approx.f32 (2^-10.987 relative, not §8.2's accurate
    bound): the accurate tanh must not reach it; the fast one is exactly it."""
    k = bc.kernel(bc.FUNCTIONS.format(math=math), "functions")
    point = all_points(k)[0]
    ptx = compile_kernel(k, binding.bind(k, {"R": 21, "C": 300}, None, point)).ptx
    assert ("tanh.approx.f32" in ptx) == (math == "fast")
