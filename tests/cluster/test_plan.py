"""Planning the real examples at real sizes: super-tile grids, exact regions, leaves."""

from __future__ import annotations

import pytest

from common.errors import UserError
from compiler.cluster.build import cluster_space, compile_cluster, values_outside_space
from compiler.cluster.leaves import leaf_kernel
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError
from schemas.program import Region
from tests.cluster.helpers import example, small

GiB_DIMS = {"M": 16384, "N": 16384, "K": 16384}


def regions(launch):
    return dict(launch.reads), dict(launch.writes)


def test_add_splits_every_tensor_by_block():
    program = compile_cluster(example("add"), {"N": 4 * 1048576})
    assert program.super_grid == (4,)
    assert [u.coord for u in program.units] == [(0,), (1,), (2,), (3,)]
    assert [u.index for u in program.units] == [0, 1, 2, 3]
    reads, writes = regions(program.units[2].launches[0])
    assert reads == {"a": Region("a", (2097152,), (1048576,)), "b": Region("b", (2097152,), (1048576,))}
    assert writes == {"c": Region("c", (2097152,), (1048576,))}
    (leaf,) = program.leaves
    assert (leaf.name, leaf.dims, leaf.tile_values) == ("main", (("N", 1048576),), (("BLOCK", 16),))
    assert leaf.grid == (1048576 // 16,) and leaf.threads == 256
    assert leaf.flops == 1048576  # one add per element
    assert {t.name: t.role for t in program.tensors} == {"a": "input", "b": "input", "c": "output"}


def test_add_at_a_chosen_cluster_value_and_tile():
    program = compile_cluster(
        example("add"), {"N": 16777216 * 2}, cluster_values={"BLOCK": 16777216}, tile_values={"BLOCK": 4096}
    )
    assert program.super_grid == (2,)
    assert program.cluster_values == (("BLOCK", 16777216),)
    assert program.leaves[0].grid == (4096,)


def test_matmul_real_size_is_4x4_units_of_init_and_4_steps():
    program = compile_cluster(example("matmul"), GiB_DIMS)
    assert program.super_grid == (4, 4)
    assert len(program.units) == 16
    unit = program.units[6]  # row-major: x = 1, y = 2
    assert unit.coord == (1, 2) and unit.index == 6
    assert [launch.leaf for launch in unit.launches] == ["init", "step", "step", "step", "step"]
    c = Region("C", (4096, 8192), (4096, 4096))
    assert regions(unit.launches[0]) == ({"C": c}, {"C": c})  # beta * C reads the old C
    for k, step in enumerate(unit.launches[1:]):
        reads, writes = regions(step)
        assert reads == {
            "A": Region("A", (4096, 4096 * k), (4096, 4096)),
            "B": Region("B", (4096 * k, 8192), (4096, 4096)),
            "C": c,
        }
        assert writes == {"C": c}
    init, step = program.leaf("init"), program.leaf("step")
    assert dict(init.dims) == {"M": 4096, "N": 4096} and init.grid == (128, 128)
    assert dict(step.dims) == {"M": 4096, "N": 4096, "K": 4096}
    assert dict(step.tile_values) == {"TILE_M": 32, "TILE_N": 32, "TILE_K": 4}
    assert step.flops >= 2 * 4096**3
    assert {t.name: t.role for t in program.tensors} == {"A": "input", "B": "input", "C": "inout"}
    assert "alpha * acc + c_old" in step.source and "@cluster" not in step.source
    assert "= beta * C[ctx.block.x * TILE_M :+ TILE_M" in init.source


def test_matmul_plain_output_is_not_read_from_storage():
    program = compile_cluster(example("matmul_plain"), {"M": 4096, "N": 2048, "K": 1024})
    assert program.super_grid == (8, 4)
    init, step = program.leaf("init"), program.leaf("step")
    assert "= 0.0" in init.source
    assert "= acc + C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N]" in step.source
    assert regions(program.units[0].launches[0])[0] == {}  # the init reads nothing
    assert len(program.units[0].launches) == 1 + 2
    assert {t.name: t.role for t in program.tensors}["C"] == "output"


def test_flash_attention_16_units_read_k_and_v_whole():
    program = compile_cluster(example("flash_attention"), {"Nq": 16384, "Nk": 16384})
    assert program.super_grid == (16,)
    k_whole, v_whole = Region("K", (0, 0), (16384, 64)), Region("V", (0, 0), (16384, 64))
    for unit in program.units:
        reads, writes = regions(unit.launches[0])
        row = unit.coord[0] * 1024
        assert reads == {"Q": Region("Q", (row, 0), (1024, 64)), "K": k_whole, "V": v_whole}
        assert writes == {"O": Region("O", (row, 0), (1024, 64))}
    leaf = program.leaves[0]
    assert dict(leaf.dims) == {"Nq": 1024, "D": 64, "Nk": 16384}
    assert leaf.grid == (1024 // 32,)


def test_leaf_keeps_the_users_nodes_and_spans():
    """A leaf is the user's IR (not a text edited and parsed again): its statements are the
    user's, spans included, so whatever points into a leaf points at the user's file."""
    kernel = example("flash_attention")
    leaf = compile_cluster(kernel, {"Nq": 2048, "Nk": 64}).leaves[0]
    made = leaf_kernel(leaf)
    assert made.body == kernel.body and made.span == kernel.span and made.grid == kernel.grid
    assert made.attributes == tuple(a for a in kernel.attributes if not isinstance(a, ir.Cluster))
    matmul = example("matmul")
    program = compile_cluster(matmul, {"M": 256, "N": 256, "K": 512})
    for name in ("init", "step"):  # the made store and the edited one: the user's store's span
        assert leaf_kernel(program.leaf(name)).body[-1].span == matmul.body[-1].span


def test_cluster_space_lists_every_combination():
    assert cluster_space(example("add")) == [
        {"BLOCK": v} for v in (1048576, 2097152, 4194304, 8388608, 16777216)
    ]
    space = cluster_space(small("matmul_small"))
    assert len(space) == 2 * 2 * 3 and space[0] == {"TILE_M": 32, "TILE_N": 32, "TILE_K": 16}


def test_cluster_value_outside_its_space_is_used_with_a_warning():
    kernel = example("add")
    program = compile_cluster(kernel, {"N": 1048576}, cluster_values={"BLOCK": 1024 * 16})
    assert dict(program.cluster_values) == {"BLOCK": 16384} and len(program.units) == 64
    assert values_outside_space(kernel, {"BLOCK": 16384}) == [
        "warning: @cluster BLOCK = 16384 is outside its search space (1048576, 2097152, 4194304, "
        "8388608, 16777216); using it as given"
    ]
    assert values_outside_space(kernel, {"BLOCK": 1048576}) == []
    with pytest.raises(UserError, match=r"BLOCK = 0 must be a positive integer"):
        compile_cluster(kernel, {"N": 1048576}, cluster_values={"BLOCK": 0})
    with pytest.raises(UserError, match=r"no @cluster name TILE"):
        compile_cluster(example("add"), {"N": 1048576}, cluster_values={"TILE": 1})


def test_missing_dim_is_a_user_error():
    with pytest.raises(UserError, match="missing dimension N"):
        compile_cluster(example("add"), {})


def test_kernel_without_cluster_is_rejected():
    with pytest.raises(CompileError, match="no @cluster attribute"):
        compile_cluster(example("axpby"), {"M": 8, "N": 32})
