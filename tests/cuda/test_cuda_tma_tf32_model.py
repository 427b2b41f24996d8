"""A model run of the TF32 TMA ring's hand-over (compiler/cuda/tma_tf32.py), without a GPU: the
generated consumer loop is read back as a list of events, and two consumer warpgroups and the
producer run it under random interleavings, the copies landing at random later times and each
warpgroup's newest wgmma group kept in flight until its next wait. (The pass, A rounded and B
turned, is one event here; test_cuda_tma_tf32.py checks the order inside it.) It checks that
nothing deadlocks, that no stage or K-major buffer is written while a group (of either
warpgroup) may still read it, and that every group reads its own k tile, rounded by both
warpgroups; four broken orders must fail it."""

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
    (r"make_uint4\(tf32_of\(v_\.x\)", "pass"),
    (r"bar\.sync 1, 256;", "bar"),
    (r"wg_commit_wait_one\(\);", "issue_and_wait_previous"),
    (r"mbar_arrive\(", "release_previous"),
]


def _loop_events(stages: int) -> list[str]:
    kernel = load_example("matmul_tf32.phk")
    point = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}
    b = binding.bind(kernel, {"M": 1024, "N": 1024, "K": 1024}, None, point)
    src = generate_source(kernel, b, schedule=Schedule(wgmma=True, stages=stages, tma=True)).source
    body = src[src.index("setmaxnreg.inc") : src.index("wg_wait_all();")]
    found = sorted((m.start(), ev) for pat, ev in EVENTS for m in re.finditer(pat, body))
    return [ev for _, ev in found]


class Hazard(Exception):
    pass


class Ring:
    """The shared state: raw stages, K-major buffers, mbarriers, groups in flight. Each
    warpgroup's newest wgmma group stays in flight until its next wait, the worst case."""

    def __init__(self, events: list[str], stages: int, producer_waits: bool):
        self.events, self.stages, self.producer_waits = events, stages, producer_waits
        self.stage = [None] * stages  # the k tile each raw stage holds
        self.rounded = [set() for _ in range(stages)]  # warpgroups that rounded their share
        self.kmajor = [(None, set()), (None, set())]  # (k tile, warpgroups that stored their share)
        self.landed, self.released = set(), {}  # tiles whose copies landed; tile -> releasers
        self.flight = {0: [], 1: []}  # k tiles of the groups in flight, per warpgroup
        self.pc, self.it, self.passed, self.waiting = [0, 0], [0, 0], [0, 0], [False, False]
        self.copies, self.issued = [], 0

    def may_copy(self, iters: int) -> bool:
        j = self.issued
        free = not self.producer_waits or j < self.stages or len(self.released.get(j - self.stages, ())) == 2
        return j < iters and free

    def land(self) -> None:
        j = self.copies.pop(0)
        s = j % self.stages
        if any(t % self.stages == s for f in self.flight.values() for t in f):
            raise Hazard(f"the copy of tile {j} overwrote stage {s} under a group")
        self.stage[s], self.rounded[s] = j, set()
        self.landed.add(j)

    def step(self, w: int) -> None:
        """Warpgroup w's next event, unless it must wait."""
        ev, i = self.events[self.pc[w]], self.it[w]
        s, b = i % self.stages, i % 2
        if ev == "wait_full" and i not in self.landed:
            return
        if ev == "bar":  # passes once the other warpgroup waits at the same barrier or is past it
            self.waiting[w] = True
            other = 1 - w
            if not (
                self.passed[other] > self.passed[w]
                or (self.waiting[other] and self.passed[other] == self.passed[w])
            ):
                return
            self.waiting[w] = False
            self.passed[w] += 1
        if ev == "pass":
            if self.stage[s] != i:
                raise Hazard(f"tile {i}: stage {s} holds tile {self.stage[s]}")
            if any(t % 2 == b and t != i for f in self.flight.values() for t in f):
                raise Hazard(f"tile {i}: K-major buffer {b} written under a group")
            self.rounded[s].add(w)
            tile, who = self.kmajor[b]
            self.kmajor[b] = (i, who | {w}) if tile == i else (i, {w})
        if ev == "issue_and_wait_previous":
            if self.stage[s] != i or self.rounded[s] != {0, 1} or self.kmajor[b] != (i, {0, 1}):
                raise Hazard(f"tile {i}: a group read operands that were not ready")
            self.flight[w][:] = [i]  # wgmma.wait_group 1: the older groups have finished
        if ev == "release_previous" and i > 0:
            self.released.setdefault(i - 1, set()).add(w)
        self.pc[w] += 1
        if self.pc[w] == len(self.events):
            self.pc[w], self.it[w] = 0, i + 1


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


@pytest.mark.parametrize("stages", [3, 5])
def test_the_generated_hand_over_holds_under_random_interleavings(stages):
    events = _loop_events(stages)
    assert events == ORDER
    for seed in range(300):
        assert _run(events, stages, 9, seed) is None, seed


ORDER = ["wait_full", "pass", "bar", "issue_and_wait_previous", "release_previous", "bar"]


@pytest.mark.parametrize(
    "broken,producer_waits",
    [
        (ORDER[:-1], True),  # no second barrier: a K-major buffer rewritten under the other's group
        (ORDER[:2] + ORDER[3:], True),  # no first barrier: a group reads the other's half-done pass
        (ORDER, False),  # the producer does not wait for `empty`
        (ORDER[:3] + [ORDER[4], ORDER[3], ORDER[5]], True),  # release before the wait for group i - 1
    ],
)
def test_broken_hand_overs_fail_the_model(broken, producer_waits):
    assert any(_run(broken, 3, 9, seed, producer_waits) for seed in range(300)), (
        "the model passes a broken order"
    )
