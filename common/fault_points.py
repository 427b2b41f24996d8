"""Test-only fault points: a process stops or dies at the n-th time it reaches a named step, so
that a test can catch it between two writes (tests wait for the signal's effect, never a time).

The rule comes from the environment through common/options.py (each user of this module names its
own variable) and reads `<verb>=<step>:<n>`; with no rule a point costs one lookup."""

from __future__ import annotations

import os
from collections.abc import Callable


class FaultPoints:
    """`points(step)` sends `sig` to this process when the rule (`rule_of()`) is `<verb>=<step>:<n>`
    and this is the n-th time `step` is reached."""

    def __init__(self, rule_of: Callable[[], str | None], verb: str, sig: int):
        self.rule_of, self.verb, self.sig = rule_of, verb, sig
        self.counts: dict[str, int] = {}

    def __call__(self, step: str) -> None:
        rule = self.rule_of()
        if not rule:
            return
        self.counts[step] = self.counts.get(step, 0) + 1
        if rule == f"{self.verb}={step}:{self.counts[step]}":
            os.kill(os.getpid(), self.sig)
