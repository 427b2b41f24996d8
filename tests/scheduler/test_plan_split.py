"""The planner on split reductions: shares on distinct nodes in one round, partials fetched from
their writer and freed after that fetch, no deadlock or overdraft in any order of events, and a
re-plan onto fewer nodes than shares."""

from __future__ import annotations

from collections import Counter

import pytest

from compiler.cluster.build import compile_cluster
from compiler.cluster.tree import SplitRequest
from scheduler.planning.planner import NodeFigure, plan
from schemas.instructions import Compute, Fetch, Free, Load, Store
from tests.cluster.helpers import small
from tests.scheduler.simulate import simulate


def _matmul(shares: int, shape: str = "flat", hosts=()):  # 2 x 2 output super-tiles, 8 chunks of K
    return compile_cluster(small("matmul_small"), {"M": 128, "N": 128, "K": 512},
                           cluster_values={"TILE_M": 64, "TILE_N": 64, "TILE_K": 64},
                           split=SplitRequest(shares, shape, hosts))


def _decode(shares: int, shape: str = "flat"):  # one unit, 7 chunks of keys and a ragged eighth
    return compile_cluster(small("decode_gqa_small"), {"G": 8, "S": 1000}, cluster_values={"BS": 128},
                           split=SplitRequest(shares, shape))


def _uris(program):
    return {t.name: f"file:///tmp/{t.name}.npy" for t in program.tensors if t.role != "partial"}


def _writes(program) -> dict[str, tuple[str, ...]]:
    out: dict[str, set[str]] = {}
    for unit in program.units:
        for launch in unit.launches:
            out.setdefault(launch.leaf, set()).update(p for p, _ in launch.writes)
    return {leaf: tuple(params) for leaf, params in out.items()}


def _outputs(program):
    return {r for u in program.units for la in u.launches for _, r in la.writes
            if program_role(program, r.tensor) != "partial"}


def program_role(program, tensor: str) -> str:
    return next(t.role for t in program.tensors if t.name == tensor)


CASES = [(_matmul, 4, "flat", ()), (_matmul, 4, "binary", ()), (_matmul, 3, "hosts", (2, 1)),
         (_decode, 4, "binary", ()), (_decode, 2, "flat", ()), (_decode, 1, "flat", ())]


@pytest.mark.parametrize("make,shares,shape,hosts", CASES)
@pytest.mark.parametrize("n_nodes", [1, 2, 4, 5])
def test_split_plans_run_in_any_order(make, shares, shape, hosts, n_nodes):
    program = make(shares, shape, hosts) if hosts else make(shares, shape)
    result = plan(program, [NodeFigure(i) for i in range(n_nodes)], _uris(program))
    for seed in range(3):
        stores = simulate(result.node_plans, _writes(program), seed=seed, partials=True)
        assert {region for region, _ in stores} == _outputs(program)  # every output once, no partial


def test_shares_of_a_unit_run_on_distinct_nodes_in_one_round():
    program = _matmul(4, "binary")
    result = plan(program, [NodeFigure(i) for i in range(4)], _uris(program))
    for unit in program.units:
        nodes = {node for node, p in result.node_plans.items()
                 for ins in p.instructions if isinstance(ins, Compute) and ins.unit == unit.index}
        assert nodes == {0, 1, 2, 3}
    # Four units of four shares on four nodes: every node computes a share of every unit, and the
    # roots (which store) rotate over the nodes.
    assert sorted(Counter(result.placement.values()).values()) == [1, 1, 1, 1]


def test_partials_are_fetched_from_their_writer_and_freed_after():
    program = _decode(4, "flat")
    result = plan(program, [NodeFigure(i) for i in range(4)], _uris(program))
    fetches = [(node, ins) for node, p in result.node_plans.items() for ins in p.instructions
               if isinstance(ins, Fetch)]
    loaded = {(node, ins.buffer) for node, p in result.node_plans.items() for ins in p.instructions
              if isinstance(ins, Load)}
    partial_fetches = [(node, ins) for node, ins in fetches if (ins.peer, ins.peer_buffer) not in loaded]
    root = result.placement[0]
    # Flat: the root fetches the three other shares' (m, l, acc), nine partial tiles; besides, the
    # three shares that did not load Q fetch it, and K/V chunks are each read by one share only.
    assert len(partial_fetches) == 9 and {node for node, _ in partial_fetches} == {root}
    assert len(fetches) == 9 + 3
    for _, ins in partial_fetches:
        frees = [f for f in result.node_plans[ins.peer].instructions
                 if isinstance(f, Free) and f.buffer == ins.peer_buffer]
        assert len(frees) == 1 and frees[0].serves == 1
    stores = [ins for p in result.node_plans.values() for ins in p.instructions if isinstance(ins, Store)]
    assert [s.region.tensor for s in stores] == ["O"]


def test_replan_onto_fewer_nodes_than_shares():
    program = _matmul(4, "binary")
    left = [u for u in program.units if u.index != 0]
    result = plan(program, [NodeFigure(0), NodeFigure(2)], _uris(program), generation=2, units=left)
    assert sorted(result.placement) == [1, 2, 3]
    stores = simulate(result.node_plans, _writes(program), partials=True)
    assert len(stores) == 3


def test_a_tree_by_hosts_keeps_each_group_on_its_host():
    # Four nodes listed A, B, A, B: the groups (2, 2) go to host A's nodes and to host B's, so the
    # one partial that crosses hosts per unit is group B's, into the root on host A.
    program = _matmul(4, "hosts", (2, 2))
    figures = [NodeFigure(i, 0, "AB"[i % 2]) for i in range(4)]
    host = {f.node: f.host for f in figures}
    result = plan(program, figures, _uris(program))
    across = [(node, ins) for node, p in result.node_plans.items() for ins in p.instructions
              if isinstance(ins, Fetch) and host[ins.peer] != host[node]]
    assert len(across) == len(program.units) and {host[node] for node, _ in across} == {"A"}
    simulate(result.node_plans, _writes(program), partials=True)
    # Not knowing the hosts, the planner places the shares as any split's: more partials cross.
    blind = plan(program, [NodeFigure(i) for i in range(4)], _uris(program))
    crossing = sum(isinstance(ins, Fetch) and host[ins.peer] != host[node]
                   for node, p in blind.node_plans.items() for ins in p.instructions)
    assert crossing > len(program.units)


def test_a_tree_by_hosts_the_hosts_cannot_hold_is_placed_as_any_split():
    program = _matmul(3, "hosts", (2, 1))
    figures = [NodeFigure(0, 0, "A"), NodeFigure(1, 0, "B"), NodeFigure(2, 0, "C")]  # no host has 2
    result = plan(program, figures, _uris(program))
    simulate(result.node_plans, _writes(program), partials=True)
