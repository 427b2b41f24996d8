"""The scheduler's failure rules, tick by tick on its pure state machine (no processes): a failed
fetch blames the serving peer, a crash charges each running unit once, stores from a dead node
are not acknowledged while a live node's plan goes on beside the re-plan."""

from __future__ import annotations

import pytest

from scheduler.jobs.jobfile import read_job
from scheduler.jobs.prepare import prepare
from scheduler.planning.planner import NodeFigure, plan
from scheduler.running.cluster_state import Cancel, ClusterState, EventInfo, Failed, Submit, Succeeded
from schemas.instructions import Compute, Fetch, Load, Store, abandoned_by
from tests.faults.harness import matmul_inputs
from tests.job_files import make_job


@pytest.fixture(scope="module")
def matmul(tmp_path_factory):
    root = tmp_path_factory.mktemp("rules")
    matmul_inputs(root, 512, 512, 256)
    job = make_job(root, "matmul_plain", {"M": 512, "N": 512, "K": 256}, {"A": "A", "B": "B", "C": "C"})
    return prepare(read_job(job), job, [root], {"TILE_M": 128, "TILE_N": 128, "TILE_K": 128})


def make_state(prepared, nodes=4):
    def planner(figures, generation, units, first_id):
        return plan(prepared.program, figures, prepared.uris, generation, units, first_id)

    figures = {n: NodeFigure(n) for n in range(nodes)}
    return ClusterState(prepared.program, figures, planner, heartbeat_timeout=5.0)


def stores(node_plan):
    return [EventInfo(i.id, "store") for i in node_plan.instructions if isinstance(i, Store)]


def finish_every_plan(state, now):
    actions = []
    for generation, whole in sorted(state.plans.items()):
        for node in sorted(set(whole.node_plans) & state.live):
            actions += state.events(node, generation, stores(whole.node_plans[node]), now)
            actions += state.finished(node, generation, True, "", now)
    return actions


def test_a_failed_fetch_declares_the_serving_peer_dead_and_replans(matmul):
    state = make_state(matmul)
    state.start(0.0)
    fetcher, fetch = next((n, i) for n, p in sorted(state.plan.node_plans.items())
                          for i in p.instructions if isinstance(i, Fetch))
    assert state.events(fetcher, 1, [EventInfo(fetch.id, "fetch", ok=False, message="peer gone")], 1.0) == []
    for node in state.live:  # both keep heartbeating; the peer is blamed once the grace has passed
        state.heartbeat(node, 1, (), 1.2)
    assert state.tick(1.2) == [] and state.generation == 1
    actions = state.tick(1.0 + state.fetch_blame_grace)
    assert not any(isinstance(a, Failed) for a in actions)
    assert Cancel(fetch.peer) in actions and state.generation == 2
    assert fetch.peer not in state.live and "could not fetch from it: peer gone" in state.failures[0].reason
    # the re-plan loads again from storage what the dead peer held
    loads = [i for a in actions if isinstance(a, Submit) for i in a.plan.instructions if isinstance(i, Load)]
    assert loads
    # it moves the peer's units and the fetcher's units that needed the tile, nothing else
    first = state.plans[1]
    peers_units = {u for u, n in first.placement.items() if n == fetch.peer}
    mine = first.node_plans[fetcher].instructions
    dropped = abandoned_by(mine, [fetch.id])
    stranded = {i.unit for i in mine if isinstance(i, Compute) and i.id in dropped}
    assert stranded and {u for u, _, _ in state.replans[-1].moved} == peers_units | stranded
    assert finish_every_plan(state, 2.0)[-1:] == [Succeeded()]


def test_a_failure_that_is_not_a_fetch_still_fails_the_job(matmul):
    state = make_state(matmul)
    state.start(0.0)
    load = next(i for i in state.plan.node_plans[0].instructions if isinstance(i, Load))
    actions = state.events(0, 1, [EventInfo(load.id, "load", ok=False, message="disk on fire")], 1.0)
    assert isinstance(actions[-1], Failed) and "disk on fire" in actions[-1].reason


def test_a_crash_charges_each_running_unit_once(matmul):
    state = make_state(matmul)
    state.start(0.0)
    node_plan = state.plan.node_plans[1]
    unit = next(i.unit for i in node_plan.instructions if isinstance(i, Compute))
    running = [i.id for i in node_plan.instructions if isinstance(i, Compute) and i.unit == unit]
    assert len(running) > 1  # several of the unit's instructions at once
    state.heartbeat(1, 1, running, 0.5)
    state.disconnected(1, "connection lost", 0.6)
    assert state.crashes == {unit: 1}


def test_stores_from_a_dead_node_are_not_acknowledged_and_a_live_nodes_old_plan_goes_on(matmul):
    state = make_state(matmul)
    state.start(0.0)
    first = state.plan
    state.disconnected(3, "connection lost", 0.5)
    assert state.events(3, 1, stores(first.node_plans[3]), 0.6) == []  # the zombie's stores
    assert state.events(0, 1, stores(first.node_plans[0]), 0.6) == []  # node 0 keeps its plan
    assert state.stored == {u for u, n in first.placement.items() if n == 0}
    assert state.live == {0, 1, 2}
    # the dead node's units went elsewhere: a store of one under its first plan counts for nothing
    moved = {u for u, _, _ in state.replans[-1].moved}
    assert moved == {u for u, n in first.placement.items() if n == 3}
    assert all(state.placement[u][1] == 2 for u in moved)


def test_a_fetch_failure_reported_by_a_dying_node_does_not_condemn_the_peer(matmul):
    """A node being killed can see its own fetches break and report that just before its
    connection drops: only the dying node is declared dead (seen in the kill matrix)."""
    state = make_state(matmul)
    state.start(0.0)
    fetcher, fetch = next((n, i) for n, p in sorted(state.plan.node_plans.items())
                          for i in p.instructions if isinstance(i, Fetch))
    state.events(fetcher, 1, [EventInfo(fetch.id, "fetch", ok=False, message="Peer disconnected")], 1.0)
    state.disconnected(fetcher, "connection lost", 1.05)
    assert not any(isinstance(a, Failed) for a in state.tick(1.0 + 2 * state.fetch_blame_grace))
    assert [f.node for f in state.failures] == [fetcher] and fetch.peer in state.live


def test_fetch_failures_from_a_peer_already_dead_are_not_the_jobs_failure(matmul):
    state = make_state(matmul)
    state.start(0.0)
    fetcher, fetch = next((n, i) for n, p in sorted(state.plan.node_plans.items())
                          for i in p.instructions if isinstance(i, Fetch))
    state.live.discard(fetch.peer)  # declared dead a moment ago, in this same generation
    actions = state.events(fetcher, 1, [EventInfo(fetch.id, "fetch", ok=False, message="gone")], 1.0)
    assert not any(isinstance(a, Failed) for a in actions)


def test_a_plan_that_fails_for_its_own_reasons_fails_the_job_after_the_grace(matmul):
    state = make_state(matmul)
    state.start(0.0)
    node = sorted(state.live)[0]
    assert state.finished(node, 1, False, "instruction 3 (load) failed: disk on fire", 1.0) == []
    for n in state.live:
        state.heartbeat(n, 1, (), 1.0 + 2 * state.fetch_blame_grace)
    actions = state.tick(1.0 + 2 * state.fetch_blame_grace)
    reasons = [a.reason for a in actions if isinstance(a, Failed)]
    assert reasons == [f"node {node}: instruction 3 (load) failed: disk on fire"]
