"""A model run of attention fed by bulk tensor copies (mainloops/tma_ws/ring.py on a rotated loop of two dots,
with and without ping-pong turns) with no GPU: the producer's loop and the consumers' loop that the generator
emits are read back as synchronisation events, and the producer thread and eight consumer warps run them under
many random interleavings, each box of a copy landing at a random later time. full[s] completes once the
producer's arrival has announced the stage's bytes and every box has landed; empty[s] once each consumer warp
has released the stage. Every run must finish (no deadlock); every wgmma group must read K of its own
iteration, and the carried P V V of the previous one, from every box; no box may land in a stage that an
unfinished group reads; with ping-pong the two warpgroups must issue their dots in turns."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
from cuda_cases import load_example
from test_cuda_pingpong_model import Mbar, Turns, branch_condition, issue_events, next_condition

from compiler.cuda.compiled import compile_kernel
from compiler.cuda.schedule import Schedule
from compiler.frontend import binding

WARPS, ITERATIONS = 8, 7
TMA = Schedule(wgmma=True, stages=4, rotate=True, tma=True)


def _producer_events(src: str) -> tuple[int, list[tuple]]:
    """(stages, the producer's events per iteration j): wait_empty, expect, a box per copy
    (the operand it belongs to: K is the first ring, V the second)."""
    body = src[src.index("if (th_id == 256)") : src.index("return;")]
    stages = int(re.search(r"const int s_ = j_ % (\d+);", body).group(1))
    rings = []
    events = []
    for line in (x.strip() for x in body.splitlines()):
        if line.startswith("if (j_ >=") and "mbar_wait(" in line:
            events.append(("wait_empty",))
        elif "mbar_expect_bytes(" in line:
            events.append(("expect",))
        elif line.startswith("tma_load_"):
            ring = line[line.index("(") + 1 : line.index(" ")]
            rings += [ring] if ring not in rings else []
            events.append(("box", "KV"[rings.index(ring)]))
    return stages, events


def _consumer_events(src: str) -> list[tuple]:
    """The consumers' loop as events, each with its condition on iteration it ("any", "kept":
    it >= 1, "first": it == 0)."""
    loop = src[src.index("for (int u_j_") :]
    end = loop.index("turn_wait<2>();  // warpgroup 1's last pass") if "last pass" in loop else None
    body = loop[:end] if end else loop[: loop.index("if (kept_b_", loop.index("mbar_arrive("))]
    events, cond, last = [], "any", None
    for line in (x.strip() for x in body.splitlines()):
        cond = branch_condition(cond, line)
        new = []
        if "mbar_arrive(" in line and "- 1) %" in line:
            new.append(("release", -1))
        elif "mbar_wait(" in line:
            new.append(("wait_full", 0))
        elif "turn_wait<2>(); else turn_wait<3>();" in line:
            new.append(("take",))
        elif "wgmma.mma_async" in line and last != "read":
            new.append(("read", -1 if cond == "kept" else 0, "V" if cond == "kept" else "K"))
        new += issue_events(line)
        for e in new:
            events.append((*e, cond))
            last = e[0]
        cond = next_condition(cond, new)
    return events


def _consumer_program(warp: int, loop: list[tuple], turns: bool) -> list[tuple]:
    prog = [("pass_first",)] if turns and warp >= 4 else []
    for it in range(ITERATIONS):
        for *e, cond in loop:
            if {"any": True, "kept-done": True, "first": it == 0, "kept": it >= 1}[cond]:
                if e[0] in ("read", "release", "wait_full"):
                    prog.append((e[0], it + e[1], *e[2:]))
                else:
                    prog.append(tuple(e))
    prog += [("take_last",)] if turns and warp < 4 else []
    return prog + [("read", ITERATIONS - 1, "V"), ("commit",), ("wait_groups", 0)]


def _producer_program(events: list[tuple]) -> list[tuple]:
    return [(e[0], j, *e[1:]) for j in range(ITERATIONS) for e in events]


@dataclasses.dataclass
class _Full:
    """full[s]: one arrival (the producer's, announcing the bytes) and every box landed."""

    boxes: int
    arrived: bool = False
    landed: int = 0
    phases: int = 0

    def update(self) -> None:
        if self.arrived and self.landed == self.boxes:
            self.phases, self.arrived, self.landed = self.phases + 1, False, 0


class _Machine:
    def __init__(self, stages: int, producer: list[tuple], loop: list[tuple], turns: bool):
        self.stages = stages
        boxes = sum(e[0] == "box" for e in producer) // ITERATIONS
        self.full = [_Full(boxes) for _ in range(stages)]
        self.empty = [Mbar(WARPS, WARPS) for _ in range(stages)]  # each consumer warp releases
        self.data = [{} for _ in range(stages)]  # stage -> {(operand, box number): iteration}
        self.progs = [_consumer_program(w, loop, turns) for w in range(WARPS)] + [producer]
        self.pc = [0] * (WARPS + 1)
        self.flight = []  # boxes issued, not landed: (stage, key, iteration)
        self.groups = [[] for _ in range(WARPS)]  # committed groups: the stages they read
        self.open = [[] for _ in range(WARPS)]
        self.turns = Turns()
        self.box_no = 0

    def reading(self) -> set:
        return {s for w in range(WARPS) for g in [*self.groups[w], self.open[w]] for s in g}

    def producer_step(self, op: tuple) -> bool:
        kind, j = op[0], op[1]
        s = j % self.stages
        if kind == "wait_empty":
            return j < self.stages or self.empty[s].phases & 1 != ((j // self.stages) + 1) & 1
        if kind == "expect":
            self.full[s].arrived = True
            self.full[s].update()
            self.box_no = 0
        else:
            self.flight.append((s, (op[2], self.box_no), j))
            self.box_no += 1
        return True

    def consumer_step(self, w: int, op: tuple) -> bool:
        kind = op[0]
        if kind == "wait_full":
            it = op[1]
            return self.full[it % self.stages].phases & 1 != (it // self.stages) & 1
        if kind == "read":
            it, operand = op[1], op[2]
            held = {i for (o, _), i in self.data[it % self.stages].items() if o == operand}
            assert held == {it}, f"warp {w} reads {operand} of iteration {it}, the stage holds {held}"
            self.open[w].append(it % self.stages)
        elif kind == "commit":
            self.groups[w].append(self.open[w])
            self.open[w] = []
        elif kind == "wait_groups":
            self.groups[w] = self.groups[w][len(self.groups[w]) - op[1] :] if op[1] else []
        elif kind == "release":
            if op[1] >= 0:
                self.empty[op[1] % self.stages].arrive()
        elif kind in ("take", "take_last"):
            return self.turns.take(w, kind, self.progs[w], self.pc[w])
        elif kind in ("pass", "pass_first"):
            self.turns.pass_turn(w, kind)
        return True

    def step(self, who: int) -> bool:
        op = self.progs[who][self.pc[who]]
        done = self.producer_step(op) if who == WARPS else self.consumer_step(who, op)
        self.pc[who] += done
        return done

    def land(self, i: int) -> None:
        s, key, j = self.flight.pop(i)
        assert s not in self.reading(), f"a box of iteration {j} lands in stage {s} while a group reads it"
        self.data[s][key] = j
        self.full[s].landed += 1
        self.full[s].update()


def _run(stages: int, producer: list[tuple], loop: list[tuple], turns: bool, rng: random.Random) -> None:
    m = _Machine(stages, _producer_program(producer), loop, turns)
    rate = rng.choice((0.05, 0.3, 1.0))  # how readily boxes land: slow memory to instant
    while any(m.pc[w] < len(m.progs[w]) for w in range(WARPS + 1)):
        moves = [("step", w) for w in range(WARPS + 1) if m.pc[w] < len(m.progs[w])]
        moves += [("land", i) for i in range(len(m.flight)) if rng.random() < rate]
        rng.shuffle(moves)
        moved = False
        for kind, w in moves:
            if kind == "step" and m.step(w):
                moved = True
                break
            if kind == "land":
                m.land(w)
                moved = True
                break
        if moved:
            continue
        if not m.flight:
            at = [m.progs[w][m.pc[w]] if m.pc[w] < len(m.progs[w]) else "done" for w in range(WARPS + 1)]
            raise AssertionError(f"deadlock at {at}")
        m.land(rng.randrange(len(m.flight)))
    if turns:
        m.turns.check_all_issued(ITERATIONS)


def _events(name: str, schedule: Schedule, d: int = 128):
    kernel = load_example(name)
    b = binding.bind(kernel, {"H": 2, "N": 1000, "D": d}, None, {"BR": 128, "BC": 64})
    src = compile_kernel(kernel, b, schedule=schedule).cuda_source
    stages, producer = _producer_events(src)
    return stages, producer, _consumer_events(src)


@pytest.mark.parametrize("stages,turns", [(3, False), (3, True), (4, False), (4, True)])
def test_tma_attention_handover_runs_under_any_interleaving(stages, turns):
    schedule = dataclasses.replace(TMA, stages=stages, pingpong=turns)
    for name in ("mha_bf16.phk", "causal_mha_bf16.phk"):
        for d in (64, 128):
            found, producer, loop = _events(name, schedule, d)
            assert found == stages
            kinds = [e[0] for e in loop]
            assert kinds.count("read") == 2 and kinds.count("release") == 1
            assert kinds.count("take") == (1 if turns else 0) and kinds.count("pass") == (2 if turns else 0)
            boxes = [e[1] for e in producer if e[0] == "box"]
            assert boxes == ["K"] * (d // 64) + ["V"] * (d // 64), boxes  # 64-wide boxes
            for seed in range(40):
                _run(stages, producer, loop, turns, random.Random(seed))


def _release_now(e: tuple) -> tuple:
    return ("release", 0, e[-1]) if e[0] == "release" else e


BROKEN = {
    "a refill that does not wait for its stage's release": (
        "producer",
        lambda e: None if e[0] == "wait_empty" else e,
    ),
    "a stage read before it is full": ("consumer", lambda e: None if e[0] == "wait_full" else e),
    "the stage released while its V is still to be read": ("consumer", _release_now),
    "dots issued without a turn": ("consumer", lambda e: None if e[0] == "take" else e),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_model_catches_a_broken_tma_handover(broken):
    """The model is not vacuous: each break fails some interleaving."""
    side, change = BROKEN[broken]
    stages, producer, loop = _events("mha_bf16.phk", dataclasses.replace(TMA, pingpong=True))
    if side == "producer":
        producer = [x for x in map(change, producer) if x is not None]
    else:
        loop = [x for x in map(change, loop) if x is not None]
    failures = 0
    for seed in range(60):
        try:
            _run(stages, producer, loop, True, random.Random(seed))
        except AssertionError:
            failures += 1
    assert failures > 0
