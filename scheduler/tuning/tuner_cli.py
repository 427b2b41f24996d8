"""The tuner's flags on `phobos-sched JOB` and the autotuned run.

    phobos-sched JOB --autotune [--nodes N] [--vram 80GiB] [--leaf-flops 40e12] [--link-bw 50e9]
                     [--storage-bw 2e9] [--launch-overhead 5e-6] [--calibrate] [--tune-only]
    phobos-sched JOB [--autotune ...] --tune-leaves

`run_autotuned` reaches the pods (starting local ones as a plain run would), takes the node
count and memory from them unless the flags give them, ranks every @cluster combination with the
model (scheduler/tuning/tuner.py; with --calibrate, on figures measured by probe jobs,
scheduler/tuning/calibrate.py), prints the table, and runs the best combination on the same
pods. Pinned values (the job's, from `new-job --cluster`, and the run's --cluster, which
overrides them) stay: the search covers the other @cluster names only. --tune-leaves then has
one GPU pod time the leaves' @autotune points at the chosen @cluster values
(scheduler/tuning/tuner_leaves.py), a pinned --tile name at its value only; every node runs the
winner. docs/performance.md ("Cluster tuner") describes the model and the figures."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from common.errors import UserError

if TYPE_CHECKING:  # the tuner itself is imported where it runs: the flags alone stay light
    from scheduler.tuning.tuner import Figures, Ranking

# Defaults per pod backend: figures of the machines this project runs on (docs/performance.md).
# GPU: a leaf at about the SGEMM rate of one H200 (DESIGN.md), a 50 GB/s link (NVLink-class peer
# copies through host memory run slower; give --link-bw), storage read at 2 GB/s. CPU pods run the
# interpreter: a few GFLOP/s through numpy's BLAS, loopback TCP and page-cache reads.
DEFAULTS = {
    "gpu": dict(leaf_flops=40e12, link_bw=50e9, storage_bw=2e9, launch_s=20e-6, transfer_s=100e-6),
    "cpu": dict(leaf_flops=5e9, link_bw=1e9, storage_bw=2e9, launch_s=1e-3, transfer_s=1e-3),
}


class TuneOptions(NamedTuple):
    """The tuner's flags. A named tuple, not a dataclass: a command imports this module to build
    its parser before it starts its pods, and `dataclasses` (with `inspect`, 7-10 ms) would then
    load first."""

    autotune: bool = False
    calibrate: bool = False
    tune_only: bool = False
    tune_leaves: bool = False
    nodes: int | None = None
    vram_bytes: int | None = None
    leaf_flops: float | None = None
    link_bw: float | None = None
    storage_bw: float | None = None
    launch_s: float | None = None
    host_bw: float | None = None

    @property
    def active(self) -> bool:
        return self.autotune or self.calibrate or self.tune_leaves


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster tuner (docs/performance.md, 'Cluster tuner')")
    g.add_argument("--autotune", action="store_true",
                   help="plan every @cluster combination, drop those that do not fit a node's memory or "
                        "leave a node idle, rank the rest by a model of the busiest node, print the "
                        "table and run the best (without it each @cluster name takes its first value)")
    g.add_argument("--calibrate", action="store_true",
                   help="with --autotune: measure the model's figures on the pods with small probe jobs "
                        "(cached per cluster and kernel in $PHOBOS_CACHE_DIR or ~/.cache/phobos)")
    g.add_argument("--tune-only", action="store_true", help="with --autotune: print the table, run nothing")
    g.add_argument("--tune-leaves", action="store_true",
                   help="let one GPU pod tune the leaves' @autotune values; every node uses them")
    g.add_argument("--nodes", type=int, metavar="N",
                   help="nodes to plan for (default: the pods connected); the job runs on the first N")
    g.add_argument("--vram", metavar="SIZE",
                   help="memory per node, e.g. 80GiB or 8e10 (default: the smallest a pod reports)")
    g.add_argument("--leaf-flops", type=float, metavar="F",
                   help="FLOP/s of a leaf on one node (default 40e12 for GPU pods, 5e9 for CPU pods)")
    g.add_argument("--link-bw", type=float, metavar="B",
                   help="bytes/s between two nodes (default 50e9 GPU, 1e9 CPU)")
    g.add_argument("--host-bw", type=float, metavar="B",
                   help="bytes/s between nodes of different hosts (default: --link-bw); with pods on "
                        "several hosts a split's tree by hosts is searched too")
    g.add_argument("--storage-bw", type=float, metavar="B",
                   help="bytes/s a node reads or writes storage (default 2e9)")
    g.add_argument("--launch-overhead", type=float, metavar="S",
                   help="seconds of fixed cost per leaf launch (default 20e-6 GPU, 1e-3 CPU)")


_SIZE = re.compile(r"^\s*([0-9.eE+]+)\s*([KMGT]i?B?|B)?\s*$")
_UNITS = {"": 1, "B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def parse_size(text: str, flag: str = "--vram") -> int:
    match = _SIZE.match(text)
    if not match:
        raise UserError(f"{flag} {text!r}: expected a size such as 80GiB, 512MB or 8e10")
    try:
        number = float(match.group(1))
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected a size such as 80GiB, 512MB or 8e10") from None
    unit = (match.group(2) or "").removesuffix("B") if match.group(2) != "B" else ""
    value = int(number * _UNITS[unit])
    if value <= 0:
        raise UserError(f"{flag} must be positive, got {text!r}")
    return value


def options_from_args(args: argparse.Namespace) -> TuneOptions:
    for flag, value in (("--leaf-flops", args.leaf_flops), ("--link-bw", args.link_bw),
                        ("--storage-bw", args.storage_bw), ("--host-bw", args.host_bw)):
        if value is not None and not value > 0:
            raise UserError(f"{flag} must be positive, got {value}")
    if args.launch_overhead is not None and args.launch_overhead < 0:
        raise UserError(f"--launch-overhead must not be negative, got {args.launch_overhead}")
    if args.nodes is not None and args.nodes < 1:
        raise UserError(f"--nodes must be at least 1, got {args.nodes}")
    if (args.calibrate or args.tune_only) and not args.autotune:
        raise UserError("--calibrate and --tune-only go with --autotune")
    return TuneOptions(
        autotune=args.autotune, calibrate=args.calibrate, tune_only=args.tune_only,
        tune_leaves=args.tune_leaves, nodes=args.nodes,
        vram_bytes=parse_size(args.vram) if args.vram else None, leaf_flops=args.leaf_flops,
        link_bw=args.link_bw, storage_bw=args.storage_bw, launch_s=args.launch_overhead, host_bw=args.host_bw)


def base_figures(tune: TuneOptions, connected: int, backends: list[str], vrams: list[int],
                 hosts: list[str] | None = None) -> Figures:
    """The model's figures from the flags, else the pods (count, memory, hosts), else the defaults
    for the pods' backend (GPU figures when any pod is a GPU)."""
    nodes = tune.nodes if tune.nodes is not None else connected
    if nodes > connected and not tune.tune_only:  # a table for a bigger cluster is fine; a run is not
        raise UserError(f"--nodes {nodes}: only {connected} pod(s) are connected")
    if nodes > connected and tune.calibrate:
        raise UserError(f"--nodes {nodes} --calibrate: only {connected} pod(s) are connected to measure")
    known = [v for v in vrams if v > 0]
    kind = "gpu" if "gpu" in backends[:nodes] else "cpu"
    defaults = DEFAULTS[kind]
    given = tune.leaf_flops or tune.link_bw or tune.storage_bw or tune.launch_s is not None
    from scheduler.tuning.tuner import Figures

    return Figures(
        nodes=nodes,
        vram_bytes=tune.vram_bytes if tune.vram_bytes is not None else (min(known) if known else 0),
        leaf_flops=tune.leaf_flops or defaults["leaf_flops"],
        link_bw=tune.link_bw or defaults["link_bw"],
        storage_bw=tune.storage_bw or defaults["storage_bw"],
        launch_s=tune.launch_s if tune.launch_s is not None else defaults["launch_s"],
        transfer_s=defaults["transfer_s"],
        hosts=tuple((hosts or [])[:nodes]), host_bw=tune.host_bw or 0.0,
        source="command line and defaults" if given else f"defaults for {kind.upper()} pods")


def candidate_compiler(prepared):
    """`compile_at(values, split)` for the calibration: the prepared job's program at a candidate's
    @cluster values and split (not split unless given)."""
    from compiler.cluster.tree import NO_SPLIT
    from scheduler.jobs.prepare import recompile

    def compile_at(values, split=NO_SPLIT):
        return recompile(prepared, values, split=split).program

    return compile_at


def rank_job(prepared, figures: Figures, pinned: dict[str, int]) -> Ranking:
    """A split the job was prepared with (--split, or the job's) is pinned; else the tuner
    chooses one for a cluster loop that can be split."""
    from scheduler.jobs.prepare import split_of
    from scheduler.tuning.tuner import tune

    return tune(prepared.kernel, dict(prepared.job.dims), figures, pinned=pinned,
                tile_values=dict(prepared.program.tile_values), split=split_of(prepared.program))


class TunedRun(NamedTuple):
    ranking: Ranking | None  # None without --autotune (--tune-leaves alone)
    prepared: object  # the PreparedJob that ran (or would run)
    result: object | None  # RunResult; None with --tune-only


def run_autotuned(prepared, options, tune: TuneOptions, say: Callable[[str], None] = print) -> TunedRun:
    """Reach the pods, rank, print the table, run the best (see the module doc)."""
    from scheduler.running.interrupt import interruptible
    from schemas import rpc_streams

    return rpc_streams.run(interruptible(_run_autotuned(prepared, options, tune, say)))


async def _run_autotuned(prepared, options, tune: TuneOptions, say) -> TunedRun:
    from scheduler.running.run import PodSession, start_pods_for

    local = None
    addresses, token = list(options.pods), options.token
    if not addresses:
        # Local pods: as many as --local-pods, else --nodes, else the default count.
        count = options.local_pods if options.local_pods is not None else tune.nodes
        local = await start_pods_for(options, count)
        addresses, token = local.addresses, local.token
    session = PodSession(addresses, token)
    try:
        await session.open()
        return await tune_on_session(session, prepared, options, tune, say)
    finally:
        await session.close()
        if local is not None:
            await local.stop()


async def tune_on_session(session, prepared, options, tune: TuneOptions, say) -> TunedRun:
    """Everything after the pods are reached; tests and the validation benchmark call it too.

    The @cluster values first (ranked with --autotune, else the job's), then with --tune-leaves
    the leaves' @autotune values at those @cluster values."""
    from compiler.cluster import tree
    from scheduler.jobs.prepare import recompile
    from scheduler.tuning import calibrate as cal
    from scheduler.tuning.tuner_leaves import tune_leaves
    from scheduler.tuning.tuner_table import render_table

    order = sorted(session.pods)
    infos = [session.infos[n] for n in order]
    figures = base_figures(tune, len(order), [i.backend for i in infos], [int(i.vram_bytes) for i in infos],
                           [i.host_id for i in infos])
    nodes = order[: min(figures.nodes, len(order))]
    pinned = dict(prepared.pinned_cluster)  # the job's pins and the run's --cluster
    ranking = None
    values = dict(prepared.program.cluster_values)
    split = None  # as prepared
    if tune.autotune:
        ranking = rank_job(prepared, figures, pinned)
        if tune.calibrate:
            candidates = (*ranking.ranked, *ranking.dropped)
            figures = await cal.calibrate(session, prepared, options, nodes, candidates, figures,
                                          candidate_compiler(prepared), say)
            ranking = rank_job(prepared, figures, pinned)
        say(render_table(ranking))
        values = dict(ranking.best.values)
        split = ranking.best.split or tree.NO_SPLIT
    tile_values = None
    if tune.tune_leaves:
        tile_values = await tune_leaves(session, prepared, options, nodes, values, say)
    best = recompile(prepared, values, tile_values, split)
    if tune.tune_only:
        return TunedRun(ranking, best, None)
    result = await session.run(best, options, nodes)
    return TunedRun(ranking, best, result)
