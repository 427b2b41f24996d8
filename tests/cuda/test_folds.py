"""Reductions and scans of integer tiles (i32, i64, u32, u8 loaded as i32) and long scans: the
interpreter (the language's meaning) against numpy, exactly for integers; NVRTC compiles them at
every tile point; the generated scans are warp shuffles and a block-level scan with O(n) work, a
line of 4096 elements spread over every warp. The GPU agrees with the interpreter in
test_ints_atomics_gpu.py and test_builtins_gpu.py."""

from __future__ import annotations

import re

import fold_cases as fc
import numpy as np
import pytest
from cuda_cases import all_points

from compiler.cuda import scans
from compiler.cuda.compiled import compile_kernel, generate_source
from compiler.frontend import binding
from compiler.interp import interpreter as interp


def _run(kernel, dims, point, arrays):
    interp.run_kernel(kernel, binding.bind(kernel, dims, None, point), arrays, {})
    return arrays


@pytest.mark.parametrize("point", [{"BR": 2, "BC": 64}, {"BR": 8, "BC": 256}])
def test_integer_folds_mean_wrapping_numpy(point):
    br, bc = point["BR"], point["BC"]
    rows = 19
    k = fc.kernel(fc.FOLDS, "folds")
    arrays = fc.fold_inputs(np.random.default_rng(31), rows, bc, br)
    got = _run(k, {"R": rows, "C": bc, "NB": -(-rows // br)}, point, arrays)
    want = fc.fold_meaning(arrays, br, bc)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("block", [1024, 4096])
def test_long_lines_mean_numpy(block):
    n = 5000
    k = fc.long_kernel()
    arrays = fc.long_inputs(np.random.default_rng(32), n, block)
    got = _run(k, {"N": n, "NB": -(-n // block)}, {"B": block}, arrays)
    want = fc.long_meaning(arrays, block)
    for name in ("sa", "su", "sk", "tot"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(got["s"][1], want["s"][1].astype(np.float32))
    # an f32 scan in order: each prefix rounds once per step, at most L * 2^-24 of sum |x|
    assert np.all(np.abs(got["s"][0] - want["s"][0]) <= block * 2**-24 * want["s_abs"])


FOLD_DIMS = {"R": 19, "C": 200, "NB": 10}


@pytest.mark.parametrize("point", all_points(fc.kernel(fc.FOLDS, "folds")), ids=str)
def test_nvrtc_compiles_the_integer_folds(point):
    k = fc.kernel(fc.FOLDS, "folds")
    compiled = compile_kernel(k, binding.bind(k, FOLD_DIMS, None, point))
    assert compiled.entry in compiled.ptx
    src = compiled.cuda_source
    # i64 partials cross shared memory as long long (two words), u32 ones bit for bit
    assert "reinterpret_cast<long long*>" in src and "__uint_as_float(" in src
    assert "(-9223372036854775807LL - 1)" in src and "4294967295u" in src


@pytest.mark.parametrize("threads", [256, 1024])
def test_nvrtc_compiles_the_long_lines(threads):
    k = fc.long_kernel(threads)
    for point in all_points(k):
        compiled = compile_kernel(k, binding.bind(k, {"N": 5000, "NB": 5}, None, point))
        assert compiled.entry in compiled.ptx, point


def _scan_code(source: str) -> list[str]:
    """The warps-plan blocks of a kernel's CUDA: from `lane_ = ` to the barrier after them."""
    return re.findall(r"const int lane_ = th_id & 31.*?\n  __syncthreads\(\);", source, flags=re.S)


@pytest.mark.parametrize(("br", "bc", "warps_per_row"),
                         [(1, 1024, 8), (2, 1024, 4), (4, 4096, 2), (1, 4096, 8)])
def test_long_rows_are_shuffles_and_a_block_level_scan(br, bc, warps_per_row):
    """A row of 1024 or 4096 columns: each lane holds one element per pass of 32 G (G warps on a
    row), a 5-step __shfl_up_sync scan, the warps' totals combined in shared memory: O(L) work
    in L / (32 G) passes, never a loop over the row inside a loop over the row."""
    k = fc.kernel(fc.LONG_ROWS, "long_rows")
    src = generate_source(k, binding.bind(k, {"R": 9, "C": bc}, None, {"BR": br, "BC": bc})).source
    blocks = _scan_code(src)
    assert len(blocks) == 2  # the f32 and the i32 scan
    for code in blocks:
        assert f"part_ = warp_ % {warps_per_row}" in code
        assert f"pass_ < {bc}; pass_ += {32 * warps_per_row})" in code
        assert "for (int o_ = 1; o_ < 32; o_ <<= 1)" in code and "__shfl_up_sync(0xffffffffu, x_, o_)" in code
        assert f"for (int q_ = 0; q_ < {warps_per_row}; ++q_)" in code  # the block-level part
        assert code.count("for (") == 4  # lines, passes, shuffle steps, warp totals: nothing else
    compiled = compile_kernel(k, binding.bind(k, {"R": 9, "C": bc}, None, {"BR": br, "BC": bc}))
    assert compiled.entry in compiled.ptx
    assert "shfl.sync.up.b32" in compiled.ptx


@pytest.mark.parametrize(("shape", "axis", "warps", "want"), [
    ((4096,), 0, 8, ("warps", 8)), ((4096,), 0, 32, ("warps", 32)), ((1, 4096), 1, 8, ("warps", 8)),
    ((2, 1024), 1, 8, ("warps", 4)), ((64, 128), 1, 8, ("warps", 1)), ((1, 40), 1, 8, ("warps", 2)),
    ((512, 8), 0, 8, ("warps", 1)), ((64, 256), 0, 8, ("threads", 0)), ((4096, 1), 0, 8, ("warps", 8)),
])
def test_scan_plans(shape, axis, warps, want):
    lines = scans.lines_of(shape, axis)
    plan = ("threads", 0) if scans.uses_threads(lines) else ("warps", scans.warps_per_line(lines, warps))
    assert plan == want
    assert lines.count * lines.length == int(np.prod(shape))


@pytest.mark.parametrize("br", [4, 16])
def test_float_max_and_min_are_fmaxf_and_fminf(br):
    k = fc.kernel(fc.NAN_FOLDS, "nan_folds")
    rows, cols = 32, 64
    arrays = fc.nan_inputs(np.random.default_rng(33), rows, cols, br)
    got = _run(k, {"R": rows, "C": cols, "NB": rows // br}, {"BR": br, "BC": 64}, arrays)
    want = fc.nan_meaning(arrays["x"], arrays["y"], br)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    assert np.isneginf(got["r"][0][1]) and np.isposinf(got["r"][1][1])  # the row of NaNs


def test_nvrtc_compiles_the_nan_folds():
    k = fc.kernel(fc.NAN_FOLDS, "nan_folds")
    for point in all_points(k):
        compiled = compile_kernel(k, binding.bind(k, {"R": 32, "C": 64, "NB": 8}, None, point))
        assert compiled.entry in compiled.ptx and "fmaxf(" in compiled.cuda_source
