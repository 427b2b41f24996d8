"""The cluster tuner's model: choose @cluster values by predicting each combination's time.

Pure: no I/O, no clocks. The pipeline, for every combination of @cluster values:

1. compile the cluster program at those values (a combination the cluster compiler rejects, e.g. a
   dimension that is not a whole multiple of its super-tile, is dropped with the compiler's reason);
2. plan it with the real planner over the nodes (VRAM unchecked there, so we get every node's
   peak and can say by how much it misses);
3. drop it when some node gets no super-tile (fewer units than nodes) or a node's peak exceeds
   its memory;
4. account every node's plan (`account`): launches and FLOPs per leaf, bytes loaded, fetched,
   served and stored, the bytes it must have before its first compute and its last store;
5. predict (`predict`): per node, compute time and transfer time overlap (a pod runs loads and
   fetches while it computes); what cannot overlap is the start (the first compute waits for its
   inputs) and the end (the last store waits for the last compute). The job's time is the busiest
   node's, plus a fixed per-job cost that ranks nothing but makes predictions comparable with
   measured wall times:

       compute   = sum over launches of (launch_s + leaf FLOPs / leaf FLOP/s), or of the launch
                   time measured for that leaf at its dims and tile values (--calibrate)
       transfer  = (loaded + stored) / storage_bw + (fetched + served) / link_bw
                   + transfer_s per load and store + link_s per fetch
       middle    = transfer - start - end
       fixed     = instruction_s * the node's instructions (all of them, allocate and free too)
       node time = start + compute + middle - overlap * min(compute, middle) + end + fixed
       job time  = job_s + max over nodes of node time

   `overlap` is 1 by default (node time = start + max(compute, middle) + end: a GPU pod computes
   while its copies run); calibration measures it (a CPU pod's cores do both, so less hides).
   `instruction_s` is 0 by default; calibration measures it as what the timed events leave
   unexplained of the probes' node spans (on CPU pods sharing cores: dispatch, event reports,
   waits for the interpreter lock and for a core).

   A split reduction (a cluster loop cut into shares, merged by a tree) is planned like any other
   program, so its merges count as launches of the merge leaf and its partials as fetched and
   served bytes; the fetches of partials are the tree's and come after the shares' compute, so
   they are counted into the end, not hidden under compute:

       end      += partials fetched / link_bw + link_s per partial fetched

Candidates: every @cluster combination, and for a kernel whose cluster loop can be split
(compiler/cluster/combine.py) each with every split the nodes allow: 1 share (not split), and 2 to
`nodes` shares by a flat and a binary tree (a tree by hosts where the nodes span several hosts),
the splits only where the unsplit units do not share out evenly over the nodes. A split given with
--split or in the job is pinned. Candidates are ranked by predicted time; ties
keep the search-space order (first values first, fewer shares first, flat before binary).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from common.errors import UserError
from compiler.cluster.tree import SplitRequest
from compiler.frontend import ir
from schemas.instructions import ITEMSIZE, Allocate, Compute, Fetch, Load, NodePlan, Store
from schemas.program import ClusterProgram, Leaf


@dataclass(frozen=True)
class LeafRate:
    """How fast one leaf runs on a node: a fixed cost per launch plus its FLOPs at a rate."""

    launch_s: float
    flops_per_s: float

    def launch_time(self, flops: float) -> float:
        return self.launch_s + flops / self.flops_per_s


@dataclass(frozen=True)
class Figures:
    """The machine the model predicts for. Bandwidths in bytes/s; `vram_bytes` 0 = unchecked."""

    nodes: int
    vram_bytes: int
    leaf_flops: float  # FLOP/s of one node running a leaf
    link_bw: float  # between two nodes
    storage_bw: float  # a node reading or writing storage
    launch_s: float = 0.0  # fixed cost of one leaf launch
    transfer_s: float = 0.0  # fixed cost of one load or store (and of a fetch, unless link_s)
    link_s: float | None = None  # fixed cost of one fetch; None: transfer_s
    job_s: float = 0.0  # fixed cost of a job (start, plan, submit, commit)
    overlap: float = 1.0  # share of transfer time hidden under compute: 1 full, 0 none (summed)
    leaf_rates: tuple[tuple[str, LeafRate], ...] = ()  # per leaf name, overriding the two above
    # Fixed cost of every instruction of a node's plan that no instruction's own time shows: its
    # dispatch, its event's report, and on a CPU pod the interpreter lock and cores it shares with
    # the other work (calibration: what the timed events leave unexplained of the probes' spans).
    instruction_s: float = 0.0
    # Measured seconds per launch of a leaf at given dims and tile values (`leaf_signature`),
    # overriding the rates: a leaf's speed is not one line in its FLOPs (caches, tile shapes).
    launch_times: tuple[tuple[str, float], ...] = ()
    source: str = "command line"  # where the figures come from, for the table's heading
    hosts: tuple[str, ...] = ()  # each node's host (empty: all on one); several: a tree by hosts is tried
    host_bw: float = 0.0  # bytes/s between nodes of different hosts (0: link_bw)

    def launch_time(self, leaf: str, signature: str | None, flops: float) -> float:
        if signature is not None:
            for sig, seconds in self.launch_times:
                if sig == signature:
                    return seconds
        return self.rate(leaf).launch_time(flops)

    def rate(self, leaf: str) -> LeafRate:
        for name, rate in self.leaf_rates:
            if name == leaf:
                return rate
        return LeafRate(self.launch_s, self.leaf_flops)


@dataclass(frozen=True)
class NodeLoad:
    """What one node's plan asks of it."""

    node: int
    units: int
    launches: tuple[tuple[str, int, int], ...]  # (leaf, launches, total FLOPs)
    bytes_loaded: int
    bytes_fetched: int
    bytes_served: int
    bytes_stored: int
    transfers: int  # loads + stores
    fetches: int
    start_loaded: int  # bytes loaded before the first compute can run
    start_fetched: int  # bytes fetched before the first compute can run
    end_stored: int  # bytes of the last store
    peak_bytes: int
    instructions: int = 0  # every instruction of the node's plan (allocate and free included)
    tree_fetched: int = 0  # bytes of other nodes' partials fetched (of bytes_fetched)
    tree_fetches: int = 0  # of fetches
    host_moved: int = 0  # bytes fetched or served across hosts (of fetched + served)
    tree_host_fetched: int = 0  # of tree_fetched, across hosts


@dataclass(frozen=True)
class NodeEstimate:
    node: int
    compute_s: float
    transfer_s: float
    start_s: float
    end_s: float
    total_s: float


@dataclass(frozen=True)
class Prediction:
    total_s: float
    busiest: NodeEstimate
    nodes: tuple[NodeEstimate, ...]


@dataclass(frozen=True)
class Candidate:
    """One combination of @cluster values: predicted, or dropped with the reason."""

    values: tuple[tuple[str, int], ...]
    prediction: Prediction | None = None
    loads: tuple[NodeLoad, ...] = ()
    dropped: str | None = None
    units: int = 0
    order: int = 0  # position in the search space
    idle: str | None = None  # fewer super-tiles than nodes: dropped only when another keeps all busy
    split: SplitRequest | None = None  # the cluster loop's split (None: not split)

    @property
    def bytes_moved(self) -> int:
        return sum(n.bytes_loaded + n.bytes_fetched + n.bytes_stored for n in self.loads)

    @property
    def peak_bytes(self) -> int:
        return max((n.peak_bytes for n in self.loads), default=0)

    def label(self) -> str:
        text = " ".join(f"{k}={v}" for k, v in self.values)
        if self.split is not None and self.split.shares > 1:
            hosts = f"({','.join(map(str, self.split.hosts))})" if self.split.hosts else ""
            text += f" split={self.split.shares}/{self.split.shape}{hosts}"
        return text


@dataclass(frozen=True)
class Ranking:
    ranked: tuple[Candidate, ...]  # kept candidates, best first
    dropped: tuple[Candidate, ...]  # in search-space order
    figures: Figures
    pinned: tuple[tuple[str, int], ...] = field(default=())

    @property
    def best(self) -> Candidate:
        if not self.ranked:
            reasons = "".join(f"\n  {c.label()}: {c.dropped}" for c in self.dropped)
            raise UserError(f"--autotune: no @cluster combination can run on {self.figures.nodes} "
                            f"node(s):{reasons}")
        return self.ranked[0]


# ------------------------------------------------------------------------------------------
# Accounting a plan
# ------------------------------------------------------------------------------------------


def account(node_plans: Mapping[int, NodePlan], program: ClusterProgram,
            hosts: Mapping[int, str] | None = None) -> tuple[NodeLoad, ...]:
    """Every node's launches and bytes, from the planner's instruction lists; `hosts` (node ->
    host) sorts out the bytes that cross hosts."""
    hosts = hosts or {}
    flops = {leaf.name: leaf.flops for leaf in program.leaves}
    node_plans = {node: p.decoded() for node, p in node_plans.items()}  # read five times below
    shapes: dict[tuple[int, int], int] = {}  # (node, buffer) -> its bytes (in its own dtype)
    for node, node_plan in node_plans.items():
        for ins in node_plan.instructions:
            if isinstance(ins, Allocate):
                shapes[node, ins.buffer] = math.prod(ins.shape) * ITEMSIZE[ins.dtype]
    served: dict[int, int] = dict.fromkeys(node_plans, 0)
    across: dict[int, int] = dict.fromkeys(node_plans, 0)  # bytes a node moves across hosts
    for node, node_plan in node_plans.items():
        for ins in node_plan.instructions:
            if isinstance(ins, Fetch):
                served[ins.peer] = served.get(ins.peer, 0) + shapes[node, ins.buffer]
                if hosts.get(node, "") != hosts.get(ins.peer, ""):
                    across[node] += shapes[node, ins.buffer]
                    across[ins.peer] = across.get(ins.peer, 0) + shapes[node, ins.buffer]
    dtypes = {t.name: t.dtype for t in program.tensors}
    # A buffer that launches write and nothing loads or fetches, when a peer fetches it, is a
    # partial of a split reduction (the copies of inputs that peers fetch are loaded).
    filled = {(node, ins.buffer) for node, p in node_plans.items() for ins in p.instructions
              if isinstance(ins, Load | Fetch)}
    partials = {(node, buffer) for node, p in node_plans.items() for ins in p.instructions
                if isinstance(ins, Compute) for _, buffer in ins.bindings} - filled
    return tuple(dataclasses.replace(_account_node(node, p, flops, shapes, served.get(node, 0), dtypes,
                                                   partials, hosts), host_moved=across.get(node, 0))
                 for node, p in node_plans.items())


def _region_bytes(region, dtypes: Mapping[str, str]) -> int:
    return math.prod(region.shape) * ITEMSIZE[dtypes.get(region.tensor, "f32")]


def _account_node(node: int, node_plan: NodePlan, flops: Mapping[str, int],
                  shapes: Mapping[tuple[int, int], int], served: int, dtypes: Mapping[str, str],
                  partials: set[tuple[int, int]], hosts: Mapping[int, str]) -> NodeLoad:
    launches: dict[str, list[int]] = {}
    loaded = fetched = stored = transfers = fetches = tree_fetched = tree_fetches = tree_host = 0
    got: dict[int, tuple[str, int]] = {}  # instruction id -> ("load" | "fetch", bytes)
    start: tuple[int, int] | None = None
    end_stored = 0
    units = set()
    for ins in node_plan.instructions:
        if isinstance(ins, Load):
            n = _region_bytes(ins.region, dtypes)
            loaded += n
            transfers += 1
            got[ins.id] = ("load", n)
        elif isinstance(ins, Fetch):
            n = shapes[node, ins.buffer]
            fetched += n
            fetches += 1
            got[ins.id] = ("fetch", n)
            if (ins.peer, ins.peer_buffer) in partials:
                tree_fetched += n
                tree_fetches += 1
                tree_host += n if hosts.get(node, "") != hosts.get(ins.peer, "") else 0
        elif isinstance(ins, Store):
            end_stored = _region_bytes(ins.region, dtypes)
            stored += end_stored
            transfers += 1
        elif isinstance(ins, Compute):
            entry = launches.setdefault(ins.leaf, [0, 0])
            entry[0] += 1
            entry[1] += flops.get(ins.leaf, 0)
            units.add(ins.unit)
            # The start: what the first compute that reads anything from outside waits for.
            if start is None:
                needed = [got[d] for d in ins.deps if d in got]
                if needed:
                    start = (sum(n for kind, n in needed if kind == "load"),
                             sum(n for kind, n in needed if kind == "fetch"))
    start_loaded, start_fetched = start or (0, 0)
    return NodeLoad(
        node=node, units=len(units),
        launches=tuple((leaf, c, f) for leaf, (c, f) in launches.items()),
        bytes_loaded=loaded, bytes_fetched=fetched, bytes_served=served, bytes_stored=stored,
        transfers=transfers, fetches=fetches, start_loaded=start_loaded, start_fetched=start_fetched,
        end_stored=end_stored, peak_bytes=node_plan.peak_bytes, instructions=len(node_plan.instructions),
        tree_fetched=tree_fetched, tree_fetches=tree_fetches, tree_host_fetched=tree_host)


# ------------------------------------------------------------------------------------------
# Predicting
# ------------------------------------------------------------------------------------------


def leaf_signature(leaf: Leaf) -> str:
    """A leaf's identity for its speed: its name, kernel, dims and tile values."""
    dims = ",".join(f"{k}={v}" for k, v in leaf.dims)
    tiles = ",".join(f"{k}={v}" for k, v in leaf.tile_values)
    return f"{leaf.kernel}.{leaf.name}[{dims}][{tiles}]"


def estimate_node(load: NodeLoad, figures: Figures,
                  signatures: Mapping[str, str] | None = None) -> NodeEstimate:
    signatures = signatures or {}
    compute = sum(count * figures.launch_time(leaf, signatures.get(leaf), total / count)
                  for leaf, count, total in load.launches if count)
    link_s = figures.transfer_s if figures.link_s is None else figures.link_s
    host_bw = figures.host_bw or figures.link_bw
    transfer = ((load.bytes_loaded + load.bytes_stored) / figures.storage_bw
                + (load.bytes_fetched + load.bytes_served - load.host_moved) / figures.link_bw
                + load.host_moved / host_bw + load.transfers * figures.transfer_s + load.fetches * link_s)
    fixed = load.instructions * figures.instruction_s
    if not load.launches:
        return NodeEstimate(load.node, 0.0, transfer, 0.0, 0.0, transfer + fixed)
    start = load.start_loaded / figures.storage_bw + load.start_fetched / figures.link_bw
    start += max(figures.transfer_s if load.start_loaded else 0.0, link_s if load.start_fetched else 0.0)
    end = load.end_stored / figures.storage_bw + (figures.transfer_s if load.end_stored else 0.0)
    end += ((load.tree_fetched - load.tree_host_fetched) / figures.link_bw + load.tree_host_fetched / host_bw
            + load.tree_fetches * link_s)  # after the shares' compute
    middle = max(0.0, transfer - start - end)
    total = start + compute + middle - figures.overlap * min(compute, middle) + end + fixed
    return NodeEstimate(load.node, compute, transfer, start, end, total)


def predict(loads: Sequence[NodeLoad], figures: Figures,
            signatures: Mapping[str, str] | None = None) -> Prediction:
    """`signatures`: each leaf name's `leaf_signature`, to find measured launch times."""
    estimates = tuple(estimate_node(load, figures, signatures) for load in loads)
    busiest = max(estimates, key=lambda e: e.total_s)
    return Prediction(figures.job_s + busiest.total_s, busiest, estimates)


# ------------------------------------------------------------------------------------------
# Candidates: compile, plan, prune, predict, rank
# ------------------------------------------------------------------------------------------


def search_space(kernel: ir.Kernel, pinned: Mapping[str, int] | None = None) -> list[dict[str, int]]:
    """Every @cluster combination (first values first); a pinned name takes only its pinned
    value, which may lie outside its search space."""
    from compiler.cluster.build import cluster_space

    return cluster_space(kernel, dict(pinned or {}))


def split_space(kernel: ir.Kernel, nodes: int, pinned: SplitRequest | None = None,
                hosts: tuple[str, ...] = ()) -> list[SplitRequest | None]:
    """The splits to try: the pinned one; else, for a cluster loop of a combinable form, no split
    then 2 to `nodes` shares by a flat and (from 3 shares, where it differs) a binary tree, and
    where the nodes span several hosts a share per node by a tree by hosts."""
    from compiler.cluster.build import analyze_cluster

    if pinned is not None:
        return [pinned]
    if analyze_cluster(kernel).acc is None:
        return [None]
    out = [None] + [SplitRequest(s, shape) for s in range(2, nodes + 1)
                    for shape in ("flat", "binary") if shape == "flat" or s > 2]
    counts = list(Counter(hosts[:nodes]).values())  # nodes per host, hosts in order of first node
    if len(counts) > 1:
        out.append(SplitRequest(nodes, "hosts", tuple(counts)))
    return out


def evaluate(kernel: ir.Kernel, dims: Mapping[str, int], figures: Figures,
             pinned: Mapping[str, int] | None = None,
             tile_values: Mapping[str, int] | None = None,
             split: SplitRequest | None = None) -> list[Candidate]:
    """Every combination and split, compiled, planned, pruned and (where kept) predicted. The splits
    of a combination are tried only where its unsplit units do not share out evenly over the nodes
    (fewer units than nodes, say): with a whole number of units per node, a split only adds merges
    and transfers to the same compute, and trying it would multiply the tuner's work."""
    from scheduler.jobs.prepare import compile_program

    out: list[Candidate] = []
    splits = split_space(kernel, figures.nodes, split, figures.hosts)
    for values in search_space(kernel, pinned):
        key = tuple(values.items())
        for request in splits:
            try:
                program = compile_program(kernel, dict(dims), values, tile_values, request)
            except UserError as err:  # CompileError is a UserError: the compiler's reason, one line
                message = getattr(err, "message", None) or str(err)
                out.append(Candidate(key, dropped=message.splitlines()[0], order=len(out), split=request))
                continue
            out.append(evaluate_program(program, figures, len(out), request))
            if request is None and split is None and len(program.units) % figures.nodes == 0:
                break  # every node gets as many units: no split of these values is tried
    return out


def evaluate_program(program: ClusterProgram, figures: Figures, order: int = 0,
                     split: SplitRequest | None = None) -> Candidate:
    """One compiled combination: planned over `figures.nodes` nodes, pruned, predicted."""
    from scheduler.planning.planner import NodeFigure, plan

    key = tuple(program.cluster_values)
    units = len(program.units)
    shares = split.shares if split is not None else 1
    idle = None
    if units * shares < figures.nodes:
        pieces = f"{units} super-tile(s)" + (f" of {shares} shares" if shares > 1 else "")
        idle = f"{pieces} for {figures.nodes} nodes: {figures.nodes - units * shares} node(s) would get none"
    uris = {t.name: f"file:///{t.name}.npy" for t in program.tensors}  # the model never reads them
    hosts = dict(enumerate(figures.hosts))
    result = plan(program, [NodeFigure(n, 0, hosts.get(n, "")) for n in range(figures.nodes)], uris)
    loads = account(result.node_plans, program, hosts)
    if figures.vram_bytes:
        worst = max(loads, key=lambda load: load.peak_bytes)
        if worst.peak_bytes > figures.vram_bytes:
            return Candidate(key, loads=loads, units=units, order=order, split=split,
                             dropped=f"node {worst.node} needs {format_bytes(worst.peak_bytes)} at its peak, "
                                     f"more than its {format_bytes(figures.vram_bytes)} of memory")
    signatures = {leaf.name: leaf_signature(leaf) for leaf in program.leaves}
    return Candidate(key, predict(loads, figures, signatures), loads, units=units, order=order, idle=idle,
                     split=split)


def rank(candidates: Sequence[Candidate], figures: Figures,
         pinned: Mapping[str, int] | None = None) -> Ranking:
    # A combination that leaves a node idle is dropped when another keeps every node busy; when
    # none can (a problem smaller than nodes x the smallest super-tile) they are ranked, so that
    # every problem size runs under --autotune too.
    fits = [c for c in candidates if c.dropped is None]
    if any(c.idle is None for c in fits):
        candidates = [dataclasses.replace(c, dropped=c.idle) if c.dropped is None and c.idle else c
                      for c in candidates]
        fits = [c for c in candidates if c.dropped is None]
    kept = sorted(fits, key=lambda c: (c.prediction.total_s, c.order))
    dropped = tuple(c for c in candidates if c.dropped is not None)
    return Ranking(tuple(kept), dropped, figures, tuple((pinned or {}).items()))


def tune(kernel: ir.Kernel, dims: Mapping[str, int], figures: Figures,
         pinned: Mapping[str, int] | None = None, tile_values: Mapping[str, int] | None = None,
         split: SplitRequest | None = None) -> Ranking:
    """The whole baseline: evaluate every combination (and split; `split` pins one) and rank them."""
    if figures.nodes < 1:
        raise UserError("--nodes must be at least 1")
    return rank(evaluate(kernel, dims, figures, pinned, tile_values, split), figures, pinned)


def format_bytes(n: float) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{int(n)} B"


def format_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"
