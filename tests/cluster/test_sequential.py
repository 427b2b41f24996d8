"""The sequential reference (every launch of every unit, through the interpreter) gives the plain
kernel's result, at several @cluster sizes, including more super-tiles than any node count."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cluster.build import cluster_space, compile_cluster
from compiler.cluster.sequential import run_program
from compiler.frontend.binding import bind
from compiler.interp.interpreter import run_kernel
from tests.cluster.helpers import small

RNG = np.random.default_rng(5)


def _both(kernel, dims, shapes, scalars, cluster_values):
    inputs = {name: RNG.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    plain = {n: a.copy() for n, a in inputs.items()}
    run_kernel(kernel, bind(kernel, dims), plain, scalars)
    program = compile_cluster(kernel, dims, cluster_values=cluster_values)
    clustered = {n: a.copy() for n, a in inputs.items()}
    run_program(program, clustered, scalars)
    return program, plain, clustered


@pytest.mark.parametrize("block", [64, 128, 256])
def test_add(block):
    kernel = small("add_small")
    program, plain, clustered = _both(
        kernel, {"N": 4096}, {"a": (4096,), "b": (4096,), "c": (4096,)}, {}, {"BLOCK": block}
    )
    assert len(program.units) == 4096 // block  # 16 to 64 units
    # The same f32 additions on the same elements: bit for bit.
    np.testing.assert_array_equal(clustered["c"], plain["c"])


MATMUL_SHAPES = {"A": (128, 64), "B": (64, 128), "C": (128, 128)}


@pytest.mark.parametrize(
    "values",
    [
        {"TILE_M": 32, "TILE_N": 32, "TILE_K": 16},
        {"TILE_M": 64, "TILE_N": 32, "TILE_K": 32},
        {"TILE_M": 32, "TILE_N": 64, "TILE_K": 64},
    ],
)
def test_matmul_alpha_beta(values):
    kernel = small("matmul_small")
    program, plain, clustered = _both(
        kernel, {"M": 128, "N": 128, "K": 64}, MATMUL_SHAPES, {"alpha": 1.5, "beta": -0.75}, values
    )
    assert len(program.units) == (128 // values["TILE_M"]) * (128 // values["TILE_N"])
    assert len(program.units[0].launches) == 1 + 64 // values["TILE_K"]
    # The chunked sum adds the same 64 products in another order: f32 rounding of sums of ~|8|
    # differs by a few ulps per addition, far below 1e-4.
    np.testing.assert_allclose(clustered["C"], plain["C"], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(clustered["A"], plain["A"])


def test_matmul_plain_store_of_acc():
    kernel = small("matmul_plain_small")
    values = cluster_space(kernel)[0]
    program, plain, clustered = _both(kernel, {"M": 128, "N": 128, "K": 64}, MATMUL_SHAPES, {}, values)
    assert len(program.units) == 16
    np.testing.assert_allclose(clustered["C"], plain["C"], rtol=1e-5, atol=1e-4)  # as above


@pytest.mark.parametrize("br", [32, 64, 128])
def test_flash_attention(br):
    kernel = small("flash_attention_small")
    shapes = {"Q": (512, 64), "K": (96, 64), "V": (96, 64), "O": (512, 64)}
    program, plain, clustered = _both(kernel, {"Nq": 512, "Nk": 96}, shapes, {"scale": 0.125}, {"BR": br})
    assert len(program.units) == 512 // br
    # Every row is computed by the same operations over the same keys in the same order; the
    # tolerance only covers numpy picking another summation kernel for another array shape.
    np.testing.assert_allclose(clustered["O"], plain["O"], rtol=1e-6, atol=1e-6)


def test_outputs_outside_the_regions_written_are_left_alone():
    kernel = small("add_small")
    program = compile_cluster(kernel, {"N": 256})
    tensors = {n: np.full(256, 7.0, np.float32) for n in ("a", "b", "c")}
    run_program(program, tensors, {})
    np.testing.assert_array_equal(tensors["c"], np.full(256, 14.0, np.float32))
    np.testing.assert_array_equal(tensors["a"], np.full(256, 7.0, np.float32))


def test_missing_scalar_is_a_user_error():
    from common.errors import UserError

    program = compile_cluster(small("matmul_small"), {"M": 32, "N": 32, "K": 16})
    tensors = {
        "A": np.zeros((32, 16), np.float32),
        "B": np.zeros((16, 32), np.float32),
        "C": np.zeros((32, 32), np.float32),
    }
    with pytest.raises(UserError, match="missing scalar beta"):
        run_program(program, tensors, {"alpha": 1.0})


@pytest.mark.parametrize(
    ("cluster_line", "super_grid", "leaves"),
    [
        ("@cluster(TILE_K in [16, 64])", (1,), ["init", "step"]),  # one unit, the loop across launches
        ("@cluster(TILE_M in [32, 64])", (4,), ["main"]),  # rows split, the K loop stays in the leaf
        ("@cluster(TILE_N in [32, 64], TILE_K in [32])", (1, 3), ["init", "step"]),  # only grid axis y
    ],
)
def test_matmul_with_some_names_clustered(cluster_line, super_grid, leaves):
    from common.paths import repo_file
    from tests.cluster.helpers import kernel_of

    text = repo_file("tests/cluster/kernels/matmul_small.phk").read_text()
    kernel = kernel_of(text.replace(text.splitlines()[0], cluster_line), "partial.phk")
    shapes = {"A": (128, 64), "B": (64, 96), "C": (128, 96)}
    program, plain, clustered = _both(
        kernel, {"M": 128, "N": 96, "K": 64}, shapes, {"alpha": 2.0, "beta": 0.5}, None
    )
    assert program.super_grid == super_grid
    assert [leaf.name for leaf in program.leaves] == leaves
    assert [u.coord for u in program.units][-1] == tuple(n - 1 for n in super_grid)
    np.testing.assert_allclose(
        clustered["C"], plain["C"], rtol=1e-5, atol=1e-4
    )  # as in test_matmul_alpha_beta


@pytest.mark.parametrize("br", [4, 8, 16])
def test_layernorm_rows_split_columns_looped_in_the_leaf(br):
    kernel = small("layernorm_small")
    shapes = {"x": (64, 300), "gamma": (300,), "beta": (300,), "y": (64, 300)}
    program, plain, clustered = _both(kernel, {"R": 64, "C": 300}, shapes, {"eps": 1e-5}, {"BR": br})
    assert len(program.units) == 64 // br
    reads = dict(program.units[1].launches[0].reads)
    assert reads["x"].start == (br, 0) and reads["x"].shape == (br, 300)
    assert reads["gamma"].shape == (300,)  # read whole by every unit
    # Its stores sit in a leaf loop, so the compiler cannot prove they cover the region: inout.
    assert {t.name: t.role for t in program.tensors}["y"] == "inout"
    # Same operations per row in the same order: only summation-kernel differences remain.
    np.testing.assert_allclose(clustered["y"], plain["y"], rtol=1e-5, atol=1e-5)


def test_softmax():
    kernel = small("softmax_small")
    program, plain, clustered = _both(kernel, {"R": 64, "C": 200}, {"x": (64, 200), "y": (64, 200)}, {}, None)
    assert len(program.units) == 16
    np.testing.assert_allclose(clustered["y"], plain["y"], rtol=1e-6, atol=1e-7)  # as above


def test_compound_store_makes_its_tensor_inout():
    from tests.cluster.helpers import kernel_of

    text = (
        "@cluster(BLOCK in [64])\n@autotune(BLOCK in [16])\n"
        "kernel acc(a: tensor<f32>[N], c: tensor<f32>[N]) {\n"
        "  let base = ctx.block.x * BLOCK\n  c[base :+ BLOCK] += a[base :+ BLOCK]\n}\n"
    )
    program, plain, clustered = _both(
        kernel_of(text, "acc.phk"), {"N": 1024}, {"a": (1024,), "c": (1024,)}, {}, None
    )
    assert {t.name: t.role for t in program.tensors} == {"a": "input", "c": "inout"}
    assert dict(program.units[3].launches[0].reads)["c"].start == (192,)
    np.testing.assert_array_equal(clustered["c"], plain["c"])  # one f32 add per element: exact


# ---- every problem size runs: ragged last super-tiles, problems smaller than a super-tile ----


@pytest.mark.parametrize("n", [4000, 100, 1, 4096 + 17])
def test_add_at_any_size(n):
    """The last super-tile holds what is left, and its leaf is bound to that extent (masked
    edges); a problem smaller than the super-tile is one unit."""
    kernel = small("add_small")
    shapes = {"a": (n,), "b": (n,), "c": (n,)}
    program, plain, clustered = _both(kernel, {"N": n}, shapes, {}, {"BLOCK": 256})
    assert len(program.units) == -(-n // 256)
    last = program.units[-1].launches[0]
    assert dict(last.writes)["c"].shape == ((n - 1) % 256 + 1,)
    np.testing.assert_array_equal(clustered["c"], plain["c"])


@pytest.mark.parametrize("dims", [{"M": 96, "N": 80, "K": 48}, {"M": 16, "N": 16, "K": 16},
                                  {"M": 160, "N": 32, "K": 112}])
def test_matmul_with_ragged_super_tiles_and_chunks(dims):
    kernel = small("matmul_small")
    shapes = {"A": (dims["M"], dims["K"]), "B": (dims["K"], dims["N"]), "C": (dims["M"], dims["N"])}
    values = {"TILE_M": 64, "TILE_N": 64, "TILE_K": 32}
    program, plain, clustered = _both(kernel, dims, shapes, {"alpha": 1.5, "beta": -0.75}, values)
    counts = [-(-dims[d] // values[t]) for d, t in (("M", "TILE_M"), ("N", "TILE_N"))]
    assert len(program.units) == counts[0] * counts[1]
    assert len(program.units[-1].launches) == 1 + -(-dims["K"] // 32)
    np.testing.assert_allclose(clustered["C"], plain["C"], rtol=1e-5, atol=1e-4)


def test_ragged_leaves_are_bound_to_the_smaller_extent():
    kernel = small("matmul_small")
    program = compile_cluster(kernel, {"M": 96, "N": 64, "K": 48},
                              cluster_values={"TILE_M": 64, "TILE_N": 64, "TILE_K": 32})
    leaves = {leaf.name: dict(leaf.dims) for leaf in program.leaves}
    assert leaves["step"] == {"M": 64, "K": 32, "N": 64}
    assert leaves["step@M=32,K=16"] == {"M": 32, "K": 16, "N": 64}
    assert leaves["init@M=32"] == {"M": 32, "N": 64}
    launches = [launch.leaf for launch in program.units[1].launches]
    assert launches == ["init@M=32", "step@M=32", "step@M=32,K=16"]
