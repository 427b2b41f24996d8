"""Where a big plan's time and memory go, stage by stage (issue 15's planner row).

Plans `--units` add units over 4 nodes (the shape of benchmarks/test_planner_speed.py's million
test) once and prints, for each stage of scheduler/planning/planner.py's pipeline as it returns: the
process's resident memory, its high-water mark and how much the stage raised it, the stage's user
and system CPU seconds and its minor page faults. On a VM the system time follows the high-water
mark (memory touched for the first time is what costs), so that column is the one to watch.

With `--compiled` the program comes from the cluster compiler (examples/add.phk, one unit a
super-tile of 1024 elements), which makes the units as columns and no object per unit; the time
of compiling it is printed too. Without it, from tests/scheduler/programs.py's `add_program`,
which builds every `Unit` object and the program walks them into columns when it is made.

Run: PYTHONPATH=. .venv/bin/python benchmarks/planner_stages.py --units 1000000 [--compiled]
"""

from __future__ import annotations

import argparse
import functools
import resource

from common.paths import repo_file
from compiler.cluster.build import compile_cluster
from compiler.frontend.load import load_file
from scheduler.planning import plan_arrays, plan_columns, plan_instructions, planner
from tests.scheduler.programs import add_program, uris_of

STAGES = [
    (planner, "place_columns"),
    (plan_arrays, "flatten"),
    (plan_arrays, "node_order"),
    (plan_arrays, "number_buffers"),
    (plan_columns, "choose_owners"),
    (plan_columns, "releases"),
    (plan_columns, "peaks"),
    (plan_instructions, "instructions"),
]


def _resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**20


def _cpu(before, after) -> str:
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return f"user {user:5.2f} s, system {system:5.2f} s, {after.ru_minflt - before.ru_minflt} faults"


def _measured(name: str, stage):
    @functools.wraps(stage)
    def run(*args, **kwargs):
        before = resource.getrusage(resource.RUSAGE_SELF)
        result = stage(*args, **kwargs)
        after = resource.getrusage(resource.RUSAGE_SELF)
        print(f"{name:15s} resident {_resident_mib():6.0f} MiB, peak {after.ru_maxrss / 1024:6.0f} MiB "
              f"(+{(after.ru_maxrss - before.ru_maxrss) / 1024:4.0f}), {_cpu(before, after)}")
        return result
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--compiled", action="store_true", help="the program from the cluster compiler")
    args = parser.parse_args()
    units = args.units
    before = resource.getrusage(resource.RUSAGE_SELF)
    if args.compiled:
        kernel = load_file(repo_file("examples/add.phk")).kernel()
        program = compile_cluster(kernel, {"N": units * 1024}, cluster_values={"BLOCK": 1024})
    else:
        program = add_program(units * 16, 16)
    made = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{'program':15s} {_cpu(before, made)}, {len(program.units)} units")
    for module, name in STAGES:  # the planner calls each stage through its module's attribute
        setattr(module, name, _measured(name, getattr(module, name)))
    before = resource.getrusage(resource.RUSAGE_SELF)
    planner.plan(program, [planner.NodeFigure(i) for i in range(4)], uris_of(program))
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{'plan':15s} {_cpu(before, after)}, units {units}")


if __name__ == "__main__":
    main()
