"""The integer and bool dtypes, take's wide indices and the atomics in the interpreter (the
language's meaning, docs/language.md §4.3, §6.4, §8.3) against plain numpy; .npy files of the new
dtypes through `compiler run`; and the cluster layer's refusal of an atomic output that units of
work on different nodes would share."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cuda"))

import int_cases as ic  # noqa: E402

from compiler.frontend import binding  # noqa: E402
from compiler.frontend.diagnostics import CompileError  # noqa: E402
from compiler.frontend.load import load_text  # noqa: E402
from compiler.interp import interpreter as interp  # noqa: E402


def _run(kernel, dims, point, arrays, scalars=None):
    interp.run_kernel(kernel, binding.bind(kernel, dims, None, point), arrays, scalars or {})
    return arrays


@pytest.mark.parametrize("point", [{"B": 128}, {"B": 256}])
def test_integer_arithmetic_wraps_floors_and_promotes(point):
    k = ic.kernel(ic.INTS, "ints")
    arrays = _run(k, {"N": 1000}, point, ic.int_inputs(np.random.default_rng(1), 1000), ic.INT_SCALARS)
    want = ic.int_meaning(arrays, **ic.INT_SCALARS)
    for name, expected in want.items():
        np.testing.assert_array_equal(arrays[name], expected, err_msg=name)


def test_floor_division_and_remainder_of_negatives():
    k = load_text("""\
kernel divmod(a: tensor<i32>[4], b: tensor<i64>[4], q: tensor<i32>[2, 4], r: tensor<i64>[2, 4]) {
  let x = load(a[0 :+ 4])
  let y = load(b[0 :+ 4])
  q[0, 0 :+ 4] = x / 2
  q[1, 0 :+ 4] = x % -3
  r[0, 0 :+ 4] = y / -2
  r[1, 0 :+ 4] = y % 3
}
""", "divmod.phk").kernel()
    a = np.array([-7, 7, -1, 0], np.int32)
    b = np.array([-7, 7, -(2**40) - 1, 5], np.int64)
    out = {"q": np.zeros((2, 4), np.int32), "r": np.zeros((2, 4), np.int64)}
    arrays = _run(k, {}, {}, {"a": a, "b": b, **out})
    np.testing.assert_array_equal(arrays["q"], [[-4, 3, -1, 0], [-1, -2, -1, 0]])
    np.testing.assert_array_equal(arrays["r"], [[3, -4, 2**39, -3], [2, 1, b[2] % 3, 2]])


def test_conversions_saturate_from_floats_and_wrap_between_integers():
    k = ic.kernel(ic.CONVERT, "convert")
    arrays = _run(k, {"N": 700}, {"B": 128}, ic.convert_inputs(np.random.default_rng(2), 700))
    for name, expected in ic.convert_meaning(arrays).items():
        np.testing.assert_array_equal(arrays[name], expected, err_msg=name)


def test_take_with_i64_and_u32_indices_reads_zero_outside():
    k = ic.kernel(ic.GATHER_WIDE, "gather_wide")
    arrays = _run(k, {"V": 50, "D": 64, "M": 40}, {"BM": 16, "BD": 32},
                  ic.gather_inputs(np.random.default_rng(3), 50, 64, 40))
    want = ic.gather_meaning(arrays["E"], arrays["ids"], arrays["uids"])
    np.testing.assert_array_equal(arrays["out"], want)


@pytest.mark.parametrize("block", [64, 256])
def test_atomics_combine_every_cta(block):
    k = ic.kernel(ic.HIST, "hist")
    arrays = _run(k, {"N": 3000, "NB": 7}, {"B": block}, ic.hist_inputs(np.random.default_rng(4), 3000, 7))
    want = ic.hist_meaning(arrays, block, 7)
    for name in ("counts", "top", "low", "total"):
        np.testing.assert_array_equal(arrays[name], want[name], err_msg=name)
    np.testing.assert_allclose(arrays["mass"], want["mass"], rtol=3000 * 2**-24)  # f32 adds, any order


def test_tile_atomics_along_a_grid_axis():
    k = ic.kernel(ic.ROW_SUMS, "row_sums")
    inputs = ic.row_sum_inputs(np.random.default_rng(5), 70, 300)
    arrays = _run(k, {"R": 70, "C": 300}, {"BR": 8, "BC": 64}, inputs)
    want = ic.row_sum_meaning(arrays, 64)
    np.testing.assert_array_equal(arrays["t"], want["t"])
    np.testing.assert_array_equal(arrays["m"], want["m"])
    np.testing.assert_allclose(arrays["s"], want["s"], rtol=0, atol=300 * 2**-24 * 30)


def test_scalar_parameters_of_the_new_types_are_range_checked():
    from common.errors import UserError

    k = ic.kernel(ic.INTS, "ints")
    for bad in ({"s": 2**63, "t": 0}, {"s": 0, "t": -1}, {"s": 0.5, "t": 0}, {"s": 0, "t": 2**32}):
        with pytest.raises(UserError):
            interp.scalar_arguments(k, bad)


def test_npy_files_of_the_new_dtypes_through_compiler_run(tmp_path, capsys):
    from tests.compiler.test_run_cli import run_cli

    src = tmp_path / "ints.phk"
    src.write_text(ic.INTS)
    arrays = ic.int_inputs(np.random.default_rng(6), 300)
    for name, value in arrays.items():
        if name not in ("y", "z", "w", "g"):
            np.save(tmp_path / f"{name}.npy", value)
    flags = [f"--tensor={n}={tmp_path / n}.npy" for n in arrays]
    scalars = [f"--scalar=s={ic.INT_SCALARS['s']}", f"--scalar=t={ic.INT_SCALARS['t']}"]
    code, _, err = run_cli([src, *flags, *scalars], capsys)
    assert code == 0, err
    want = ic.int_meaning(arrays, **ic.INT_SCALARS)
    for name, expected in want.items():
        got = np.load(tmp_path / f"{name}.npy")
        assert got.dtype == expected.dtype, name
        np.testing.assert_array_equal(got, expected, err_msg=name)


def test_the_cluster_layer_refuses_an_atomic_output_shared_by_units():
    from compiler.cluster.build import check_cluster

    text = """\
@cluster(B in [256])
@autotune(B in [64, 256])
kernel hist(x: tensor<i32>[N], counts: tensor<i32>[NB]) {
  let i = ctx.block.x * B
  let b = load(x[i :+ B], fill = -1)
  atomic_add(counts[0], sum(where(b == 3, 1, 0), axis = 0))
}
"""
    k = load_text(text, "hist.phk").kernel()
    with pytest.raises(CompileError) as info:
        check_cluster(k)
    first = info.value.render().splitlines()[0]
    assert first.startswith("hist.phk:6:21: error: "), first
    assert "atomic_add into 'counts' is not split along ctx.block.x" in first
    assert "does not reduce atomic outputs across nodes" in first


ROW_HIST = """\
@cluster(BR in [16])
@autotune(BR in [4, 16], BC in [64])
kernel row_hist(x: tensor<i32>[R, C], counts: tensor<i32>[R, NB], top: tensor<i64>[R]) {
  let r = ctx.block.x * BR
  let c = ctx.block.y * BC
  let t = load(x[r :+ BR, c :+ BC], fill = -1)
  for j in range(0, NB) {
    atomic_add(counts[r :+ BR, j], sum(where(t == j, 1, 0), axis = 1))
  }
  atomic_max(top[r :+ BR], i64(max(t, axis = 1)) * 1000 + i64(c))
}
"""


def test_the_cluster_layer_runs_an_atomic_output_split_along_its_cluster_axis():
    """Split along the cluster's grid axis x, each unit's CTAs along y reduce into its own rows on
    its node: the cluster program (every unit, the sequential reference) equals the plain kernel
    and the numpy histogram, old contents included."""
    from compiler.cluster.build import compile_cluster
    from compiler.cluster.sequential import run_program

    k = load_text(ROW_HIST, "row_hist.phk").kernel()
    rows, cols, bins = 64, 300, 5
    x = np.random.default_rng(7).integers(0, bins, (rows, cols)).astype(np.int32)
    inputs = {"x": x, "counts": np.full((rows, bins), 3, np.int32), "top": np.full(rows, -9, np.int64)}
    dims = {"R": rows, "C": cols, "NB": bins}
    plain = {n: a.copy() for n, a in inputs.items()}
    interp.run_kernel(k, binding.bind(k, dims), plain, {})
    program = compile_cluster(k, dims, cluster_values={"BR": 16})
    assert len(program.units) == 4
    clustered = {n: a.copy() for n, a in inputs.items()}
    run_program(program, clustered, {})
    want = np.stack([(x == j).sum(axis=1) for j in range(bins)], axis=1) + 3
    np.testing.assert_array_equal(plain["counts"], want)
    for name in ("counts", "top"):
        np.testing.assert_array_equal(clustered[name], plain[name], err_msg=name)
    blocks = [x[:, c:c + 64].max(axis=1).astype(np.int64) * 1000 + c for c in range(0, cols, 64)]
    np.testing.assert_array_equal(plain["top"], np.maximum(np.max(blocks, axis=0), -9))
