"""--tune-leaves: one GPU pod times the leaf at every @autotune point; every node then uses the winner.

The scheduler decides, the pods only run: at the chosen @cluster values, each @autotune point the
cluster compiler accepts (a leaf tile must divide its super-tile) is compiled into a cluster
program, and a probe job of its first two units runs on the one tuning pod through the real
runtime (the same RPC, planner and storage as the job, outputs to scratch files). The point's
time is the sum of the compute events of its second unit (the first launch of a leaf in a job
also prepares it: parses it or loads its PTX). Points whose probe fails (a tile the GPU cannot
launch) are skipped with the reason. One untimed warm-up job runs first. The winner's values go
into the job's leaves, so every node runs the same ones. Results are cached beside the
calibration (scheduler/tuning/calibrate.py), keyed by the tuning pod, the kernel, the dims and the
@cluster values.

Why probes rather than compiler/cuda/tuning/autotune.py on the pod: the pod interface (schemas/rpc.capnp)
has no call that runs the single-GPU tuner; with one, `tune_leaves` would ask it instead and keep
the rest (choice, cache, one set of values for all nodes) as it is.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Mapping

from common.errors import UserError
from compiler.frontend import ir


def leaf_points(kernel: ir.Kernel, pinned: dict[str, int] | None = None) -> list[dict[str, int]]:
    """Every @autotune combination, first values first; a pinned name takes only its value."""
    if kernel.autotune is None:
        return [{}]
    pinned = pinned or {}
    names = [d.name for d in kernel.autotune.dims]
    combos = itertools.product(*([pinned[d.name]] if d.name in pinned else d.values
                                 for d in kernel.autotune.dims))
    return [dict(zip(names, combo, strict=True)) for combo in combos]


def probe_seconds(trace: dict) -> float:
    """Compute time of a probe's steady unit: its second unit's launches when it has two, else
    the only unit's (then preparation is included alike for every point)."""
    computes = [e for e in trace["events"] if e["kind"] == "compute" and e["ok"]]
    units = sorted({e["unit"] for e in computes if e["unit"] is not None})
    chosen = units[1] if len(units) > 1 else (units[0] if units else None)
    return sum(e["end"] - e["start"] for e in computes if e["unit"] == chosen)


def choose(timings: Mapping[tuple[tuple[str, int], ...], list[float]]) -> dict[str, int]:
    """The point with the smallest median time; ties keep the search order."""
    best = min(timings, key=lambda point: statistics.median(timings[point]))
    return dict(best)


def tuning_node(session, nodes: list[int], require_gpu: bool = True) -> int:
    for node in nodes:
        if session.infos[node].backend == "gpu":
            return node
    if require_gpu:
        backends = ", ".join(sorted({session.infos[n].backend for n in nodes}))
        raise UserError(f"--tune-leaves needs a GPU pod to tune on; the pods are {backends} pods")
    return nodes[0]


async def tune_leaves(session, prepared, options, nodes: list[int], cluster_values: dict[str, int],
                      say: Callable[[str], None] = print, require_gpu: bool = True,
                      repeats: int = 1) -> dict[str, int]:
    """The @autotune values every node will use (see the module doc)."""
    from scheduler.jobs.prepare import compile_program
    from scheduler.tuning import calibrate as cal

    node = tuning_node(session, nodes, require_gpu)
    info = session.infos[node]
    kernel = prepared.kernel
    dims = dict(prepared.job.dims)
    key = "|".join([cal.cluster_key([(session.addresses[node].rpartition(":")[0], info.backend,
                                      info.device_name)]),
                    cal.kernel_key(prepared.program).rsplit("|", 1)[0],
                    ",".join(f"{k}={v}" for k, v in sorted(cluster_values.items())),
                    ",".join(f"{k}={v}" for k, v in sorted(prepared.pinned_tiles.items()))])  # searched less
    cached = cal.read_cache().get("leaf_tuning", {}).get(key)
    if cached:
        say(f"leaf tuning: reusing {_label(cached['values'])} from {cal.cache_path()}")
        return dict(cached["values"])

    timings: dict[tuple[tuple[str, int], ...], list[float]] = {}
    skipped: list[str] = []
    warmed = False
    for point in leaf_points(kernel, prepared.pinned_tiles):
        try:
            program = compile_program(kernel, dims, cluster_values, point)
        except UserError as err:
            skipped.append(f"{_label(point)}: {(getattr(err, 'message', None) or str(err)).splitlines()[0]}")
            continue
        if not warmed:
            # A warm-up, not timed: a pod's first job also pays for its device's first use
            # (context, module loading, allocator), which would count against the first point.
            try:
                await cal.run_probe(session, prepared, options, [node], program, units=1)
            except RuntimeError:
                pass  # this point's own probe below says what went wrong
            warmed = True
        for _ in range(repeats):
            try:
                probe = await cal.run_probe(session, prepared, options, [node], program, units=2)
            except RuntimeError as err:  # the pod could not run this point
                skipped.append(f"{_label(point)}: {err}")
                break
            timings.setdefault(tuple(point.items()), []).append(probe_seconds(probe.trace))
    if not timings:
        raise UserError("--tune-leaves: no @autotune point could run (" + "; ".join(skipped) + ")")
    best = choose(timings)
    say(f"leaf tuning on node {node} ({info.device_name}): {len(timings)} points timed, {len(skipped)} "
        f"skipped; chosen {_label(best)} ({statistics.median(timings[tuple(best.items())]) * 1e3:.2f} ms "
        f"per unit, first point {statistics.median(next(iter(timings.values()))) * 1e3:.2f} ms)")
    data = cal.read_cache()
    data.setdefault("leaf_tuning", {})[key] = {
        "values": best, "timings": {_label(dict(p)): t for p, t in timings.items()}}
    cal.write_cache(data)
    return best


def _label(point: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items()) or "(no @autotune)"
