"""--calibrate: the tuner's figures measured on the actual pods, by small probe jobs.

A probe is the job itself cut down to its first units (three per node), run through the real
runtime (the same pods, RPC, planner and storage as the job) at one @cluster combination, with
its outputs sent to scratch files beside the real ones (removed afterwards; the real outputs are
never touched). Probes run at the combinations with the smallest and the largest super-tiles, so
leaf launches of two sizes separate a leaf's fixed cost per launch from its FLOP rate; then a
probe at every other kept combination whose leaves (at their dims and tile values) were not
timed yet, all after one unmeasured warm-up job. Every probe's launches go into one line per
leaf (see `measure` for why not a time per leaf shape).

From the probes' trace events (the scheduler's --trace records; see docs/runtime.md):
  - leaf speed, per leaf: a least-squares line `launch time = launch_s + FLOPs / rate` over the
    compute events; then divided by the measured compute concurrency (the sum of compute times
    over the union of their intervals, per node), since a pod runs computes of two units at once;
  - storage: the same line over load and store events, `time = transfer_s + bytes / storage_bw`;
  - link: over fetch events, counting a fetch from the moment its peer had loaded the tile (a fetch
    is issued early and waits for its peer's load; that wait is not the link's);
  - per job: wall time minus the span of the events (start, plan, submit, commit);
  - per instruction: what all of the above leave unexplained of each node's span in the probes,
    over its instruction count (`instruction_cost`).

Results are cached in JSON ($PHOBOS_CACHE_DIR or ~/.cache/phobos/, file cluster-calibration.json):
transfer figures keyed by the cluster (each pod's host, backend and device, in node order), leaf
figures keyed by the cluster and the kernel's source, dims and tile values; a later --calibrate on
the same cluster and kernel measures nothing. The fits are pure functions
(scheduler/tuning/calibration_fit.py), tested without pods.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Sequence
from pathlib import Path

from common import cache
from scheduler.tuning.calibration_fit import Calibration, Probe, TransferFit, figures_from, measure
from scheduler.tuning.tuner import Figures, LeafRate
from schemas.program import ClusterProgram

CACHE_FILE = "cluster-calibration.json"
CACHE_VERSION = 2  # 2: the per-instruction cost
UNITS_PER_NODE = 3  # a probe's units per node: two are in flight at once, as in a real job, and a
# third gives each node a steady launch of every leaf beside its first
LEAF_PROBE_UNITS = 3  # per node, in the probes that only time the leaves of one more combination


# ------------------------------------------------------------------------------------------
# The cache
# ------------------------------------------------------------------------------------------


def cache_path() -> Path:
    return cache.cache_file(CACHE_FILE)


def cluster_key(pods: Sequence[tuple[str, str, str]]) -> str:
    """Key of a cluster: each pod's (host, backend, device) in node order. Ports are left out,
    since local pods get new ones on every run."""
    return ";".join(f"{host}|{backend}|{device}" for host, backend, device in pods)


def kernel_key(program: ClusterProgram) -> str:
    digest = hashlib.sha256(program.source.encode()).hexdigest()[:16]
    dims = ",".join(f"{k}={v}" for k, v in sorted(program.dims))
    tiles = ",".join(f"{k}={v}" for k, v in sorted(program.tile_values))
    return f"{program.kernel}|{digest}|{dims}|{tiles}"


def read_cache() -> dict:
    data = cache.read_json(CACHE_FILE)
    return data if data.get("version") == CACHE_VERSION else {}


def write_cache(data: dict) -> None:
    cache.write_json(CACHE_FILE, {**data, "version": CACHE_VERSION})


def cached_calibration(ckey: str, kkey: str) -> Calibration | None:
    data = read_cache()
    transfers = data.get("clusters", {}).get(ckey)
    leaves = data.get("leaves", {}).get(f"{ckey}#{kkey}")
    try:
        rates = {name: LeafRate(*pair) for name, pair in leaves["rates"].items()}
        return Calibration(TransferFit(**transfers), rates, float(leaves["prepare_s"]),
                           float(leaves.get("overlap", 1.0)),
                           {k: float(v) for k, v in leaves.get("launch_times", {}).items()},
                           float(leaves.get("instruction_s", 0.0)))
    except (TypeError, KeyError, ValueError):  # absent, or written by another version
        return None


def store_calibration(ckey: str, kkey: str, calibration: Calibration) -> None:
    data = read_cache()
    data.setdefault("clusters", {})[ckey] = dataclasses.asdict(calibration.transfers)
    data.setdefault("leaves", {})[f"{ckey}#{kkey}"] = {
        "rates": {n: [r.launch_s, r.flops_per_s] for n, r in calibration.rates.items()},
        "prepare_s": calibration.prepare_s, "overlap": calibration.overlap,
        "launch_times": calibration.launch_times, "instruction_s": calibration.instruction_s}
    write_cache(data)


# ------------------------------------------------------------------------------------------
# Probes through the real runtime
# ------------------------------------------------------------------------------------------


def probe_program(program: ClusterProgram, units: int) -> ClusterProgram:
    return dataclasses.replace(program, units=program.units[:units])


def probe_combinations(ranking_candidates) -> list:
    """The kept combinations with the smallest and the largest super-tiles (most and fewest units)."""
    kept = [c for c in ranking_candidates if c.dropped is None]
    if not kept:
        return []
    most = max(kept, key=lambda c: (c.units, -c.order))
    fewest = min(kept, key=lambda c: (c.units, c.order))
    return [most] if most is fewest else [most, fewest]


async def run_probe(session, prepared, options, nodes: list[int], program: ClusterProgram,
                    units: int | None = None) -> Probe:
    """Run `program`'s first `units` units (default UNITS_PER_NODE per node) on the session's
    `nodes`, outputs to scratch files."""
    from common import storage, uri
    from common.locks import lock_path
    from scheduler.planning.planner import NodeFigure, plan

    small = probe_program(program, units if units is not None else UNITS_PER_NODE * len(nodes))
    probe_id = f"{prepared.job_id}-probe-{secrets.token_hex(4)}"  # job ids are never reused
    tensors = dict(prepared.tensors)
    scratch: list[Path] = []
    try:
        for place in prepared.outputs:
            path = place.path.with_name(f".{place.path.stem}.{probe_id}.npy")
            staging = storage.create_staging(path, place.shape, place.dtype, probe_id)
            storage.commit(staging, path)
            scratch.append(path)
            tensors[place.name] = dataclasses.replace(place, path=path, uri=uri.resolved_uri(path))
        job = dataclasses.replace(prepared, job_id=probe_id, program=small, tensors=tensors)
        result = await session.run(job, options, nodes)
        if not result.ok:
            raise RuntimeError(f"calibration probe failed: {result.reason}")
        planned = plan(small, [NodeFigure(n, 0) for n in nodes], job.uris, 1)
        table = {node: {ins.id: ins for ins in p.instructions} for node, p in planned.node_plans.items()}
        return Probe(result.trace, small, table)
    finally:
        for path in scratch:  # private files: no other job can hold their locks
            path.unlink(missing_ok=True)
            lock_path(path).unlink(missing_ok=True)


def _compile(compile_at, candidate) -> ClusterProgram:
    """The candidate's program: its @cluster values, and its split where it has one (a caller's
    `compile_at(values)` that takes no split compiles as the job was prepared)."""
    if candidate.split is None:
        return compile_at(dict(candidate.values))
    return compile_at(dict(candidate.values), candidate.split)


async def calibrate(session, prepared, options, nodes: list[int], candidates, base: Figures,
                    compile_at, say=print) -> Figures:
    """Figures for `base`'s cluster measured by probes (or read from the cache); `compile_at(values,
    split)` compiles a candidate (`split` given only for a split candidate)."""
    infos = [session.infos[n] for n in nodes]
    ckey = cluster_key([(session.addresses[n].rpartition(":")[0], info.backend, info.device_name)
                        for n, info in zip(nodes, infos, strict=True)])
    kkey = kernel_key(prepared.program)
    cached = cached_calibration(ckey, kkey)
    if cached is not None:
        say(f"calibration: reusing measurements from {cache_path()}")
        return figures_from(cached, base, "calibrated on the pods, from the cache")
    from scheduler.tuning.tuner import leaf_signature

    combos = probe_combinations(candidates)
    if combos:
        # A warm-up, not measured: the first job on fresh pods also pays for imports, the BLAS's
        # or GPU's first use and cold page-cache reads, which no later job pays.
        say(f"calibration: warm-up at {combos[0].label()} on {len(nodes)} nodes")
        await run_probe(session, prepared, options, nodes, _compile(compile_at, combos[0]), len(nodes))
    if not combos:
        return base
    # The probes: the two combinations above, then the leaves of every other kept combination
    # whose leaves (at their own dims and tile values) those do not run.
    plan_: list[tuple[str, ClusterProgram, int | None]] = [
        ("probe", _compile(compile_at, c), None) for c in combos]
    labels = [c.label() for c in combos]
    measured = {leaf_signature(leaf) for _, program, _ in plan_ for leaf in program.leaves}
    for cand in candidates:
        if cand.dropped is not None:
            continue
        program = _compile(compile_at, cand)
        if all(leaf_signature(leaf) in measured for leaf in program.leaves):
            continue
        plan_.append(("leaf probe", program, LEAF_PROBE_UNITS * len(nodes)))
        labels.append(cand.label())
        measured.update(leaf_signature(leaf) for leaf in program.leaves)
    # Every probe runs twice, in order and then in reverse: the machine's load drifts (other
    # programs come and go), and a size probed only in a busy moment tilts the lines; run both
    # ways, every size meets the drift alike, and the medians get twice the samples.
    order = list(range(len(plan_)))
    probes = []
    for i in order + order[::-1]:
        kind, program, units = plan_[i]
        say(f"calibration: {kind} at {labels[i]} on {len(nodes)} nodes")
        probes.append(await run_probe(session, prepared, options, nodes, program, units))
    calibration = measure(probes, base)
    store_calibration(ckey, kkey, calibration)
    return figures_from(calibration, base)
