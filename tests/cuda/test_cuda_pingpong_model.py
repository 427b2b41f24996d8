"""A model run of the ping-pong handover (compiler/cuda/mainloops/pingpong/handover.py) with no GPU: the loop
body the generator emits is read back as a list of synchronisation events (mbarrier waits and arrivals, the
copies, the wgmma groups and their waits, the turns), and eight warps run it under many random interleavings,
with copies landing at random later times. Every run must finish (no deadlock), every wgmma group must read a
stage that holds its own iteration's data from all warps, no copy may be issued into a stage that a group
still reads, and the two warpgroups must issue their dots in turns."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest
from test_cuda_attention_codegen import PINGPONG, _attention_source

WARPS, ITERATIONS = 8, 7


def _loop_events(src: str) -> tuple[int, int, list[tuple]]:
    """(stages, copies ahead, events of one iteration): each event a tuple whose last field is
    the condition on the iteration `it` ("any", "first": it == 0, "kept": it >= 1, or ("fill", a):
    it + a < ITERATIONS)."""
    body = src[src.index("for (int u_j_") : src.rindex("turn_wait<2>();  // warpgroup 1's last pass")]
    stages = int(re.search(r"mbar_wait\(bar_\d+ \+ 8 \* \(it_\d+ % (\d+)\)", body).group(1))
    ahead = int(re.search(r"mbar_wait\(bar_\d+ \+ 8 \* \(\d+ \+ \(it_\d+ \+ (\d+)\)", body).group(1))
    events, cond, last = [], "any", None
    for line in (x.strip() for x in body.splitlines()):
        cond = branch_condition(cond, line)
        if line.startswith("if (ahead_"):
            cond = ("fill", ahead)
        new = []
        if "mbar_arrive(" in line and "- 2) %" in line:
            new.append(("release", -2))
        elif "cp_async_mbar_arrive(" in line:
            new.append(("filled", ahead))
        elif "mbar_wait(" in line:
            new.append(("wait_empty", ahead) if f"8 * ({stages} +" in line else ("wait_full", 0))
        elif "cp_async16(" in line and last != "copy":
            new.append(("copy", ahead))
        elif "turn_wait<2>(); else turn_wait<3>();" in line:
            new.append(("take",))
        elif "wgmma.mma_async" in line and last != "read":
            new.append(("read", -1 if cond == "kept" else 0))
        new += issue_events(line)
        for e in new:
            events.append((*e, cond))
            last = e[0]
        cond = next_condition(cond, new)
        if cond == ("fill", ahead) and any(e[0] == "filled" for e in new):
            cond = "any"
    return stages, ahead, events


def branch_condition(cond, line: str):
    """Entering the carried dot's branch (iterations after the first) or its else (the first)."""
    if line.startswith("if (kept_b_"):
        return "kept"
    if line == "} else {" and cond == "kept-done":  # (the causal mask's own else is not this)
        return "first"
    return cond


def issue_events(line: str) -> list[tuple]:
    """The group commit, the pass of the turn and the group wait that a line of the rotated loop
    holds, in their order on the line."""
    new = []
    if "wg_commit();" in line:
        new.append(("commit",))
    if "turn_pass<3>(); else turn_pass<2>();" in line:
        new.append(("pass",))
    if "wg_wait_one();" in line or "wg_wait_all();" in line:
        new.append(("wait_groups", 1 if "wait_one" in line else 0))
    return new


def next_condition(cond, new: list[tuple]):
    """The condition of the lines after one that emitted `new`: the carried dot's else branch is
    one line; its if branch ends at its wait for all but one group (then waits for its else)."""
    if cond == "first" and new:
        return "any"
    if cond == "kept" and ("wait_groups", 1) in new:
        return "kept-done"
    return cond


def _program(warp: int, stages: int, ahead: int, loop: list[tuple]) -> list[tuple]:
    """The warp's whole run: the prologue's fills, warpgroup 1's first pass, the iterations,
    warpgroup 0's last turn, the last carried P V, its wait."""
    prog = [e for p in range(ahead) for e in (("copy", p), ("filled", p))]
    prog += [("pass_first",)] if warp >= 4 else []
    for it in range(ITERATIONS):
        for *e, cond in loop:
            on = {"any": True, "first": it == 0, "kept": it >= 1}.get(cond) if isinstance(cond, str) else (
                it + cond[1] < ITERATIONS
            )
            if on:
                prog.append((e[0], it + e[1]) if len(e) > 1 and e[0] != "wait_groups" else tuple(e))
    prog += [("take_last",)] if warp < 4 else []
    return prog + [("read", ITERATIONS - 1), ("commit",), ("wait_groups", 0)]


@dataclasses.dataclass
class Mbar:
    count: int
    pending: int
    phases: int = 0

    def arrive(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.phases, self.pending = self.phases + 1, self.count


class Turns:
    """The turns' two named barriers (ids 2 and 3, WARPS arrivals a generation: the bar.sync of
    the warps taking a turn, the bar.arrive of the other warpgroup's pass) and the order they let
    the dots through: warpgroup 0 issues iteration it after warpgroup 1 issued it - 1, and 1
    after 0 issued it."""

    def __init__(self) -> None:
        self.named = {2: [0, set()], 3: [0, set()]}  # arrivals this generation, warps in bar.sync
        self.blocked = [None] * WARPS  # the named barrier a warp waits on
        self.waiting: set = set()  # (warp, pc) of the bar.syncs that have arrived
        self.issued = {0: [], 1: []}  # iterations whose S each warpgroup's warps issued, in order

    def arrive(self, b: int, warp: int | None = None) -> None:
        self.named[b][0] += 1
        if warp is not None:
            self.named[b][1].add(warp)
        assert self.named[b][0] <= WARPS, "more arrivals than the barrier's count"
        if self.named[b][0] == WARPS:
            for w in self.named[b][1]:
                self.blocked[w] = None
            self.named[b] = [0, set()]

    def take(self, w: int, kind: str, prog: list[tuple], pc: int) -> bool:
        """Warp w's bar.sync at prog[pc] ("take", or "take_last": warpgroup 0's last turn):
        arrive once, then False until the generation completes."""
        b = 2 + w // 4 if kind == "take" else 2
        if (w, pc) not in self.waiting:
            self.waiting.add((w, pc))
            self.blocked[w] = b
            self.arrive(b, w)
        if self.blocked[w] is not None:
            return False
        if kind == "take":
            it = next(e[1] for e in prog[pc:] if e[0] == "read")
            self.issued[w // 4].append(it)
            other = self.issued[1 - w // 4]
            need = it - 1 if w < 4 else it
            assert need < 0 or other.count(need) == 4, (w, it, other)
        return True

    def pass_turn(self, w: int, kind: str) -> None:
        """Warp w's bar.arrive ("pass" to the other warpgroup, or warpgroup 1's "pass_first")."""
        self.arrive(3 - w // 4 if kind == "pass" else 2)

    def check_all_issued(self, iterations: int) -> None:
        """Each warp of each warpgroup issued the dots of every iteration."""
        assert all(len(v) == 4 * iterations for v in self.issued.values()), self.issued


def _run(stages: int, ahead: int, loop: list[tuple], rng: random.Random) -> None:
    progs = [_program(w, stages, ahead, loop) for w in range(WARPS)]
    pc = [0] * WARPS
    full = [Mbar(WARPS, WARPS) for _ in range(stages)]  # 256 threads = 8 warps of arrivals
    empty = [Mbar(WARPS, WARPS) for _ in range(stages)]
    landed = [[None] * WARPS for _ in range(stages)]  # iteration each warp's copies wrote
    flight = [[] for _ in range(WARPS)]  # per warp: ("copy", it) and ("arrive", stage) in order
    groups = [[] for _ in range(WARPS)]  # per warp: committed groups, each a list of stage reads
    open_reads = [[] for _ in range(WARPS)]
    turns = Turns()

    def reads() -> set:
        return {s for w in range(WARPS) for g in groups[w] for s in g} | {
            s for w in range(WARPS) for s in open_reads[w]
        }

    def step(w: int) -> bool:
        op = progs[w][pc[w]]
        kind = op[0]
        if kind == "wait_full":
            m = full[op[1] % stages]
            if m.phases & 1 == (op[1] // stages) & 1:
                return False
        elif kind == "wait_empty":
            m = empty[op[1] % stages]
            if op[1] >= stages and m.phases & 1 == ((op[1] // stages) + 1) & 1:
                return False
        elif kind == "copy":
            busy = {s % stages for s in reads()}
            assert op[1] % stages not in busy, f"stage {op[1] % stages} refilled while read"
            flight[w].append(("copy", op[1]))
        elif kind == "filled":
            flight[w].append(("arrive", op[1] % stages))
        elif kind == "release":
            if op[1] >= 0:
                empty[op[1] % stages].arrive()
        elif kind == "read":
            stage = op[1] % stages
            assert all(x == op[1] for x in landed[stage]), (w, op, landed[stage])
            open_reads[w].append(op[1])
        elif kind == "commit":
            groups[w].append(open_reads[w])
            open_reads[w] = []
        elif kind == "wait_groups":
            groups[w] = groups[w][len(groups[w]) - op[1] :] if op[1] else []
        elif kind in ("take", "take_last"):
            if not turns.take(w, kind, progs[w], pc[w]):
                return False
        elif kind in ("pass", "pass_first"):
            turns.pass_turn(w, kind)
        pc[w] += 1
        return True

    def land(w: int) -> None:
        what, x = flight[w].pop(0)
        if what == "copy":
            landed[x % stages][w] = x
        else:
            full[x].arrive()

    rate = rng.choice((0.02, 0.2, 1.0))  # how readily copies land: slow memory to instant
    while any(pc[w] < len(progs[w]) for w in range(WARPS)):
        moves = [("warp", w) for w in range(WARPS) if pc[w] < len(progs[w])]
        moves += [("land", w) for w in range(WARPS) if flight[w] and rng.random() < rate]
        rng.shuffle(moves)
        if any(land(w) or True if kind == "land" else step(w) for kind, w in moves):
            continue
        late = [w for w in range(WARPS) if flight[w]]  # every warp waits: some copy lands
        if not late:
            at = [progs[w][pc[w]] if pc[w] < len(progs[w]) else "done" for w in range(WARPS)]
            raise AssertionError(f"deadlock at {at}")
        land(rng.choice(late))
    turns.check_all_issued(ITERATIONS)


@pytest.mark.parametrize("stages,late", [(5, False), (5, True), (6, False), (6, True)])
def test_pingpong_handover_runs_under_any_interleaving(stages, late):
    schedule = dataclasses.replace(PINGPONG, stages=stages, late_copies=late)
    for name in ("mha_bf16.phk", "causal_mha_bf16.phk"):
        found_stages, ahead, loop = _loop_events(_attention_source(name, schedule, {"BR": 128, "BC": 32}))
        assert (found_stages, ahead) == (stages, stages - 3)
        kinds = [e[0] for e in loop]
        assert kinds.count("read") == 2 and kinds.count("take") == 1 and kinds.count("pass") == 2
        for seed in range(60):
            _run(stages, ahead, loop, random.Random(seed))


BROKEN = {
    "a refill that does not wait for its stage's release": lambda e: None if e[0] == "wait_empty" else e,
    "a stage read before it is full": lambda e: None if e[0] == "wait_full" else e,
    "dots issued without a turn": lambda e: None if e[0] == "take" else e,
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_the_model_catches_a_broken_handover(broken):
    """The model is not vacuous: each of these breaks fails some interleaving (a stage
    refilled under a read, a read of another iteration's data, or dots out of turn). (Releasing
    a stage an iteration early is not among them: the turns keep the warpgroups within about an
    iteration of each other, and the refill is three iterations behind.)"""
    schedule = dataclasses.replace(PINGPONG, late_copies=False)
    stages, ahead, loop = _loop_events(_attention_source("mha_bf16.phk", schedule, {"BR": 128, "BC": 32}))
    events = [x for x in map(BROKEN[broken], loop) if x is not None]
    failures = 0
    for seed in range(60):
        try:
            _run(stages, ahead, events, random.Random(seed))
        except AssertionError:
            failures += 1
    assert failures > 0
