"""The scheduler's state machine, driven stimulus by stimulus with a fake clock."""

from __future__ import annotations

from common.errors import UserError
from scheduler.planning.planner import NodeFigure, plan
from scheduler.running.cluster_state import (
    Cancel,
    ClusterState,
    EventInfo,
    Failed,
    Replanned,
    Submit,
    Succeeded,
    describe_instructions,
)
from schemas.instructions import Compute, Fetch, Store, abandoned_by
from tests.scheduler.programs import add_program, matmul_program, uris_of


def make_state(program, n_nodes=3, timeout=5.0):
    uris = uris_of(program)

    def planner(figures, generation, units, first_id):
        return plan(program, figures, uris, generation, units, first_id)

    figures = {i: NodeFigure(i) for i in range(n_nodes)}
    return ClusterState(program, figures, planner, heartbeat_timeout=timeout)


def stores_of(node_plan, units=None):
    return [EventInfo(i.id, "store") for i in node_plan.instructions
            if isinstance(i, Store) and (units is None or i.unit in units)]


def compute_ids(node_plan, unit):
    return [i.id for i in node_plan.instructions if isinstance(i, Compute) and i.unit == unit]


def finish_all(state, now):
    """Every live node stores and finishes every plan it was given (oldest first)."""
    actions = []
    for generation, whole in sorted(state.plans.items()):
        for node, p in whole.node_plans.items():
            if node in state.live:
                actions += state.events(node, generation, stores_of(p), now)
                actions += state.finished(node, generation, True, "", now)
    return actions


def test_success_after_every_store_and_finish():
    state = make_state(add_program(640, 64))
    actions = state.start(0.0)
    assert [type(a) for a in actions] == [Submit] * 3
    assert all(a.plan.generation == 1 for a in actions)
    out = finish_all(state, 1.0)
    assert out == [Succeeded()]
    assert state.stored == set(range(10))


def test_not_done_until_every_node_finished():
    state = make_state(add_program(640, 64))
    state.start(0.0)
    for node, p in state.plan.node_plans.items():
        assert state.events(node, 1, stores_of(p), 0.5) == []
    assert state.finished(0, 1, True, "", 0.6) == []
    assert state.finished(1, 1, True, "", 0.6) == []
    assert state.finished(2, 1, True, "", 0.6) == [Succeeded()]


def test_missed_heartbeats_replan_the_dead_nodes_unstored_units_onto_the_rest():
    state = make_state(add_program(640, 64), timeout=5.0)
    state.start(0.0)
    first = state.plan
    # node 0 stores its first unit (0), node 1 everything; node 2 nothing yet.
    state.events(0, 1, stores_of(first.node_plans[0], {0}), 1.0)
    state.events(1, 1, stores_of(first.node_plans[1]), 1.0)
    for t in (2.0, 4.0, 5.9):
        state.heartbeat(0, 1, [], t)
        state.heartbeat(1, 1, [], t)
    actions = state.tick(6.0)  # node 2 silent since 0.0
    assert Cancel(2) in actions
    submits = [a for a in actions if isinstance(a, Submit)]
    assert {a.node for a in submits} == {0, 1} and state.generation == 2
    replanned = sorted(u for a in submits for i in a.plan.instructions if isinstance(i, Compute)
                       for u in [i.unit])
    assert replanned == [2, 5, 8]  # node 2's units only: node 0 keeps running 3 and 6
    assert state.failures[0].node == 2 and "heartbeat" in state.failures[0].reason
    assert state.replans[-1].moved == tuple((u, 2, state.plan.placement[u]) for u in (2, 5, 8))
    # late events from the dead node are ignored; the live node's first plan goes on
    assert state.events(2, 1, stores_of(first.node_plans[2]), 6.5) == []
    assert state.events(0, 1, stores_of(first.node_plans[0]), 6.5) == []
    assert state.stored == {0, 1, 3, 4, 6, 7, 9}
    assert finish_all(state, 7.0) == [Succeeded()]


def test_lost_connection_replans_at_once():
    state = make_state(matmul_program(64, 64, 32, 16, 16, 16), n_nodes=2)
    state.start(0.0)
    actions = state.disconnected(1, "connection lost", 0.1)
    assert Cancel(1) in actions and [a.node for a in actions if isinstance(a, Submit)] == [0]
    assert finish_all(state, 1.0) == [Succeeded()]


def test_no_node_left_fails_the_job():
    state = make_state(add_program(640, 64), n_nodes=1)
    state.start(0.0)
    actions = state.disconnected(0, "connection lost", 1.0)
    assert isinstance(actions[-1], Failed) and "no node left" in actions[-1].reason


def test_a_unit_that_kills_its_node_three_times_fails_the_job():
    program = add_program(64 * 8, 64)
    state = make_state(program, n_nodes=4)
    state.start(0.0)
    for attempt in range(3):
        node = state.plan.placement[5]
        p = state.plan.node_plans[node]
        state.heartbeat(node, state.generation, compute_ids(p, 5), 1.0 + attempt)
        actions = state.disconnected(node, "connection lost", 1.5 + attempt)
    failed = actions[-1]
    assert isinstance(failed, Failed)
    assert "unit 5" in failed.reason and "3 times" in failed.reason
    assert "compute" in failed.reason and "kernel add" in failed.reason and "leaf main" in failed.reason


def test_an_instruction_failure_fails_the_job_naming_it():
    state = make_state(add_program(640, 64))
    state.start(0.0)
    cid = compute_ids(state.plan.node_plans[1], 1)[0]
    actions = state.events(1, 1, [EventInfo(cid, "compute", ok=False, message="boom")], 1.0)
    assert isinstance(actions[0], Failed)
    reason = actions[0].reason
    assert f"compute {cid}" in reason and "boom" in reason and "node 1" in reason


def test_replan_that_does_not_fit_fails_clearly():
    program = add_program(64 * 8, 64)
    uris = uris_of(program)

    def planner(figures, generation, units, first_id):
        if generation > 1:
            raise UserError("node 0 needs 9 GiB of memory at its peak")
        return plan(program, figures, uris, generation, units, first_id)

    state = ClusterState(program, {0: NodeFigure(0), 1: NodeFigure(1)}, planner)
    state.start(0.0)
    actions = state.disconnected(1, "connection lost", 1.0)
    assert isinstance(actions[-1], Failed)
    assert "re-planning" in actions[-1].reason and "9 GiB" in actions[-1].reason


def test_describe_instructions_gives_every_instruction_a_unit():
    program = matmul_program(64, 64, 32, 16, 16, 16)
    p = plan(program, [NodeFigure(0), NodeFigure(1)], uris_of(program)).node_plans[1]
    info = describe_instructions(p)
    assert set(info) == {i.id for i in p.instructions}
    assert all(v.unit is not None for v in info.values())
    assert {v.unit for v in info.values()} == {u.index for u in program.units if u.index % 2 == 1}


def test_losing_a_node_after_everything_is_stored_needs_no_replan():
    state = make_state(add_program(640, 64))
    state.start(0.0)
    for node, p in state.plan.node_plans.items():
        state.events(node, 1, stores_of(p), 0.5)
    state.finished(0, 1, True, "", 0.6)
    state.finished(1, 1, True, "", 0.6)
    actions = state.disconnected(2, "connection lost", 0.7)
    assert actions == [Cancel(2), Succeeded()]
    assert state.generation == 1


# ---- charging a crash without a heartbeat (a unit that kills its node at once) ----


def first_compute(node_plan, unit):
    return next(i for i in node_plan.instructions if isinstance(i, Compute) and i.unit == unit)


def finished_events(node_plan, ids):
    kinds = {i.id: type(i).__name__.lower() for i in node_plan.instructions}
    return [EventInfo(i, kinds[i]) for i in ids]


def test_a_node_dying_right_after_its_loads_finished_charges_the_unit_whose_compute_was_ready():
    state = make_state(add_program(64 * 8, 64), n_nodes=4)
    state.start(0.0)
    node = state.plan.placement[5]
    p = state.plan.node_plans[node]
    compute = first_compute(p, 5)
    assert compute.deps  # its inputs are loaded first
    state.events(node, 1, finished_events(p, compute.deps), 0.2)
    state.disconnected(node, "connection lost", 0.3)  # no heartbeat ever named the compute
    assert state.crashes == {5: 1}


def test_a_unit_whose_inputs_were_still_loading_is_not_charged():
    state = make_state(add_program(64 * 8, 64), n_nodes=4)
    state.start(0.0)
    node = state.plan.placement[5]
    p = state.plan.node_plans[node]
    compute = first_compute(p, 5)
    state.events(node, 1, finished_events(p, compute.deps[:-1]), 0.2)  # one input still loading
    state.disconnected(node, "connection lost", 0.3)
    assert 5 not in state.crashes


def test_a_unit_that_kills_its_node_before_any_heartbeat_fails_the_job_after_three_deaths():
    state = make_state(add_program(64 * 8, 64), n_nodes=4)
    state.start(0.0)
    for attempt in range(3):
        node = state.plan.placement[5]
        p = state.plan.node_plans[node]
        state.events(node, state.generation, finished_events(p, first_compute(p, 5).deps), 1.0 + attempt)
        actions = state.disconnected(node, "connection lost", 1.1 + attempt)
    failed = actions[-1]
    assert isinstance(failed, Failed), actions
    assert "unit 5 killed its node 3 times" in failed.reason
    assert "compute" in failed.reason and "leaf main of kernel add" in failed.reason
    assert len(state.failures) == 3


def test_the_heartbeat_names_what_the_events_cannot_and_finished_work_is_not_charged():
    state = make_state(add_program(64 * 8, 64), n_nodes=2)
    state.start(0.0)
    p = state.plan.node_plans[1]
    units = sorted({i.unit for i in p.instructions if isinstance(i, Compute)})
    first, second = units[0], units[1]
    # the heartbeat saw both units' computes running (their loads' events were still in flight);
    # then the first unit's compute was reported finished: only the second one is charged.
    state.heartbeat(1, 1, [first_compute(p, first).id, first_compute(p, second).id], 0.5)
    state.events(1, 1, finished_events(p, [first_compute(p, first).id]), 0.6)
    state.disconnected(1, "connection lost", 0.7)
    assert state.crashes == {second: 1}


def test_units_charged_by_one_death_are_replanned_onto_distinct_nodes():
    """A poison leaf and an innocent unit computing beside it are both charged; re-planned onto
    one node again (round robin can deal them so), the next crash would charge both again and the
    job could fail naming the innocent one. Suspects go first, one per node."""
    state = make_state(add_program(64 * 32, 64), n_nodes=4)
    state.start(0.0)
    node = 1
    p = state.plan.node_plans[node]
    units = sorted({i.unit for i in p.instructions if isinstance(i, Compute)})
    # three nodes are left: in unit order the round robin deals the 1st and the 4th unit moved to
    # one node
    suspects = [units[0], units[3]]
    state.heartbeat(node, 1, [first_compute(p, u).id for u in suspects], 0.5)
    state.disconnected(node, "connection lost", 0.6)
    assert state.crashes == dict.fromkeys(suspects, 1)
    placed = [state.plan.placement[u] for u in suspects]
    assert len(set(placed)) == len(suspects), placed


def test_a_node_dying_while_it_only_loads_and_fetches_charges_nobody():
    state = make_state(add_program(64 * 8, 64), n_nodes=4)
    state.start(0.0)
    node = state.plan.placement[5]
    p = state.plan.node_plans[node]
    loading = [i.id for i in p.instructions if not isinstance(i, Compute)][:4]
    state.heartbeat(node, 1, loading, 0.2)  # the heartbeat saw only loads running
    state.disconnected(node, "connection lost", 0.3)
    assert state.crashes == {}


# ---- what a death re-plans (issue 16, point 12) ----


def test_a_death_replans_only_the_dead_nodes_units_and_what_needed_its_tiles():
    program = matmul_program(64, 64, 32, 16, 16, 16)
    state = make_state(program, n_nodes=4)
    state.start(0.0)
    first = state.plan
    dead_units = {u for u, n in first.placement.items() if n == 3}
    stored_before = {min(dead_units)}
    state.events(3, 1, stores_of(first.node_plans[3], stored_before), 0.5)  # its first unit is stored
    actions = state.disconnected(3, "connection lost", 1.0)
    replanned = [a for a in actions if isinstance(a, Replanned)]
    assert len(replanned) == 1 and "node 3 died" in replanned[0].cause
    assert {(u, src) for u, src, _ in replanned[0].moved} == {(u, 3) for u in dead_units - stored_before}
    submits = [a for a in actions if isinstance(a, Submit)]
    assert sorted(a.node for a in submits) == [0, 1, 2]  # every live node hears of the loss
    new_units = {i.unit for a in submits for i in a.plan.instructions if isinstance(i, Compute)}
    assert new_units == dead_units - stored_before
    ids = [i.id for a in submits for i in a.plan.instructions]
    assert min(ids) > max(i.id for p in first.node_plans.values() for i in p.instructions)

    # node 1 drops its fetches from node 3 that were not done: those units, and only those, move
    # (at the next tick, so every live node's report goes out in one re-plan)
    mine = first.node_plans[1].instructions
    lost = [i.id for i in mine if isinstance(i, Fetch) and i.peer == 3]
    assert lost, "node 1 should fetch a tile from node 3 in this plan"
    dropped = abandoned_by(mine, lost)
    stranded = {i.unit for i in mine if isinstance(i, Compute) and i.id in dropped}
    failed = [EventInfo(i, "fetch", ok=False, message="node 3 was lost to the job") for i in lost]
    assert state.events(1, 1, failed, 1.1) == []
    actions = state.tick(1.2)
    assert [(u, src) for u, src, _ in actions[0].moved] == [(u, 1) for u in sorted(stranded)]
    assert actions[0].generation == 3 and "node 1 dropped work" in actions[0].cause

    # everything left runs once more; the live nodes' other units were never re-planned
    assert finish_all(state, 2.0) == [Succeeded()]
    planned: dict[int, int] = {}
    for whole in state.plans.values():
        for u in whole.placement:
            planned[u] = planned.get(u, 0) + 1
    rerun = {u for u, n in planned.items() if n > 1}
    assert rerun == (dead_units - stored_before) | stranded
    assert len(rerun) < len(program.units) - len(stored_before)  # not every unstored unit


def test_a_replan_must_fit_beside_the_plans_still_running():
    program = add_program(64 * 8, 64)
    uris = uris_of(program)
    first = plan(program, [NodeFigure(0), NodeFigure(1)], uris)
    peak = max(p.peak_bytes for p in first.node_plans.values())

    def planner(figures, generation, units, first_id):
        return plan(program, figures, uris, generation, units, first_id)

    # room for one plan, not two: node 0's running plan leaves no room for node 1's units
    state = ClusterState(program, {0: NodeFigure(0, peak + peak // 2), 1: NodeFigure(1, peak + peak // 2)},
                         planner)
    state.start(0.0)
    actions = state.disconnected(1, "connection lost", 1.0)
    assert isinstance(actions[-1], Failed)
    assert "node 1 died" in actions[-1].reason and "memory" in actions[-1].reason
    # once node 0's first plan has finished, its whole memory is free again
    state = ClusterState(program, {0: NodeFigure(0, peak + peak // 2), 1: NodeFigure(1, peak + peak // 2)},
                         planner)
    state.start(0.0)
    state.events(0, 1, stores_of(state.plan.node_plans[0]), 0.5)
    state.finished(0, 1, True, "", 0.6)
    actions = state.disconnected(1, "connection lost", 1.0)
    assert not any(isinstance(a, Failed) for a in actions) and state.generation == 2
