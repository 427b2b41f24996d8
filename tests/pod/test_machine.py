"""The whole pod's decisions, driven by hand: the scheduler lease, the two-missed-heartbeats rule,
multipart plans checked once, fetch retries, and the stories it tells. No sockets, no clock."""

from __future__ import annotations

import pytest

from pod.statemachine import machine as m
from pod.statemachine import plan_check
from pod.statemachine import state as st
from schemas.capnp_io import JobProgram
from schemas.instructions import Allocate, Compute, Free, NodePlan, Store
from schemas.program import Leaf, Region
from schemas.remote_errors import FailureKind, Refused

TIMEOUT = 4.0  # --scheduler-timeout; a store writes within 3 s of a taken heartbeat
LEAF = Leaf(name="main", kernel="fill", source="", dims=(("N", 8),), tile_values=(), grid=(1,), threads=32,
            tensors=("c",), scalars=())  # the machine reads only the leaf's name and tensors
PROGRAM = JobProgram(kernel="k", leaves=(LEAF,), scalars=(), tensors=())
RC = Region("c", (0,), (8,))


def unit_plan(generation: int = 1) -> NodePlan:
    return NodePlan(node=0, generation=generation, peak_bytes=32, instructions=(
        Allocate(0, (), 0, (8,)),
        Compute(1, (0,), "main", (("c", 0),), unit=7),
        Store(2, (1,), 0, 0, RC, unit=7),
        Free(3, (2,), 0),
    ), uris=("file:///c.npy",))


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def started(actions) -> list[int]:
    jobs = [a.action for a in of(actions, m.OnJob)]
    return [a.instruction.id for a in jobs if isinstance(a, st.StartInstruction)]


def submit(machine: m.PodMachine, plan: NodePlan, job: str = "j", staged: bool = True) -> list:
    """A whole plan in one part, prepared at once: the shell's two steps without the I/O."""
    [prepare] = machine.handle(m.PlanPart(job, plan.generation, plan, PROGRAM, staged=staged))
    return machine.handle(m.PlanReady(job, prepare.checked, {"main": ("c",)}, PROGRAM))


def leased(keep_serving: bool = False) -> m.PodMachine:
    machine = m.PodMachine(TIMEOUT, keep_serving)
    assert machine.handle(m.Hello(node=2, now=0.0)) == [m.StartHeartbeats(1)]
    return machine


def test_a_store_writes_only_under_a_live_lease():
    machine = leased()
    assert machine.handle(m.StoreAsked("j", 1, 2, now=2.9)) == [m.StoreVerdict("j", 1, 2, None)]
    assert machine.handle(m.StoreAsked("j", 1, 5, now=3.1)) == []  # held: the lease ran out
    assert machine.handle(m.HeartbeatAnswered(1, sent=0.5, now=3.6)) == []  # renewed only to 3.5
    assert machine.handle(m.HeartbeatAnswered(1, sent=3.5, now=3.7)) == [m.StoreVerdict("j", 1, 5, None)]
    alone = m.PodMachine(TIMEOUT)  # no scheduler: nobody can re-plan its work, stores write
    assert alone.handle(m.StoreAsked("j", 1, 2, now=100.0)) == [m.StoreVerdict("j", 1, 2, None)]


def test_the_lease_says_until_when_a_store_granted_now_may_start_writing():
    machine = leased()
    assert machine.lease_until() == TIMEOUT * m.LEASE_SHARE  # the lease runs from the hello
    machine.handle(m.HeartbeatAnswered(1, sent=2.0, now=2.1))
    assert machine.lease_until() == 2.0 + TIMEOUT * m.LEASE_SHARE
    assert m.PodMachine(TIMEOUT).lease_until() == float("inf")  # alone: stores write freely
    machine.handle(m.Stop("the pod is exiting"))
    assert machine.lease_until() == float("-inf")


def test_declared_dead_refuses_held_stores_drops_every_job_and_exits():
    machine = leased()
    submit(machine, unit_plan())
    machine.handle(m.StoreAsked("j", 1, 2, now=3.5))
    actions = machine.handle(m.HeartbeatFailed(1, FailureKind.DECLARED_DEAD, "node 2 was declared dead", 4.0))
    [refusal] = of(actions, m.StoreVerdict)
    assert "declared this pod dead (node 2 was declared dead)" in refusal.refusal
    assert [a.action for a in of(actions, m.OnJob)] == [st.DropGeneration(1, "the job was cancelled")]
    assert of(actions, m.ForgetJob) == [m.ForgetJob("j")]
    assert actions[-1] == m.LeaveScheduler("the scheduler declared this pod dead", "node 2 was declared dead",
                                           exit=True)
    assert machine.jobs == {} and not machine.heartbeating(1)
    later = machine.handle(m.StoreAsked("j", 1, 9, now=4.1))
    assert later[0].refusal.startswith("the scheduler declared this pod dead")


def test_keep_serving_forgets_the_scheduler_and_waits_for_the_next():
    machine = leased(keep_serving=True)
    submit(machine, unit_plan())
    actions = machine.handle(m.SchedulerLost("connection reset"))
    assert actions[-1] == m.LeaveScheduler("scheduler connection dropped", "connection reset", exit=False)
    assert machine.link == m.ALONE and machine.jobs == {}
    assert machine.handle(m.StoreAsked("k", 1, 0, now=50.0)) == [m.StoreVerdict("k", 1, 0, None)]
    assert machine.handle(m.Hello(node=0, now=60.0)) == [m.StartHeartbeats(2)]


def test_the_scheduler_is_gone_after_the_second_unanswered_heartbeat_past_the_timeout():
    machine = leased()
    timeout = FailureKind.TIMEOUT
    # one heartbeat sent before a freeze times out the moment the process wakes: not yet gone
    assert machine.handle(m.HeartbeatFailed(1, timeout, "no answer", now=9.0)) == []
    assert machine.heartbeating(1)
    gone = machine.handle(m.HeartbeatFailed(1, timeout, "no answer", now=13.0))
    assert gone[-1] == m.LeaveScheduler("scheduler unreachable", "no answer", exit=True)
    # an answered heartbeat in between starts the count again
    machine = leased()
    machine.handle(m.HeartbeatFailed(1, timeout, "no answer", now=5.0))
    machine.handle(m.HeartbeatAnswered(1, sent=5.5, now=5.6))
    assert machine.handle(m.HeartbeatFailed(1, timeout, "no answer", now=10.0)) == []
    # two timeouts within the timeout of the last answer: still not gone
    machine = leased()
    machine.handle(m.HeartbeatFailed(1, timeout, "no answer", now=1.0))
    assert machine.handle(m.HeartbeatFailed(1, timeout, "no answer", now=2.0)) == []


def test_a_dropped_connection_ends_the_lease_at_once_and_old_sessions_are_ignored():
    machine = leased()
    machine.handle(m.Hello(node=2, now=1.0))  # a second scheduler: session 2
    assert machine.handle(m.HeartbeatFailed(1, FailureKind.DISCONNECTED, "gone", now=1.5)) == []
    assert machine.handle(m.HeartbeatAnswered(1, sent=1.4, now=1.5)) == []
    actions = machine.handle(m.HeartbeatFailed(2, FailureKind.DISCONNECTED, "disconnected: reset", now=1.6))
    assert actions[-1].why == "scheduler unreachable"
    assert machine.handle(m.Hello(node=2, now=2.0)) == []  # stopping: nothing more happens


def test_parts_of_a_plan_are_joined_and_checked_once(monkeypatch):
    machine = leased()
    plan = unit_plan()
    checks = []
    real = plan_check.validate_plan

    def counting(p):
        checks.append(p)
        return real(p)

    monkeypatch.setattr(plan_check, "validate_plan", counting)
    first = NodePlan(0, 1, plan.instructions[:2], 32)
    rest = NodePlan(0, 1, plan.instructions[2:], 32, plan.uris)
    assert machine.handle(m.PlanPart("j", 1, first, PROGRAM, more=True)) == []
    [prepare] = machine.handle(m.PlanPart("j", 1, rest, None, peers=("p",)))
    assert prepare.checked.plan.instructions == plan.instructions and prepare.peers == ("p",)
    actions = machine.handle(m.PlanReady("j", prepare.checked, {"main": ("c",)}, PROGRAM))
    assert started(actions) == [0] and len(checks) == 1  # validated once, not again at the start
    with pytest.raises(Refused, match="differs from 3") as refused:
        machine.handle(m.PlanPart("j", 3, unit_plan(2), PROGRAM))
    assert refused.value.kind is FailureKind.REFUSED


@pytest.mark.parametrize("plan,kind,reason", [
    (NodePlan(0, 1, (Allocate(0, (1,), 0, (1,)), Free(1, (0,), 0)), 0), FailureKind.BAD_PLAN, "cycle"),
    (NodePlan(0, 1, (Allocate(0, (), 0, (1,)), Compute(1, (0,), "other", (("c", 0),), 0)), 0),
     FailureKind.BAD_PLAN, "no leaf 'other'"),
    (NodePlan(0, 1, (Allocate(0, (), 0, (1,)), Compute(1, (0,), "main", (("z", 0),), 0)), 0),
     FailureKind.BAD_PLAN, "no tensor parameter 'z'"),
])
def test_bad_plans_are_refused_with_a_kind(plan, kind, reason):
    machine = leased()
    with pytest.raises(Refused, match=reason) as refused:
        machine.handle(m.PlanPart("j", 1, plan, PROGRAM))
    assert refused.value.kind is kind


def test_generations_run_side_by_side_and_a_cancelled_job_is_refused_as_stale():
    machine = leased()
    submit(machine, unit_plan(2))
    [prepare] = machine.handle(m.PlanPart("j", 1, unit_plan(1), PROGRAM))  # a re-plan's submits may cross
    assert prepare.checked.plan.generation == 1
    machine.handle(m.CancelJob("j"))
    with pytest.raises(Refused, match="cancelled") as refused:
        machine.handle(m.PlanPart("j", 3, unit_plan(3), PROGRAM))
    assert refused.value.kind is FailureKind.STALE_GENERATION


def test_a_fetch_asks_again_only_for_a_tile_not_ready_of_the_current_plan():
    machine = leased()
    submit(machine, unit_plan())
    again = m.FetchVerdict("j", 4, True)
    assert machine.handle(m.FetchFailed("j", 1, 4, 1, FailureKind.NOT_READY, "not ready")) == [again]
    for kind in (FailureKind.TIMEOUT, FailureKind.STALE_GENERATION, FailureKind.DISCONNECTED):
        assert machine.handle(m.FetchFailed("j", 1, 4, 1, kind, "x")) == [m.FetchVerdict("j", 4, False)]
    submit(machine, unit_plan(2))  # generation 1 runs on beside it
    assert machine.handle(m.FetchFailed("j", 1, 4, 1, FailureKind.NOT_READY, "x")) == [again]
    machine.handle(m.CancelJob("j"))
    assert machine.handle(m.FetchFailed("j", 1, 4, 1, FailureKind.NOT_READY, "x"))[0].again is False
    first = machine.story(("connection", 1))[0]
    assert first == "job j: fetch 4 from node 1: notReady, asking again (not ready)"


def test_stories_of_a_unit_a_tile_and_the_scheduler_connection():
    machine = leased()
    submit(machine, unit_plan())
    machine.handle(m.InstructionDone("j", 1, 0))
    machine.handle(m.InstructionDone("j", 1, 1))
    machine.handle(m.InstructionDone("j", 1, 2, ok=False, message="disk full"))
    assert machine.story(("unit", "j", 7)) == (
        "compute main (instruction 1) (generation 1) started",
        "compute main (instruction 1) (generation 1) done",
        "store (instruction 2) (generation 1) started",
        "store (instruction 2) (generation 1) failed: disk full",
    )
    assert machine.story(("tile", "j", 1, 0)) == ("filled: servable to peers",)
    actions = machine.handle(m.TileReleased("j", 1, 0, node=3, nbytes=32, at=5.0))
    assert actions[0] == m.ReportServed("j", 1, 0, 3, 32, 5.0)  # reported before what it sets off
    assert machine.story(("tile", "j", 1, 0))[-1] == "served to node 3"
    gave_up = machine.handle(m.TileReleased("j", 1, 0, node=4, at=6.0, gave_up=True))
    assert not [a for a in gave_up if isinstance(a, m.ReportServed)]  # nothing was served
    assert machine.story(("tile", "j", 1, 0))[-1] == "node 4 gave up fetching it"
    assert machine.story(("job", "j"))[-1].startswith("plan of generation 1 failed: instruction 2")
    machine.handle(m.SchedulerLost("reset"))
    assert machine.story(("connection", "scheduler")) == (
        "hello as node 2 (session 1)", "scheduler connection dropped: reset")


def test_the_transition_table_names_real_handlers():
    for (state, stimulus), (handler, effect) in m.LINK_TABLE.items():
        assert state in (m.ALONE, m.LEASED, m.STOPPING) and effect and stimulus in m.Stimulus.__args__
        assert callable(getattr(m.PodMachine, handler)), handler
    for stimulus, (handler, effect) in m.JOB_TABLE.items():
        assert effect and stimulus in m.Stimulus.__args__
        assert callable(getattr(m.PodMachine, handler)), handler
    handled = set(m.JOB_TABLE) | {stimulus for _, stimulus in m.LINK_TABLE}
    assert handled == set(m.Stimulus.__args__)  # every stimulus has a row
    stopping = m.PodMachine(TIMEOUT)
    stopping.handle(m.Stop("shutdown"))
    refused = m.StoreVerdict("j", 1, 0, "the pod is stopping")
    assert stopping.handle(m.StoreAsked("j", 1, 0, now=0.0)) == [refused]


# ---- stores wait for their job's staging copies ----------------------------------------------------


def test_a_plan_submitted_before_its_outputs_are_staged_runs_but_holds_its_stores():
    machine = leased()
    actions = submit(machine, unit_plan(), staged=False)
    assert started(actions) == [0]  # the plan starts at once: only its stores wait
    assert machine.handle(m.StoreAsked("j", 1, 2, now=1.0)) == []  # the lease is live: staging is not
    assert machine.handle(m.HeartbeatAnswered(1, sent=1.0, now=1.1)) == []  # a heartbeat does not free it
    assert machine.handle(m.StoreAsked("k", 1, 2, now=1.2)) == [m.StoreVerdict("k", 1, 2, None)]  # other jobs
    assert machine.handle(m.OutputsStaged("j", now=1.5)) == [m.StoreVerdict("j", 1, 2, None)]
    assert machine.handle(m.StoreAsked("j", 1, 5, now=1.6)) == [m.StoreVerdict("j", 1, 5, None)]
    assert machine.handle(m.OutputsStaged("j", now=1.7)) == []  # said twice: nothing more
    assert machine.story(("job", "j"))[1:] == (
        "its outputs are not staged yet: its stores will wait for them",
        "store 2 waits for the job's outputs to be staged",
        "outputs staged: 1 held stores go on")


def test_stores_freed_by_staging_still_wait_for_a_live_lease():
    machine = leased()
    submit(machine, unit_plan(), staged=False)
    machine.handle(m.StoreAsked("j", 1, 2, now=1.0))
    assert machine.handle(m.OutputsStaged("j", now=3.5)) == []  # the lease ran out at 3.0
    assert machine.handle(m.HeartbeatAnswered(1, sent=3.4, now=3.6)) == [m.StoreVerdict("j", 1, 2, None)]
    # a later submit of the job that says `staged` frees them too, to the lease (it has no clock)
    machine = leased()
    submit(machine, unit_plan(), staged=False)
    machine.handle(m.StoreAsked("j", 1, 2, now=1.0))
    [prepare] = machine.handle(m.PlanPart("j", 2, unit_plan(2), PROGRAM, staged=True))
    assert isinstance(prepare, m.Prepare) and machine.held == {("j", 1, 2)}
    assert machine.handle(m.HeartbeatAnswered(1, sent=1.5, now=1.6)) == [m.StoreVerdict("j", 1, 2, None)]


def test_the_word_that_outputs_are_staged_may_overtake_the_submit_it_follows():
    """pod/rpc/server.py reads a plan before the machine sees it, so a short outputsStaged call sent
    after the submit can reach the machine first: it is remembered."""
    machine = leased()
    assert machine.handle(m.OutputsStaged("j", now=0.5)) == []
    submit(machine, unit_plan(), staged=False)
    assert machine.handle(m.StoreAsked("j", 1, 2, now=1.0)) == [m.StoreVerdict("j", 1, 2, None)]


def test_stores_held_for_staging_are_refused_when_the_job_is_cancelled_or_the_pod_stops():
    machine = leased(keep_serving=True)
    submit(machine, unit_plan(), staged=False)
    submit(machine, unit_plan(), job="k", staged=False)
    machine.handle(m.StoreAsked("j", 1, 2, now=1.0))
    machine.handle(m.StoreAsked("k", 1, 2, now=1.0))
    refused = of(machine.handle(m.CancelJob("j")), m.StoreVerdict)  # a failed staging: the job is dropped
    assert refused == [m.StoreVerdict("j", 1, 2, "the job was cancelled")]
    assert machine.unstaged_stores == {("k", 1, 2)}
    left = of(machine.handle(m.SchedulerLost("reset")), m.StoreVerdict)
    assert left == [m.StoreVerdict("k", 1, 2, "the scheduler is gone")]
    assert not machine.unstaged and not machine.staged  # the next scheduler's jobs start afresh
    machine.handle(m.Hello(node=0, now=10.0))
    submit(machine, unit_plan(), job="next", staged=False)
    machine.handle(m.StoreAsked("next", 1, 2, now=10.5))
    assert of(machine.handle(m.Stop("shutdown")), m.StoreVerdict) == [
        m.StoreVerdict("next", 1, 2, "the pod is stopping")]
    assert machine.handle(m.OutputsStaged("next", now=11.0)) == []  # nothing writes once stopping
