"""A plan is checked once, when it arrives, against the schema's invariants and the program's
leaves; what passes is a `CheckedPlan`, which pod/statemachine/state.py accepts without a second look.

Its own module: the rules of a well-formed plan are not the rules of running one (state.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from schemas.instructions import Allocate, Compute, Free, Load, NodePlan, Store, kind_of, used_buffers
from schemas.remote_errors import FailureKind, Refused

BAD_PLAN = FailureKind.BAD_PLAN


@dataclass(frozen=True)
class CheckedPlan:
    """A plan `validate_plan` accepted: the type says it needs no second look."""

    plan: NodePlan


def validate_plan(plan: NodePlan) -> CheckedPlan:
    """Refuse a plan that breaks the schema's invariants: duplicate ids, deps naming unknown ids,
    a dependency cycle, a buffer allocated or freed twice, a buffer used without an Allocate, a
    load or store naming a tensor the plan has no URI for."""
    ids: set[int] = set()
    for ins in plan.instructions:
        if ins.id in ids:
            raise Refused(f"plan for node {plan.node}: instruction id {ins.id} appears twice", BAD_PLAN)
        ids.add(ins.id)
        if isinstance(ins, Load | Store) and not 0 <= ins.tensor < len(plan.uris):
            raise Refused(f"plan for node {plan.node}: instruction {ins.id} ({kind_of(ins)}) names tensor "
                          f"{ins.tensor}, but the plan states {len(plan.uris)} URIs", BAD_PLAN)
    _check_buffers(plan, ids)
    _check_acyclic(plan, ids)
    return CheckedPlan(plan)


def _check_buffers(plan: NodePlan, ids: set[int]) -> None:
    allocated: set[int] = set()
    freed: set[int] = set()
    for ins in plan.instructions:
        for dep in ins.deps:
            if dep not in ids:
                raise Refused(f"plan for node {plan.node}: instruction {ins.id} depends on unknown id {dep}",
                              BAD_PLAN)
        if isinstance(ins, Allocate):
            if ins.buffer in allocated:
                raise Refused(f"plan for node {plan.node}: buffer {ins.buffer} is allocated twice", BAD_PLAN)
            allocated.add(ins.buffer)
        elif isinstance(ins, Free):
            if ins.buffer in freed:
                raise Refused(f"plan for node {plan.node}: buffer {ins.buffer} is freed twice", BAD_PLAN)
            freed.add(ins.buffer)
    for ins in plan.instructions:
        for buf in used_buffers(ins):
            if buf not in allocated:
                raise Refused(f"plan for node {plan.node}: instruction {ins.id} ({kind_of(ins)}) uses "
                              f"buffer {buf}, which no Allocate creates", BAD_PLAN)


def _check_acyclic(plan: NodePlan, ids: set[int]) -> None:
    # Kahn's algorithm: every instruction must be reachable in dependency order.
    indegree = {ins.id: len(set(ins.deps)) for ins in plan.instructions}
    dependents: dict[int, list[int]] = {i: [] for i in ids}
    for ins in plan.instructions:
        for dep in set(ins.deps):
            dependents[dep].append(ins.id)
    ready = [i for i, n in indegree.items() if n == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in dependents[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    if seen != len(ids):
        raise Refused(f"plan for node {plan.node}: the dependencies form a cycle", BAD_PLAN)


def check_leaves(plan: NodePlan, leaves: Mapping[str, frozenset[str]]) -> None:
    """Refuse a plan whose computes name a leaf (or a leaf's parameter) the program lacks."""
    for ins in plan.instructions:
        if not isinstance(ins, Compute):
            continue
        if ins.leaf not in leaves:
            raise Refused(f"instruction {ins.id}: no leaf {ins.leaf!r} in the program "
                          f"(it has: {', '.join(sorted(leaves)) or 'none'})", BAD_PLAN)
        for param, _ in ins.bindings:
            if param not in leaves[ins.leaf]:
                raise Refused(f"instruction {ins.id}: leaf {ins.leaf} has no tensor parameter {param!r}",
                              BAD_PLAN)
