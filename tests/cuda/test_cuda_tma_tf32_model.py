"""A model run of the TF32 TMA ring's hand-over (compiler/cuda/mainloops/tma_ws/tf32.py, the role swap)
without a GPU: the generated consumer loop is read back as a list of events, and two consumer
warpgroups and the producer run it under random interleavings, the copies landing at random
later times and every wgmma group staying in flight until a `wgmma.wait_group` forces it out
(the worst case). It checks that nothing deadlocks, that no copy overwrites a stage that a group
(of either warpgroup) may still read, that no fragment load writes registers that a group in
flight still reads (PTX leaves that undefined), and that every load and group reads its own k
tile; four broken orders must fail it."""

from __future__ import annotations

import random
import re

import pytest
from cuda_cases import load_example

from compiler.cuda.compiled import generate_source
from compiler.cuda.schedule import Schedule
from compiler.frontend import binding

EVENTS = [  # (pattern in the consumer loop, event)
    (r"mbar_wait\(bar_\w+ \+ 8 \* \(it_", "wait_full"),
    (r"wgmma\.wait_group\.sync\.aligned 3;", "retire3"),
    (r"frag_\w+\[\d\]\[0\] = ", "load"),  # the first of a k step's 4 fragment loads
    (r"wgmma\.mma_async", "issue"),
    (r"mbar_arrive\(", "release_previous"),
]


def _loop_events(stages: int) -> list[str]:
    kernel = load_example("matmul_tf32.phk")
    point = {"TILE_M": 256, "TILE_N": 128, "TILE_K": 32}
    b = binding.bind(kernel, {"M": 1024, "N": 1024, "K": 1024}, None, point)
    src = generate_source(kernel, b, schedule=Schedule(wgmma=True, stages=stages, tma=True)).source
    body = src[src.index("setmaxnreg.inc") : src.index("wg_wait_all();")]
    found = sorted((m.start(), ev) for pat, ev in EVENTS for m in re.finditer(pat, body))
    return [ev for _, ev in found]


class Hazard(Exception):
    pass


class Ring:
    """The shared state: stages, mbarriers, each warpgroup's groups in flight (k tile, k step)."""

    def __init__(self, events: list[str], stages: int, producer_waits: bool):
        self.events, self.stages, self.producer_waits = events, stages, producer_waits
        self.stage = [None] * stages  # the k tile each stage holds
        self.landed, self.released = set(), {}  # tiles whose copies landed; tile -> releasers
        self.flight = {0: [], 1: []}  # (k tile, k step) of the groups in flight, oldest first
        self.pc, self.it, self.step_no = [0, 0], [0, 0], [0, 0]
        self.copies, self.issued = [], 0

    def may_copy(self, iters: int) -> bool:
        j = self.issued
        free = not self.producer_waits or j < self.stages or len(self.released.get(j - self.stages, ())) == 2
        return j < iters and free

    def land(self) -> None:
        j = self.copies.pop(0)
        s = j % self.stages
        if any(t % self.stages == s for f in self.flight.values() for t, _ in f):
            raise Hazard(f"the copy of tile {j} overwrote stage {s} under a group")
        self.stage[s] = j
        self.landed.add(j)

    def step(self, w: int) -> None:
        """Warpgroup w's next event, unless it must wait."""
        ev, i = self.events[self.pc[w]], self.it[w]
        s, k = i % self.stages, self.step_no[w]
        if ev == "wait_full" and i not in self.landed:
            return
        if ev.startswith("retire"):  # wgmma.wait_group N: all but the N newest are done
            keep = int(ev[len("retire") :])
            self.flight[w][:] = self.flight[w][len(self.flight[w]) - keep :] if keep else []
        if ev == "load":
            if self.stage[s] != i:
                raise Hazard(f"tile {i}: fragments loaded from stage {s}, which holds {self.stage[s]}")
            if any(step == k for _, step in self.flight[w]):
                raise Hazard(f"tile {i}: fragment registers {k} written under a group")
        if ev == "issue":
            if self.stage[s] != i:
                raise Hazard(f"tile {i}: a group reads stage {s}, which holds {self.stage[s]}")
            self.flight[w].append((i, k))
            self.step_no[w] += 1
        if ev == "release_previous" and i > 0:
            self.released.setdefault(i - 1, set()).add(w)
        self.pc[w] += 1
        if self.pc[w] == len(self.events):
            self.pc[w], self.it[w], self.step_no[w] = 0, i + 1, 0


def _run(events: list[str], stages: int, iters: int, seed: int, producer_waits: bool = True) -> str | None:
    """None, or what went wrong under one random interleaving."""
    rng, ring = random.Random(seed), Ring(events, stages, producer_waits)
    try:
        for _ in range(100_000):
            if ring.it == [iters, iters]:
                return None
            moves = [w for w in (0, 1) if ring.it[w] < iters]
            moves += ["copy"] if ring.may_copy(iters) else []
            moves += ["land"] if ring.copies else []
            move = rng.choice(moves)
            if move == "copy":
                ring.copies.append(ring.issued)
                ring.issued += 1
            elif move == "land":
                ring.land()
            else:
                ring.step(move)
    except Hazard as e:
        return str(e)
    return "deadlock"


STEP = ["retire3", "load", "issue"]
ORDER = ["wait_full", *STEP * 4, "release_previous"]


@pytest.mark.parametrize("stages", [3, 4])
def test_the_generated_hand_over_holds_under_random_interleavings(stages):
    events = _loop_events(stages)
    assert events == ORDER
    for seed in range(300):
        assert _run(events, stages, 9, seed) is None, seed


@pytest.mark.parametrize(
    "broken,producer_waits",
    [
        ([ORDER[0], "retire4", *ORDER[2:]], True),  # room for 4 in flight: step 0's registers in use
        ([ORDER[0], *ORDER[2:]], True),  # no wait before step 0's loads
        (ORDER, False),  # the producer does not wait for `empty`
        ([ORDER[0], ORDER[-1], *ORDER[1:-1]], True),  # release before the last wait of the iteration
    ],
)
def test_broken_hand_overs_fail_the_model(broken, producer_waits):
    assert any(_run(broken, 3, 9, seed, producer_waits) for seed in range(300)), (
        "the model passes a broken order"
    )
