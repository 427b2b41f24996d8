"""A model of a split reduction's time, for choosing the share count and the tree shape.

Pure: figures in, predictions out. One unit's cluster loop of `chunks` chunks split over S shares
(compiler/cluster/tree.py) on S nodes:

    compute    the largest share's chunks (shares differ by at most one) times one chunk's step;
    tree       round by round (tree.py's rounds), each round as long as its slowest merge: one
               transfer of a partial (a fixed cost plus its bytes over the link between the two
               shares' hosts) and one merge launch;
    finish     the softmax's store from the root's partial (0 for a sum).

The figures are those the tuner already takes (scheduler/tuner.py Figures: a node's flops and
launch cost, link bandwidth and per-transfer cost), plus the bandwidth between hosts for a
cluster of several hosts. The model counts what a split adds, transfers and merges, so that it
can say when splitting does not pay: with S = 1 there is no tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cluster.tree import SHAPES, SplitRequest, share_chunks, tree_rounds


@dataclass(frozen=True)
class SplitFigures:
    chunk_s: float  # one step launch (one chunk) on one node
    merge_s: float  # one merge launch
    partial_bytes: int  # one share's partial (a sum: the output's region; softmax: m, l and acc)
    link_bw: float  # bytes/s between two nodes of one host
    transfer_s: float  # fixed cost of one transfer
    host_bw: float = 0.0  # bytes/s between hosts (0: as link_bw)
    finish_s: float = 0.0  # the softmax's finish launch


@dataclass(frozen=True)
class SplitPrediction:
    request: SplitRequest
    compute_s: float
    tree_s: float  # the rounds of merges, transfers included
    total_s: float
    transfers: int  # partials moved between nodes
    host_transfers: int  # of which between hosts


def _host_of(request: SplitRequest, node_hosts: tuple[int, ...]) -> list[int]:
    """The host of each share: shares run on the first S nodes, in order."""
    if request.shape == "hosts":
        return [h for h, n in enumerate(request.hosts) for _ in range(n)]
    return list(node_hosts[: request.shares]) if node_hosts else [0] * request.shares


def predict(request: SplitRequest, chunks: int, figures: SplitFigures,
            node_hosts: tuple[int, ...] = ()) -> SplitPrediction:
    """The time of one unit split as `request`; `node_hosts[i]` is node i's host (default: one)."""
    hosts = _host_of(request, node_hosts)
    compute = max(len(r) for r in share_chunks(chunks, request.shares)) * figures.chunk_s
    tree = 0.0
    transfers = host_transfers = 0
    for merges in tree_rounds(request):
        slowest = 0.0
        for into, source in merges:
            across = hosts[into] != hosts[source]
            bw = (figures.host_bw or figures.link_bw) if across else figures.link_bw
            slowest = max(slowest, figures.transfer_s + figures.partial_bytes / bw + figures.merge_s)
            transfers += 1
            host_transfers += across
        tree += slowest
    total = compute + tree + figures.finish_s
    return SplitPrediction(request, compute, tree, total, transfers, host_transfers)


def _requests(nodes: int, chunks: int, node_hosts: tuple[int, ...]):
    for shares in range(1, min(nodes, chunks) + 1):
        for shape in SHAPES:
            if shape == "hosts":
                on = node_hosts[:shares] if node_hosts else (0,) * shares
                counts = tuple(on.count(h) for h in sorted(set(on), key=on.index))
                if list(on) != sorted(on, key=on.index) or len(counts) < 2:
                    continue  # a tree by hosts wants each host's shares contiguous, and two hosts
                yield SplitRequest(shares, shape, counts)
            elif shares > 1 or shape == "flat":
                yield SplitRequest(shares, shape)


def choose_split(chunks: int, nodes: int, figures: SplitFigures,
                 node_hosts: tuple[int, ...] = ()) -> list[SplitPrediction]:
    """Every share count (1 to the nodes, at most one share per chunk) and tree shape, fastest
    first; among equal times the fewer shares, then flat before binary before hosts."""
    if chunks < 1 or nodes < 1:
        raise ValueError("a split needs at least one chunk and one node")
    predictions = [predict(r, chunks, figures, node_hosts) for r in _requests(nodes, chunks, node_hosts)]
    order = {s: i for i, s in enumerate(SHAPES)}
    return sorted(predictions, key=lambda p: (round(p.total_s, 12), p.request.shares, order[p.request.shape]))



def figures_of(program, leaf_flops: float, launch_s: float, link_bw: float, transfer_s: float,
               host_bw: float = 0.0) -> SplitFigures:
    """The model's figures for a program compiled with a split (so that it has its merge leaf):
    each launch costs its leaf's flops at `leaf_flops` plus `launch_s`; a partial is its regions'
    f32 elements (scheduler/tuner.py's figures, from the command line or calibration)."""
    flops = {leaf.name.split("@")[0]: leaf.flops for leaf in program.leaves}
    launch = {name: launch_s + f / leaf_flops for name, f in flops.items()}
    unit = program.units[0]
    merge = next(la for la in unit.launches if la.leaf.split("@")[0] == "merge")
    partial = sum(region.size for _, region in merge.writes) * 4
    return SplitFigures(chunk_s=launch["step"], merge_s=launch["merge"], partial_bytes=partial,
                        link_bw=link_bw, transfer_s=transfer_s, host_bw=host_bw,
                        finish_s=launch.get("finish", 0.0))
