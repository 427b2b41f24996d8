"""The array planner (scheduler/planning/planner.py) gives exactly the object planner's plans
(tests/scheduler/planner_oracle.py): the same instructions in the same order with the same ids
and deps on every node, the same peaks, placement and load count, and the same refusals; on
programs of every shape the cluster compiler makes (matmul with and without beta, split-K by
every tree, split decode, attention, causal attention, two outputs, ragged edges, a row
reduction) over 1 to 5 nodes, and on re-plans of some units over some nodes."""

from __future__ import annotations

import random

import numpy as np
import pytest

from common.errors import UserError
from common.paths import repo_file
from compiler.cluster.build import compile_cluster
from compiler.cluster.tree import SplitRequest
from compiler.frontend.load import load_file
from scheduler.planning import plan_instructions, planner
from tests.cluster.helpers import small
from tests.scheduler import planner_oracle
from tests.scheduler.programs import add_program, attention_program, matmul_program


def _compiled(name: str, dims: dict[str, int], values: dict[str, int], split: SplitRequest | None = None):
    return compile_cluster(small(name), dims, cluster_values=values, split=split)


def _two_outputs():
    kernel = load_file(repo_file("tests/faults/two_outputs.phk")).kernels[0]
    return compile_cluster(kernel, {"N": 256 * 9})


MATMUL = {"TILE_M": 64, "TILE_N": 64, "TILE_K": 64}
PROGRAMS = {
    "add": lambda: add_program(16 * 37, 16),
    "matmul-beta": lambda: matmul_program(96, 80, 64, 16, 16, 16),
    "matmul-no-beta": lambda: matmul_program(64, 64, 48, 16, 16, 16, beta=False),
    "matmul-400-units": lambda: matmul_program(320, 320, 64, 16, 16, 16),  # many rounds, much sharing
    "attention": lambda: attention_program(256, 128, 16, 32),
    "matmul-compiled": lambda: _compiled("matmul_small", {"M": 256, "N": 192, "K": 256}, MATMUL),
    "split-k-flat": lambda: _compiled("matmul_small", {"M": 128, "N": 128, "K": 512}, MATMUL,
                                      SplitRequest(4, "flat")),
    "split-k-binary": lambda: _compiled("matmul_small", {"M": 128, "N": 192, "K": 512}, MATMUL,
                                        SplitRequest(4, "binary")),
    "split-k-hosts": lambda: _compiled("matmul_small", {"M": 128, "N": 128, "K": 512}, MATMUL,
                                       SplitRequest(3, "hosts", (2, 1))),
    "split-decode": lambda: _compiled("decode_gqa_small", {"G": 8, "S": 1000}, {"BS": 128},
                                      SplitRequest(4, "binary")),
    "flash-attention": lambda: _compiled("flash_attention_small", {"Nq": 512, "Nk": 300}, {"BR": 32}),
    "causal": lambda: _compiled("causal_small", {"Nq": 320, "Nk": 320}, {"BR": 32}),
    "two-outputs": _two_outputs,
    "ragged": lambda: _compiled("matmul_plain_small", {"M": 150, "N": 97, "K": 70},
                                {"TILE_M": 32, "TILE_N": 32, "TILE_K": 16}),
    "layernorm": lambda: _compiled("layernorm_small", {"R": 40, "C": 300}, {"BR": 4}),
}


def _uris(program) -> dict[str, str]:
    return {t.name: f"file:///data/{t.name}.npy" for t in program.tensors if t.role != "partial"}


def _figures(module, n: int, vram: int = 0, hosts: int = 1):
    return [module.NodeFigure(i, vram, f"h{i % hosts}") for i in range(n)]


def _assert_same(program, n: int, **kw) -> None:
    hosts = kw.pop("hosts", 1)
    new = planner.plan(program, _figures(planner, n, hosts=hosts), _uris(program), **kw)
    old = planner_oracle.plan(program, _figures(planner_oracle, n, hosts=hosts), _uris(program), **kw)
    assert new.generation == old.generation
    assert new.placement == old.placement
    assert new.loads_from_storage == old.loads_from_storage
    assert new.node_plans.keys() == old.node_plans.keys()
    for node, old_plan in old.node_plans.items():
        new_plan = new.node_plans[node]
        assert (new_plan.node, new_plan.generation, new_plan.peak_bytes, new_plan.uris) == \
            (old_plan.node, old_plan.generation, old_plan.peak_bytes, old_plan.uris)
        assert len(new_plan.instructions) == len(old_plan.instructions)
        for got, want in zip(new_plan.instructions, old_plan.instructions, strict=True):
            assert got == want, f"node {node}: {got} != {want}"
        assert tuple(new_plan.instructions) == old_plan.instructions


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_the_array_planner_gives_the_object_planners_plans(name, n):
    _assert_same(PROGRAMS[name](), n, hosts=2 if name == "split-k-hosts" else 1)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_replans_of_some_units_over_some_nodes_are_the_same(name):
    program = PROGRAMS[name]()
    rng = random.Random(name)
    for _ in range(3):
        units = [u for u in program.units if rng.random() < 0.6] or list(program.units[:1])
        _assert_same(program, rng.randint(1, 4), generation=rng.randint(2, 9), units=units,
                     first_id=rng.randint(0, 10_000))


def test_the_same_refusal_for_a_plan_that_does_not_fit():
    program = PROGRAMS["matmul-beta"]()
    errors = []
    for module in (planner, planner_oracle):
        with pytest.raises(UserError) as caught:
            module.plan(program, _figures(module, 2, vram=5000), _uris(program))
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("name", ["matmul-400-units", "split-k-flat"])
@pytest.mark.parametrize("first_id, node_base", [(0, 0), (2**31 - 50, 0), (7, 2**33)])
def test_columns_past_int32_widen_and_give_the_same_plans(name, first_id, node_base):
    """The planner keeps its columns in int32 where every value fits (half the memory of a big
    plan): ids counted from past 2**31 need int64 deps, peers named by node ids past it int64
    fields and extras; each decodes to the object planner's plan."""
    program = PROGRAMS[name]()
    plans = {module: module.plan(program, [module.NodeFigure(node_base + i) for i in range(3)],
                                 _uris(program), first_id=first_id)
             for module in (planner, planner_oracle)}
    for node, old_plan in plans[planner_oracle].node_plans.items():
        table = plans[planner].node_plans[node].instructions
        assert tuple(table) == old_plan.instructions
        assert table.deps.dtype == (np.int64 if first_id > 2**30 else np.int32)
        wide = np.int64 if node_base else np.int32
        assert (table.buffer.dtype, table.a.dtype, table.extra.dtype) == (wide, wide, wide)
        assert table.dep_start.dtype == table.extra_start.dtype == np.int32


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_stretches_copied_a_chunk_at_a_time_land_as_copied_at_once(chunk):
    """The planner copies the gates' and users' deps in chunks of about a million values: the
    plans above fit in one, so the chunk edges (empty stretches, one longer than a chunk) are
    checked here against a plain loop."""
    rng = np.random.default_rng(chunk)
    length = rng.integers(0, 12, 200)
    length[[0, 50, 199]] = 0
    length[100] = 40
    source = rng.integers(0, 10**6, 300)
    first = rng.integers(0, len(source) - 40, len(length))
    order = rng.permutation(len(length))  # the stretches land in another order than they come
    to = np.empty(len(length), np.int64)
    to[order] = np.cumsum(length[order]) - length[order]
    values = np.full(int(length.sum()), -1, np.int64)
    plan_instructions.copy_stretches(values, to, source, first, length, chunk)
    expected = np.full(len(values), -1, np.int64)
    for i in range(len(length)):
        expected[to[i]:to[i] + length[i]] = source[first[i]:first[i] + length[i]]
    assert (values == expected).all() and (values >= 0).all()
