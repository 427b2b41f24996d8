"""Planner speed: planning and unrolling 10k, 100k and 1M units must grow linearly.

Target: 100,000 units planned and unrolled in under 5 s. The programs are shaped like the
cluster compiler's: an elementwise add (three buffers per unit, no sharing) and a matmul with a
cluster loop (8 K-steps per unit, A and B super-tiles shared between units and nodes).
Run: PYTHONPATH=. .venv/bin/pytest benchmarks/test_planner_speed.py --benchmark-only -m "not slow"
"""

from __future__ import annotations

import pytest

from scheduler.planner import NodeFigure, plan
from tests.scheduler.programs import add_program, matmul_program, uris_of

NODES = [NodeFigure(i) for i in range(4)]


@pytest.mark.parametrize("units", [
    10_000,
    100_000,
    pytest.param(1_000_000, marks=pytest.mark.slow),
])
def test_plan_add(benchmark, units):
    program = add_program(units * 16, 16)
    result = benchmark.pedantic(plan, args=(program, NODES, uris_of(program)), rounds=1, iterations=1)
    assert len(result.placement) == units
    benchmark.extra_info["instructions"] = sum(len(p.instructions) for p in result.node_plans.values())


@pytest.mark.parametrize("side", [
    35,  # 1225 units x 9 launches: about 11k launches
    106,  # 11236 units, about 100k launches
])
def test_plan_matmul(benchmark, side):
    program = matmul_program(side * 16, side * 16, 8 * 16, 16, 16, 16)
    result = benchmark.pedantic(plan, args=(program, NODES, uris_of(program)), rounds=1, iterations=1)
    assert len(result.placement) == side * side
    benchmark.extra_info["instructions"] = sum(len(p.instructions) for p in result.node_plans.values())
