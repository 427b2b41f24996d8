"""Test-only fault injection: the environment variable PHOBOS_FAULT makes this pod SIGKILL (or
SIGSTOP) itself at a chosen point, so fault tests reproduce exactly (tests/faults, tools/soak_faults.py).

Grammar: rules separated by commas, each one of
    kill-at=KIND:N   SIGKILL this process when it starts its N-th instruction of KIND
    stop-at=KIND:N   SIGSTOP this process instead (a paused "zombie"; SIGCONT wakes it)
    kill-unit=U[:S]  whenever this process starts a compute of unit U, the compute runs S seconds
                     (default 0.5) and then SIGKILLs the process: a leaf that crashes its pod
                     every time, after running long enough to appear in a heartbeat
    slow-at=KIND:N:S the N-th instruction of KIND waits S seconds before it runs, the pod staying
                     responsive meanwhile: a healthy node slow to produce a tile its peers fetch
    hold-at=KIND:N:PATH  the same, until the file PATH exists: a test releases it on an event it
                     observed (no guess at how long the rest of the cluster takes)
    kill-at-generation=G:KIND  SIGKILL this process when it starts its first instruction of KIND
                     in a plan of generation G or later: a cascade whose n-th death comes with the
                     n-th plan, however fast the survivors are
KIND is allocate, load, fetch, compute, store, free, or serve (a tile served to peers: a header
one asks for, or an offer the owner sends to the peers that will fetch the tile, pod/rpc/offers.py).
Counts are per process, from 1. Unset (the normal case): `hit` only looks up an empty tuple.

The signals are real: the process dies (or stops) exactly as it would from `kill -9`, with no
cleanup, no last message to the scheduler and its sockets closed by the kernel.
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass

from common import options
from common.errors import UserError

ENV = options.FAULT
KINDS = ("allocate", "load", "fetch", "compute", "store", "free", "serve")


@dataclass(frozen=True)
class Rule:
    action: str  # "kill", "stop" or "slow"
    kind: str
    nth: int | None = None  # the n-th instruction of `kind`
    unit: int | None = None  # or: every compute of this unit
    delay: float = 0.0  # seconds the instruction waits first (then the kill, for kill-unit)
    until: str = ""  # hold-at: the file whose appearance releases the instruction
    generation: int | None = None  # kill-at-generation: the first plan generation it applies to


@dataclass(frozen=True)
class Delay:
    """What `hit` asks of the instruction's runner: wait `seconds`, then die if `then_kill`."""

    seconds: float
    then_kill: bool
    until: str = ""  # wait for this file instead of `seconds`

    async def wait(self) -> None:
        if not self.until:
            await asyncio.sleep(self.seconds)
            return
        while not os.path.exists(self.until):
            await asyncio.sleep(0.02)


def parse(text: str) -> tuple[Rule, ...]:
    rules = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, value = item.partition("=")
        try:
            if name in ("kill-at", "stop-at"):
                kind, _, nth = value.partition(":")
                if kind not in KINDS or int(nth) < 1:
                    raise ValueError
                rules.append(Rule(name.split("-")[0], kind, nth=int(nth)))
            elif name == "kill-unit":
                unit, _, delay = value.partition(":")
                rules.append(Rule("kill", "compute", unit=int(unit), delay=float(delay or 0.5)))
            elif name == "hold-at":
                kind, nth, path = value.split(":", 2)
                if kind not in KINDS or int(nth) < 1 or not path:
                    raise ValueError
                rules.append(Rule("slow", kind, nth=int(nth), until=path))
            elif name == "kill-at-generation":
                generation, _, kind = value.partition(":")
                if kind not in KINDS or int(generation) < 1:
                    raise ValueError
                rules.append(Rule("kill", kind, generation=int(generation)))
            elif name == "slow-at":
                kind, nth, seconds = value.split(":")
                if kind not in KINDS or int(nth) < 1 or float(seconds) < 0:
                    raise ValueError
                rules.append(Rule("slow", kind, nth=int(nth), delay=float(seconds)))
            else:
                raise ValueError
        except ValueError:
            raise UserError(f"{ENV}={text!r}: cannot read {item!r} (expected kill-at=KIND:N, stop-at=KIND:N, "
                            f"kill-unit=U[:S], slow-at=KIND:N:S, hold-at=KIND:N:PATH or "
                            f"kill-at-generation=G:KIND; KIND one of {', '.join(KINDS)})") from None
    return tuple(rules)


class Faults:
    def __init__(self, rules: tuple[Rule, ...]):
        self.rules = rules
        self.counts: dict[str, int] = {}

    @classmethod
    def from_env(cls) -> Faults:
        return cls(parse(options.current().fault))

    def hit(self, kind: str, unit: int | None = None, generation: int = 0) -> Delay | None:
        """Called as an instruction of `kind` starts; signals this process when a rule matches at
        once, or returns how long the caller must wait first and whether to `die` after
        (kill-unit, slow-at)."""
        if not self.rules:
            return None
        count = self.counts[kind] = self.counts.get(kind, 0) + 1
        for rule in self.rules:
            if rule.kind != kind:
                continue
            if rule.generation is not None and generation >= rule.generation:
                os.kill(os.getpid(), signal.SIGKILL)
            if rule.nth == count:
                if rule.action == "slow":
                    return Delay(rule.delay, then_kill=False, until=rule.until)
                os.kill(os.getpid(), signal.SIGKILL if rule.action == "kill" else signal.SIGSTOP)
            if rule.unit is not None and rule.unit == unit:
                return Delay(rule.delay, then_kill=True)
        return None

    @staticmethod
    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)
