"""The pod's state machine, without sockets: dependency order, serving, frees, generations side by
side, lost peers."""

from __future__ import annotations

import pytest

from pod.statemachine.state import (
    BufferDoomed,
    BufferServable,
    Cancelled,
    DropGeneration,
    FetchAbandoned,
    FetchGivenUp,
    FreeWaits,
    GenerationChanged,
    InstructionFinished,
    PlanFinished,
    PlanSubmitted,
    PodState,
    Refused,
    StartInstruction,
    TileServed,
)
from schemas.instructions import Allocate, Compute, Fetch, Free, Load, NodePlan, Store
from schemas.program import Region

RA = Region("a", (0,), (8,))
RC = Region("c", (0,), (8,))
WRITES = {"main": ("c",)}


def add_plan(generation: int = 1, peers: tuple[int, ...] = ()) -> NodePlan:
    """c = a + b: a loaded here (and served to `peers`), b fetched from node 1."""
    return NodePlan(node=0, generation=generation, peak_bytes=96, instructions=(
        Allocate(0, (), 0, (8,)),
        Load(1, (0,), 0, 0, RA),
        Allocate(2, (), 1, (8,)),
        Fetch(3, (2,), 1, peer=1, peer_buffer=4),
        Allocate(4, (), 2, (8,)),
        Compute(5, (1, 3, 4), "main", (("a", 0), ("b", 1), ("c", 2)), unit=0),
        Store(6, (5,), 2, 1, RC, unit=0),
        Free(7, (5,), 0, peers=peers),
        Free(8, (5,), 1),
        Free(9, (6,), 2),
    ), uris=("file:///a.npy", "file:///c.npy"))


def started(actions) -> list[int]:
    return [a.instruction.id for a in actions if isinstance(a, StartInstruction)]


def servable(actions) -> list[int]:
    return [a.buffer for a in actions if isinstance(a, BufferServable)]


def finish(state: PodState, *ids: int, generation: int = 1) -> list:
    actions = []
    for i in ids:
        actions += state.handle(InstructionFinished(generation, i))
    return actions


def test_instructions_start_in_dependency_order():
    state = PodState("j")
    assert started(state.handle(PlanSubmitted(add_plan(), WRITES))) == [0, 2, 4]
    assert started(finish(state, 0)) == [1]
    assert started(finish(state, 2)) == [3]
    assert started(finish(state, 4, 1)) == []
    assert state.running() == [3]
    assert started(finish(state, 3)) == [5]
    assert sorted(started(finish(state, 5))) == [6, 7, 8]
    assert started(finish(state, 7, 8)) == []
    actions = finish(state, 6)
    assert started(actions) == [9]
    assert PlanFinished(1, True) in finish(state, 9)


def test_buffers_become_servable_when_their_producers_are_done():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(), WRITES))
    assert servable(finish(state, 0)) == []  # allocated but not loaded yet
    assert servable(finish(state, 1)) == [0]
    assert state.plans[1].servable(0)
    assert servable(finish(state, 2, 3)) == [1]  # a fetched buffer may be served on
    finish(state, 4)
    assert not state.plans[1].servable(2)  # the compute writing c has not run
    assert servable(finish(state, 5)) == [2]  # c is written by the leaf; a and b are only read


def test_unknown_leaf_writes_count_every_binding():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(), {}))
    finish(state, 0, 1, 2, 3, 4)
    assert state.plans[1].servable(0) is False  # the compute binds a: it might write it
    assert sorted(servable(finish(state, 5))) == [0, 1, 2]


def test_free_waits_for_peer_fetches():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(peers=(2, 3)), WRITES))
    actions = finish(state, 0, 1, 2, 3, 4, 5)
    assert 7 not in started(actions)
    assert started(state.handle(TileServed(1, buffer=0, node=2))) == []
    assert started(state.handle(TileServed(1, buffer=0, node=2))) == []  # the same peer twice
    assert started(state.handle(TileServed(1, buffer=0, node=3))) == [7]


def test_the_peers_still_to_fetch_a_buffer_are_the_ones_its_free_names():
    """What a GPU owner offers a servable buffer to (pod/rpc/offers.py): not a peer that released it
    already, nor one lost to the job."""
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(peers=(2, 3)), WRITES, frozenset({0, 1, 2, 3})))
    plan = state.plans[1]
    assert plan.fetchers(0) == (2, 3)
    assert plan.fetchers(1) == () and plan.fetchers(2) == ()  # no peer fetches these
    state.handle(TileServed(1, buffer=0, node=2))
    assert plan.fetchers(0) == (3,)
    state.handle(PlanSubmitted(NodePlan(0, 2, (), 0), WRITES, frozenset({0, 1, 2})))  # node 3 lost
    assert plan.fetchers(0) == ()


def test_serves_before_the_deps_are_done_still_count():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(peers=(2,)), WRITES))
    finish(state, 0, 1)
    state.handle(TileServed(1, buffer=0, node=2))  # peer fetched before our compute ran
    assert 7 in started(finish(state, 2, 3, 4, 5))


def test_failure_stops_the_plan_and_names_the_instruction():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(), WRITES))
    finish(state, 0, 1, 2, 3, 4)
    actions = state.handle(InstructionFinished(1, 5, ok=False, message="leaf raised"))
    message = "instruction 5 (compute leaf main, unit 0) failed: leaf raised"
    assert actions == [PlanFinished(1, False, message)]
    assert state.running() == []


def test_dropped_generations_are_refused():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(generation=1), WRITES))
    finish(state, 0, 1)
    actions = state.handle(GenerationChanged(2))
    assert actions == [DropGeneration(1, "generation 2 replaces it")]
    # late results of generation 1 are ignored
    assert state.handle(InstructionFinished(1, 2)) == []
    with pytest.raises(Refused, match="generation 1 was dropped"):
        state.handle(PlanSubmitted(add_plan(generation=1), WRITES))
    with pytest.raises(Refused, match="dropped"):
        state.check_generation(1)
    with pytest.raises(Refused, match="dropped"):
        state.handle(TileServed(1, 0, 1))
    assert started(state.handle(PlanSubmitted(add_plan(generation=2), WRITES))) == [0, 2, 4]
    with pytest.raises(Refused, match="already submitted"):
        state.handle(PlanSubmitted(add_plan(generation=2), WRITES))


def test_a_newer_submit_runs_beside_the_running_plan():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(generation=1), WRITES, frozenset({0, 1})))
    finish(state, 0, 2)
    actions = state.handle(PlanSubmitted(add_plan(generation=3), WRITES, frozenset({0, 1})))
    assert not any(isinstance(a, DropGeneration) for a in actions)
    assert started(actions) == [0, 2, 4]
    assert state.generation == 3 and sorted(state.plans) == [1, 3]
    # the first plan goes on: its fetch finishes and its compute starts
    assert state.running() == sorted([1, 3, 4] + [0, 2, 4])  # both plans (a scheduler numbers them apart)
    assert started(finish(state, 1, 3, 4)) == [5]


def test_a_lost_peer_abandons_fetches_from_it_and_frees_what_waited_for_it():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(peers=(2,)), WRITES, frozenset({0, 1, 2})))
    finish(state, 0, 1, 2, 4)  # fetch 3 from node 1 still running; node 2 owes a fetch of buffer 0
    actions = state.handle(PlanSubmitted(NodePlan(0, 2, (), 0), WRITES, frozenset({0})))
    abandoned = [a for a in actions if isinstance(a, FetchAbandoned)]
    assert [(a.generation, a.instruction.id) for a in abandoned] == [(1, 3)]
    assert "node 1 was lost" in abandoned[0].reason
    # compute 5 and store 6 are dropped; the Frees go ahead (7 no longer waits for node 2)
    assert sorted(started(actions)) == [7, 8, 9]
    assert state.plans[1].abandoned == {3, 5, 6}
    assert not state.is_running(1, 3)  # the fetch's late end will be discarded
    assert finish(state, 3) == []
    assert PlanFinished(2, True) in actions
    assert finish(state, 7, 8)[-1:] == [] and finish(state, 9) == [PlanFinished(1, True)]


def test_a_failed_fetch_abandons_its_dependents_and_the_plan_goes_on():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(), WRITES))
    finish(state, 0, 1, 2, 4)
    actions = state.handle(InstructionFinished(1, 3, ok=False, message="bad checksum"))
    assert not any(isinstance(a, PlanFinished) and not a.ok for a in actions)
    assert sorted(started(actions)) == [7, 8, 9]
    assert finish(state, 7, 8, 9)[-1] == PlanFinished(1, True)


def test_a_plan_arriving_after_a_loss_abandons_its_fetches_from_the_lost_peer():
    state = PodState("j")
    state.handle(PlanSubmitted(NodePlan(0, 1, (), 0), WRITES, frozenset({0, 1})))
    state.handle(PlanSubmitted(NodePlan(0, 3, (), 0), WRITES, frozenset({0})))
    actions = state.handle(PlanSubmitted(add_plan(generation=2), WRITES, frozenset({0, 1})))
    assert [a.instruction.id for a in actions if isinstance(a, FetchAbandoned)] == [3]
    assert 3 not in started(actions) and state.lost == {1}


def test_cancel_drops_everything_and_refuses_more():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(), WRITES))
    assert state.handle(Cancelled()) == [DropGeneration(1, "the job was cancelled")]
    with pytest.raises(Refused, match="cancelled"):
        state.check_generation(1)
    assert state.handle(InstructionFinished(1, 0)) == []


def test_empty_plan_finishes_at_once():
    state = PodState("j")
    actions = state.handle(PlanSubmitted(NodePlan(0, 1, (), 0)))
    assert actions == [PlanFinished(1, True)]


@pytest.mark.parametrize("instructions,reason", [
    ((Allocate(0, (), 0, (1,)), Allocate(0, (), 1, (1,))), "id 0 appears twice"),
    ((Allocate(0, (5,), 0, (1,)),), "unknown id 5"),
    ((Allocate(0, (1,), 0, (1,)), Free(1, (0,), 0)), "cycle"),
    ((Allocate(0, (), 0, (1,)), Allocate(1, (), 0, (1,))), "allocated twice"),
    ((Allocate(0, (), 0, (1,)), Free(1, (0,), 0), Free(2, (0,), 0)), "freed twice"),
    ((Load(0, (), 3, 0, RA),), "no Allocate"),
    ((Allocate(0, (), 0, (8,)), Load(1, (0,), 0, 1, RA)), "names tensor 1, but the plan states 1 URIs"),
])
def test_bad_plans_are_refused_with_the_reason(instructions, reason):
    state = PodState("j")
    with pytest.raises(Refused, match=reason):
        state.handle(PlanSubmitted(NodePlan(0, 1, instructions, 0, ("file:///a.npy",))))
    assert state.plans == {} and state.generation == 0  # nothing changed


def test_repeated_finish_reports_are_harmless():
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(), WRITES))
    assert started(finish(state, 0)) == [1]
    assert finish(state, 0) == []
    assert finish(state, 5) == []  # not running yet


def test_long_chain_is_linear():
    n = 20000
    instructions = [Allocate(0, (), 0, (1,))]
    for i in range(1, n):
        instructions.append(Compute(i, (i - 1,), "main", (("c", 0),), unit=i))
    state = PodState("j")
    state.handle(PlanSubmitted(NodePlan(0, 1, tuple(instructions), 4), WRITES))
    for i in range(n):
        state.handle(InstructionFinished(1, i))
    assert state.plans[1].finished


def test_a_buffer_an_abandoned_instruction_fills_is_doomed_and_its_free_waits_for_no_peer():
    """A merge whose own input was lost never fills its output: peers asking for it are refused
    at once, and its Free does not wait for their fetches."""
    plan = NodePlan(node=2, generation=1, peak_bytes=64, instructions=(
        Allocate(0, (), 0, (8,)),
        Fetch(1, (0,), 0, peer=3, peer_buffer=0),  # the partial of node 3
        Allocate(2, (), 1, (8,)),
        Compute(3, (1, 2), "main", (("a", 0), ("c", 1)), unit=0),  # the merge into buffer 1
        Free(4, (3,), 0),
        Free(5, (3,), 1, peers=(0,)),  # node 0 fetches the merged partial
    ), uris=())
    state = PodState("j")
    state.handle(PlanSubmitted(plan, {"main": ("c",)}, frozenset({0, 2, 3})))
    finish(state, 0, 2)
    assert state.doomed(1, 1) is None
    actions = state.handle(PlanSubmitted(NodePlan(2, 2, (), 0), {}, frozenset({0, 2})))
    assert BufferDoomed(1, 1) in actions and BufferDoomed(1, 0) in actions
    assert sorted(started(actions)) == [4, 5]  # neither Free waits: node 0 can never fetch buffer 1
    refusal = state.doomed(1, 1)
    assert refusal is not None and "will not be filled" in str(refusal)
    assert "will not be filled" in str(state.unservable(1, 1, 5.0))


def given_up(actions) -> list[int]:
    return [a.instruction.id for a in actions if isinstance(a, FetchGivenUp)]


def test_a_failed_fetch_is_given_up_to_its_owner_and_a_lost_owners_is_not():
    """The owner's Free waits for this node's fetch: a fetch that failed is given up (the shell
    tells the owner); one from a lost node is not (nobody waits there any more)."""
    state = PodState("j")
    state.handle(PlanSubmitted(add_plan(), WRITES, frozenset({0, 1})))
    finish(state, 0, 1, 2, 4)
    actions = state.handle(InstructionFinished(1, 3, ok=False, message="internal: no module named crc32c"))
    fetch = add_plan().instructions[3]
    assert [a for a in actions if isinstance(a, FetchGivenUp)] == [FetchGivenUp(1, fetch)]
    lost = PodState("j")
    lost.handle(PlanSubmitted(add_plan(), WRITES, frozenset({0, 1})))
    finish(lost, 0, 1, 2, 4)
    assert given_up(lost.handle(PlanSubmitted(NodePlan(0, 2, (), 0), WRITES, frozenset({0})))) == []


def test_a_fetch_dropped_with_what_it_fed_is_given_up_too():
    """A fetch that depends on an abandoned instruction never runs: its owner is told as well."""
    plan = NodePlan(node=0, generation=1, peak_bytes=64, instructions=(
        Allocate(0, (), 0, (8,)),
        Fetch(1, (0,), 0, peer=1, peer_buffer=0),
        Store(2, (1,), 0, 0, RC, unit=0),
        Allocate(3, (2,), 1, (8,)),  # the next unit's buffer waits for the store
        Fetch(4, (3,), 1, peer=2, peer_buffer=5),
        Free(5, (2,), 0),
        Free(6, (4,), 1),
    ), uris=("file:///c.npy",))
    state = PodState("j")
    state.handle(PlanSubmitted(plan, WRITES, frozenset({0, 1, 2})))
    finish(state, 0)
    actions = state.handle(InstructionFinished(1, 1, ok=False, message="bad checksum"))
    assert given_up(actions) == [1, 4]
    assert [(a.instruction.id, a.instruction.peer) for a in actions if isinstance(a, FetchGivenUp)] == [
        (1, 1), (4, 2)]


def test_a_give_up_before_the_plan_is_kept_for_it_and_its_free_waits_no_more():
    """The order of the GPU+CPU hang: the fetcher gave up before this owner had the plan."""
    state = PodState("j")
    assert state.handle(TileServed(1, buffer=0, node=2, gave_up=True)) == []
    with pytest.raises(Refused, match="no plan of generation 1"):
        state.handle(TileServed(1, buffer=0, node=3))  # a fetch's release needs the plan
    state.handle(PlanSubmitted(add_plan(peers=(2, 3)), WRITES))
    actions = finish(state, 0, 1, 2, 3, 4, 5)
    assert 7 not in started(actions)
    assert [(a.instruction.id, a.peers) for a in actions if isinstance(a, FreeWaits)] == [(7, (3,))]
    assert started(state.handle(TileServed(1, buffer=0, node=3))) == [7]


def test_give_ups_kept_for_a_dropped_generation_are_forgotten():
    state = PodState("j")
    state.handle(TileServed(1, buffer=0, node=2, gave_up=True))
    state.handle(TileServed(3, buffer=0, node=2, gave_up=True))
    state.handle(GenerationChanged(2))
    assert state.early_give_ups == {3: {(0, 2)}}
    state.handle(Cancelled())
    assert state.early_give_ups == {}
