"""The cluster compiler's stages (compiler/pipeline.py CLUSTER_STAGES), one at a time: the state
before each, the state it returns, and its dump.

The case: examples' matmul at a small @cluster range, M = 96 cut into super-tiles of 64 (the last
one 32 rows), N = 64, K = 128 in two chunks of 64.
"""

from __future__ import annotations

import dataclasses

import pytest

from compiler import pipeline
from compiler.cluster import build
from compiler.cluster.access import AxisRole
from compiler.cluster.build import ClusterState
from compiler.cluster.tiling import DimCut
from compiler.frontend.diagnostics import CompileError
from tests.cluster.helpers import small

DIMS = {"M": 96, "N": 64, "K": 128}
VALUES = {"TILE_M": 64, "TILE_N": 64, "TILE_K": 64}


def _start() -> ClusterState:
    return ClusterState(small("matmul_small"), dict(DIMS), dict(VALUES), None)


def _before(stage: str) -> ClusterState:
    """The state the stage receives: every stage before it run, in order."""
    index = pipeline.CLUSTER_STAGES.index(stage)
    if index == 0:
        return _start()
    return pipeline.run_cluster(_start(), until=pipeline.CLUSTER_STAGES[index - 1], dump=False)


def _run(stage: str) -> tuple[ClusterState, ClusterState, str]:
    """(before, after, the stage's dump): the stage alone, as run_cluster runs it."""
    before = _before(stage)
    after = pipeline._CLUSTER_IMPLEMENTATIONS[stage](before)
    return before, after, f"=== after {stage} ===\n{after.describe(stage)}\n"


def test_the_stages_are_listed_in_order_and_all_implemented():
    assert pipeline.CLUSTER_STAGES == (
        "choose_values", "find_loop", "plan_accesses", "check_multiples", "make_leaves", "build_units")
    assert set(pipeline._CLUSTER_IMPLEMENTATIONS) == set(pipeline.CLUSTER_STAGES)
    with pytest.raises(ValueError, match="already registered"):
        pipeline.cluster_stage("find_loop")
    with pytest.raises(ValueError, match="no cluster stage 'lower'"):
        pipeline.cluster_stage("lower")


def test_choose_values():
    before, after, dump = _run("choose_values")
    assert before.cluster_values is None and before.full is None
    assert after.cluster_values == VALUES
    assert after.full == {"M": 96, "K": 128, "N": 64}
    assert after.tile_values == {"TILE_M": 16, "TILE_N": 16, "TILE_K": 4}  # each @autotune first
    assert dump == ("=== after choose_values ===\n@cluster values: TILE_M=64, TILE_N=64, TILE_K=64\n"
                    "dims: M=96, K=128, N=64\ntile values: TILE_M=16, TILE_N=16, TILE_K=4\n")


def test_find_loop():
    before, after, dump = _run("find_loop")
    assert before.loop is None and before.level is None
    assert after.loop.var == "kt" and after.acc.var == "acc" and after.acc.store.tensor == "C"
    assert after.level.grid_tiles == {"x": "TILE_M", "y": "TILE_N"}
    assert (after.level.loop_var, after.level.loop_tile) == ("kt", "TILE_K")
    assert dump == ("=== after find_loop ===\nsuper-tile grid axes: x by TILE_M, y by TILE_N\n"
                    "cluster loop: kt in steps of TILE_K, accumulating acc into C\n")


def test_plan_accesses():
    before, after, dump = _run("plan_accesses")
    assert before.plan is None and before.roles is None
    assert after.roles == {"M": AxisRole("grid", "x", "TILE_M"), "K": AxisRole("chunk", "", "TILE_K"),
                           "N": AxisRole("grid", "y", "TILE_N")}
    assert {n: (a.reads, a.writes) for n, a in after.plan.tensors.items()} == {
        "A": (True, False), "B": (True, False), "C": (True, True)}
    assert "tensor C: read and written" in dump and "K: cut into chunks of TILE_K by the cluster loop" in dump


def test_check_multiples():
    before, after, dump = _run("check_multiples")
    assert before.cuts is None
    assert after.cuts == {"M": DimCut(64, 2, 32), "K": DimCut(64, 2, 64), "N": DimCut(64, 1, 64)}
    assert after.leaf_dims == {"M": 64, "K": 64, "N": 64}
    assert dump == ("=== after check_multiples ===\nM: 2 super-tile(s) of 64, the last 32\n"
                    "K: 2 super-tile(s) of 64\nN: 1 super-tile(s) of 64\nleaf dims: M=64, K=64, N=64\n")


def test_check_multiples_refuses_a_super_tile_that_is_no_multiple_of_its_leaf_tile():
    state = _before("check_multiples")
    bad = dataclasses.replace(state, tile_values={**state.tile_values, "TILE_K": 48})
    with pytest.raises(CompileError, match="not a whole multiple"):
        build.check_multiples(bad)


def test_make_leaves():
    before, after, dump = _run("make_leaves")
    assert before.variants is None
    assert set(after.leaf_kernels) == {"init", "step"}
    leaves = {leaf.name: leaf for leaf in after.variants.leaves()}
    assert list(leaves) == ["init", "step"]  # the edge variants come with the units
    assert leaves["step"].dims == (("M", 64), ("K", 64), ("N", 64)) and leaves["step"].grid == (4, 4)
    assert dump.startswith("=== after make_leaves ===\ninit: kernel matmul; dims M=64, N=64;")


def test_build_units():
    before, after, dump = _run("build_units")
    assert before.program is None
    program = after.program
    assert program.super_grid == (2, 1) and len(program.units) == 2
    assert [leaf.name for leaf in program.leaves] == ["init", "step", "init@M=32", "step@M=32"]
    assert [launch.leaf for launch in program.units[1].launches] == ["init@M=32", "step@M=32", "step@M=32"]
    assert [t.role for t in program.tensors] == ["input", "input", "inout"]
    assert "#1 (1, 0): init@M=32 reads C[64:96, 0:64]  writes C[64:96, 0:64]" in dump


def test_compile_cluster_is_the_stages_in_order_and_dumps_them(capsys):
    program = build.compile_cluster(small("matmul_small"), DIMS, cluster_values=VALUES, dump=True)
    assert program == pipeline.run_cluster(_start(), dump=False).program
    err = capsys.readouterr().err
    heads = [line for line in err.splitlines() if line.startswith("=== after ")]
    cluster_heads = [h for h in heads if h[len("=== after "):-len(" ===")] in pipeline.CLUSTER_STAGES]
    assert cluster_heads == [f"=== after {name} ===" for name in pipeline.CLUSTER_STAGES]
