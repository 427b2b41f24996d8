"""The scheduler's state machine through its one entry point: `handle(stimulus)` and `story(key)`.

Every stimulus run.py feeds it, by hand, with a fake clock; no network.
"""

from __future__ import annotations

import inspect

from scheduler.running import cluster_messages as cm
from scheduler.running.cluster_state import ClusterState
from schemas.instructions import Store
from schemas.remote_errors import FailureKind
from tests.scheduler.programs import add_program
from tests.scheduler.test_cluster_state import make_state


def stores(node_plan) -> tuple[cm.EventInfo, ...]:
    return tuple(cm.EventInfo(i.id, "store") for i in node_plan.instructions if isinstance(i, Store))


def test_every_row_of_the_table_names_a_rule_taking_the_stimulus_fields():
    assert set(cm.TRANSITIONS) == set(cm.Stimulus.__args__)
    for stimulus, row in cm.TRANSITIONS.items():
        rule = getattr(ClusterState, row.rule)
        params = list(inspect.signature(rule).parameters)[1:]
        assert params == list(stimulus.__dataclass_fields__), (stimulus.__name__, params)
        assert row.effect


def test_a_job_through_handle_alone_and_the_stories_it_leaves():
    state = make_state(add_program(640, 64), n_nodes=2)
    submits = state.handle(cm.Started(0.0))
    assert [type(a) for a in submits] == [cm.Submit, cm.Submit]
    node0, node1 = state.plan.node_plans[0], state.plan.node_plans[1]
    assert state.handle(cm.Heartbeat(0, 1, (), 0.5)) == []
    assert state.handle(cm.Events(0, 1, stores(node0), 1.0)) == []
    assert state.handle(cm.Finished(0, 1, True, "", 1.0)) == []
    # node 1 drops its connection before storing anything: its units move to node 0
    actions = state.handle(cm.Disconnected(1, "connection lost", 1.5))
    assert actions[0] == cm.Cancel(1) and isinstance(actions[1], cm.Replanned)
    assert state.death_of(1) == "connection lost" and state.death_of(0) == ""
    unit = actions[1].moved[0][0]
    again = state.plan.node_plans[0]
    state.handle(cm.Events(0, 2, stores(again), 2.0))
    assert state.handle(cm.Finished(0, 2, True, "", 2.0)) == [cm.Succeeded()]
    assert state.story(("unit", unit)) == (
        "planned on node 1 (generation 1)",
        "planned on node 0 (generation 2)",
        "re-planned from node 1 to node 0: node 1 died (connection lost)",
        "stored by node 0 (generation 2)",
    )
    assert state.story(("node", 1)) == (f"plan of generation 1: {len(node1.instructions)} instructions",
                                        "declared dead: connection lost")
    assert state.story(("job",)) == ("succeeded",)
    assert state.handle(cm.Tick(10.0)) == []  # the job has ended: nothing more happens


def test_a_failed_submit_is_a_death_or_a_refusal_by_its_kind():
    for kind in (FailureKind.DISCONNECTED, FailureKind.TIMEOUT):
        state = make_state(add_program(640, 64), n_nodes=2)
        state.handle(cm.Started(0.0))
        actions = state.handle(cm.SubmitFailed(1, kind, "no answer", 0.1))
        assert actions[0] == cm.Cancel(1) and state.death_of(1) == "submit failed: no answer"
    state = make_state(add_program(640, 64), n_nodes=2)
    state.handle(cm.Started(0.0))
    refused = state.handle(cm.SubmitFailed(0, FailureKind.BAD_PLAN, "the dependencies form a cycle", 0.1))
    assert refused == [cm.Failed("node 0 refused its plan: the dependencies form a cycle")]
    assert state.story(("job",)) == ("failed: node 0 refused its plan: the dependencies form a cycle",)
    # a submit to a node already declared dead, answered late, changes nothing
    state = make_state(add_program(640, 64), n_nodes=2)
    state.handle(cm.Started(0.0))
    state.handle(cm.Disconnected(1, "gone", 0.2))
    assert state.handle(cm.SubmitFailed(1, FailureKind.BAD_PLAN, "x", 0.3)) == []


def test_silence_past_the_timeout_is_a_death_at_the_next_tick():
    state = make_state(add_program(640, 64), n_nodes=3, timeout=1.0)
    state.handle(cm.Started(0.0))
    for node in (0, 1):
        state.handle(cm.Heartbeat(node, 1, (), 1.5))
    actions = state.handle(cm.Tick(1.6))
    assert cm.Cancel(2) in actions and state.death_of(2) == "no heartbeat for 1 s"
