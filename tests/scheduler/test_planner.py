"""The planner, pure: placement, loaders and fetches, frees, bounded peak memory, VRAM refusal."""

from __future__ import annotations

from collections import Counter

import pytest

from common.errors import UserError
from scheduler.planning.planner import NodeFigure, plan
from schemas.instructions import Allocate, Compute, Fetch, Free, Load, Store
from tests.scheduler.programs import add_program, attention_program, matmul_program, uris_of
from tests.scheduler.simulate import simulate

WRITES = {"main": ("c", "O"), "init": ("C",), "step": ("C",)}


def nodes(n: int, vram: int = 0) -> list[NodeFigure]:
    return [NodeFigure(i, vram) for i in range(n)]


def expected_history(unit, out_region):
    history = []
    for launch in unit.launches:
        if any(r == out_region for _, r in launch.writes):
            written = WRITES[launch.leaf]
            history.append((launch.leaf, tuple(sorted((p, r) for p, r in launch.reads if p not in written))))
    return tuple(history)


def check_by_simulation(program, n_nodes: int, seeds=range(4)):
    result = plan(program, nodes(n_nodes), uris_of(program))
    for seed in seeds:
        stores = simulate(result.node_plans, WRITES, seed=seed)
        expected = {}
        for unit in program.units:
            for launch in unit.launches:
                for _, region in launch.writes:
                    expected[region] = unit
        assert {region for region, _ in stores} == set(expected)
        for (region, _), (unit_index, (start, history)) in stores.items():
            unit = expected[region]
            assert unit_index == unit.index
            first = next(launch for launch in unit.launches
                         if any(r == region for _, r in launch.reads + launch.writes))
            loaded = any(r == region for _, r in first.reads)  # old contents read (beta * C)
            assert start == (region if loaded else None)
            assert history == expected_history(unit, region)
    return result


@pytest.mark.parametrize("n_nodes", [1, 2, 3, 4])
def test_add_runs_correctly_in_any_order(n_nodes):
    check_by_simulation(add_program(1000, 64), n_nodes)


@pytest.mark.parametrize("n_nodes", [1, 2, 3, 4])
@pytest.mark.parametrize("beta", [True, False])
def test_matmul_runs_correctly_in_any_order(n_nodes, beta):
    check_by_simulation(matmul_program(64, 96, 48, 16, 16, 16, beta=beta), n_nodes)


@pytest.mark.parametrize("n_nodes", [1, 2, 3, 4])
def test_attention_runs_correctly_in_any_order(n_nodes):
    check_by_simulation(attention_program(256, 64, 8, 32), n_nodes)


def test_round_robin_placement_by_unit_index():
    program = add_program(640, 64)
    result = plan(program, nodes(3), uris_of(program))
    assert result.placement == {i: i % 3 for i in range(10)}
    for node, node_plan in result.node_plans.items():
        units = [i.unit for i in node_plan.instructions if isinstance(i, Compute)]
        assert units == list(range(node, 10, 3))  # in index order on each node


def test_replan_deals_remaining_units_over_remaining_nodes():
    program = add_program(640, 64)
    left = [u for u in program.units if u.index not in (0, 3)]
    result = plan(program, [NodeFigure(0), NodeFigure(2)], uris_of(program), generation=2, units=left)
    assert set(result.node_plans) == {0, 2}
    assert all(p.generation == 2 for p in result.node_plans.values())
    assert sorted(result.placement) == [1, 2, 4, 5, 6, 7, 8, 9]
    assert Counter(result.placement.values()) == {0: 4, 2: 4}
    simulate(result.node_plans, WRITES)


def test_each_input_region_loaded_once_and_fetched_by_the_others():
    program = matmul_program(64, 64, 64, 16, 16, 16)
    result = plan(program, nodes(3), uris_of(program))
    loads = Counter()
    loaded_where = {}
    for node, p in result.node_plans.items():
        buffers = {}
        for ins in p.instructions:
            if isinstance(ins, Load) and ins.region.tensor in "AB":
                loads[ins.region] += 1
                loaded_where[ins.region] = (node, ins.buffer)
    assert set(loads.values()) == {1}
    assert len(loads) == 4 * 4 * 2  # every A and B super-tile
    fetched = Counter()
    for node, p in result.node_plans.items():
        buffers = {}
        for ins in p.instructions:
            if isinstance(ins, Fetch):
                # the fetched buffer is the loader's buffer of that region
                region = next(r for r, where in loaded_where.items() if where == (ins.peer, ins.peer_buffer))
                buffers[ins.buffer] = region
                fetched[region, node] += 1
                assert ins.peer != node
    assert set(fetched.values()) == {1}  # a node fetches a region once and keeps it
    # Every node that needs a region either loaded it or fetched it.
    for node, p in result.node_plans.items():
        needed = {r for i in p.instructions if isinstance(i, Compute) for u in program.units
                  if u.index == i.unit for launch in u.launches for _, r in launch.reads if r.tensor in "AB"}
        have = {r for r, (n, _) in loaded_where.items() if n == node} | {r for (r, n) in fetched if n == node}
        assert needed <= have


def test_loads_are_spread_over_nodes_needing_a_region_in_the_same_round():
    program = attention_program(256, 64, 8, 32)
    result = plan(program, nodes(2), uris_of(program))
    loaders = {ins.region.tensor: node for node, p in result.node_plans.items()
               for ins in p.instructions if isinstance(ins, Load) and ins.region.tensor in "KV"}
    assert sorted(loaders.values()) == [0, 1]  # one each, not both on node 0


def test_frees_come_after_last_use_and_count_serves():
    program = matmul_program(64, 64, 64, 16, 16, 16)
    result = plan(program, nodes(3), uris_of(program))
    fetches = Counter((i.peer, i.peer_buffer) for p in result.node_plans.values()
                      for i in p.instructions if isinstance(i, Fetch))
    for node, p in result.node_plans.items():
        uses: dict[int, list[int]] = {}
        freed = {}
        for ins in p.instructions:
            touched = [b for _, b in ins.bindings] if isinstance(ins, Compute) else [ins.buffer]
            for b in touched:
                assert b not in freed, f"buffer {b} used after its free"
                if not isinstance(ins, Free):
                    uses.setdefault(b, []).append(ins.id)
            if isinstance(ins, Free):
                freed[ins.buffer] = ins
        assert set(freed) == set(uses)  # every buffer freed exactly once
        for b, free in freed.items():
            later = set(uses[b]) - {uses[b][0]}  # all but the allocation
            # the free waits (directly) for every use, or for the store that follows them
            deps = set(free.deps)
            assert deps & later
            assert free.serves == fetches[node, b]


def test_peak_memory_is_two_units_in_flight():
    program = add_program(64 * 20, 64)
    result = plan(program, nodes(1), uris_of(program))
    assert result.node_plans[0].peak_bytes == 2 * 3 * 64 * 4
    simulate(result.node_plans, WRITES, seed=3)  # also checks the simulated peak never exceeds it


def test_peak_memory_counts_shared_inputs_held_all_along():
    program = attention_program(256, 64, 8, 32)
    result = plan(program, nodes(2), uris_of(program))
    kv = 2 * 64 * 8 * 4
    qo = 2 * 32 * 8 * 4
    for p in result.node_plans.values():
        assert p.peak_bytes == kv + 2 * qo


def test_allocations_wait_for_the_unit_two_before():
    program = add_program(64 * 6, 64)
    p = plan(program, nodes(1), uris_of(program)).node_plans[0]
    stores = [i for i in p.instructions if isinstance(i, Store)]
    store_ids = {s.id for s in stores}
    frees = {i.deps[0]: i.id for i in p.instructions if isinstance(i, Free) and i.deps[0] in store_ids}
    allocs_by_unit = {}
    unit = -1
    prev_compute = False
    for ins in p.instructions:
        if isinstance(ins, Allocate) and (unit < 0 or prev_compute):
            unit += 1
        prev_compute = isinstance(ins, (Compute, Store, Free))
        if isinstance(ins, Allocate):
            allocs_by_unit.setdefault(unit, []).append(ins)
    for u in range(2, 6):
        for alloc in allocs_by_unit[u]:
            assert frees[stores[u - 2].id] in alloc.deps


def test_vram_refusal_names_node_peak_and_vram():
    program = attention_program(256, 64, 8, 32)
    with pytest.raises(UserError) as err:
        plan(program, [NodeFigure(0, 1 << 30), NodeFigure(1, 1000)], uris_of(program))
    text = str(err.value)
    assert "node 1" in text and "1000 bytes" in text and "(8192 bytes)" in text  # K, V and two units of Q, O


def test_no_nodes_is_a_user_error():
    program = add_program(64, 64)
    with pytest.raises(UserError, match="no node"):
        plan(program, [], uris_of(program))


def test_instruction_ids_are_unique_across_nodes():
    program = matmul_program(64, 64, 64, 16, 16, 16)
    result = plan(program, nodes(4), uris_of(program))
    ids = [i.id for p in result.node_plans.values() for i in p.instructions]
    assert len(ids) == len(set(ids))
