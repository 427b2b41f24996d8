"""Speed of building cluster programs with many units of work.

The scheduler must plan 100,000 units in under 5 s in total, so building the cluster program it
plans from has to take a small part of that. Each benchmark records units per second and the
per-unit cost in `extra_info`; the assertion only guards against a return of quadratic behaviour
(the cycle collector rescanning the growing heap made this five times slower once).

    PYTHONPATH=. .venv/bin/pytest benchmarks/test_cluster_build.py --benchmark-only
"""

from __future__ import annotations

from common.paths import repo_file
from compiler.cluster.build import compile_cluster
from compiler.frontend.load import load_file
from scheduler.planning.planner import NodeFigure, plan
from schemas.capnp_io import plan_from_bytes, plan_to_bytes

UNITS = 100_000


def _kernel(name: str):
    return load_file(repo_file(f"examples/{name}.phk")).kernel()


def test_build_100k_units_of_add(benchmark):
    kernel = _kernel("add")
    dims = {"N": 1048576 * UNITS}
    program = benchmark.pedantic(compile_cluster, args=(kernel, dims), rounds=3, iterations=1)
    assert len(program.units) == UNITS
    seconds = benchmark.stats.stats.min
    benchmark.extra_info.update(
        units=UNITS, units_per_second=UNITS / seconds, us_per_unit=1e6 * seconds / UNITS
    )
    assert seconds < 5.0  # the scheduler's whole budget for planning 100k units


def test_build_matmul_with_100k_launches(benchmark):
    # 100 x 100 output super-tiles of 512, each an init and 9 steps: 10,000 units, 100,000 launches.
    kernel = _kernel("matmul_plain")
    dims = {"M": 51200, "N": 51200, "K": 4608}
    program = benchmark.pedantic(compile_cluster, args=(kernel, dims), rounds=3, iterations=1)
    launches = sum(len(u.launches) for u in program.units)
    assert launches == 100_000
    seconds = benchmark.stats.stats.min
    benchmark.extra_info.update(launches=launches, us_per_launch=1e6 * seconds / launches)


def test_capnp_round_trip_of_a_10k_unit_plan(benchmark):
    # What travels is each node's plan (schemas/rpc.capnp), not the cluster program.
    program = compile_cluster(_kernel("add"), {"N": 1048576 * 10_000})
    uris = {t.name: f"file:///{t.name}.npy" for t in program.tensors}
    node_plan = plan(program, [NodeFigure(0, 0)], uris).node_plans[0]

    def round_trip():
        return plan_from_bytes(plan_to_bytes(node_plan))

    decoded = benchmark.pedantic(round_trip, rounds=3, iterations=1)
    assert decoded == node_plan
    benchmark.extra_info.update(units=10_000, us_per_unit=1e6 * benchmark.stats.stats.min / 10_000)
