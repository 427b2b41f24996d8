"""TEST FIXTURE: fabricates realistic phobos-trace/1 traces without running a scheduler.

The traces follow the scheduler's documented rules (placement round robin by row-major super-tile
index, one loader per input region and peers fetching from it, a buffer freed after its last use,
re-planning a dead node's unstored super-tiles onto the others from storage), with instruction
times from a crude model of one I/O queue and one compute queue per node. They exercise the
report, not the scheduler: real runs are tested separately where the scheduler can produce them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

STORAGE_BPS = 2.0e9  # bytes per second, storage -> node
LINK_BPS = 8.0e9  # bytes per second, node -> node
FLOPS = 2.0e12  # per node
TINY = 2e-6  # allocate / free


@dataclass
class LaunchSpec:
    leaf: str
    reads: list[tuple[str, tuple[int, ...], tuple[int, ...]]]  # tensor, start, shape
    flops: int


@dataclass
class UnitSpec:
    coord: tuple[int, ...]
    output: tuple[str, tuple[int, ...], tuple[int, ...]]
    launches: list[LaunchSpec]


@dataclass
class Example:
    kernel: str
    dims: dict
    scalars: dict
    cluster_values: dict
    tile_values: dict
    super_grid: list
    tensors: list
    leaves: list
    units: list[UnitSpec] = field(default_factory=list)


def _add(units: int) -> Example:
    block = 1048576
    n = block * units
    ex = Example(
        kernel="add", dims={"N": n}, scalars={}, cluster_values={"BLOCK": block}, tile_values={"BLOCK": 16},
        super_grid=[units],
        tensors=[{"name": t, "dtype": "f32", "shape": [n], "role": r}
                 for t, r in (("a", "input"), ("b", "input"), ("c", "output"))],
        leaves=[{"name": "main", "grid": [block // 16], "threads": 256, "dims": {"N": block}}],
    )
    for i in range(units):
        region = ((i * block,), (block,))
        launch = LaunchSpec("main", [("a", *region), ("b", *region)], block)
        ex.units.append(UnitSpec((i,), ("c", *region), [launch]))
    return ex


def _matmul(tiles: int) -> Example:
    t = 4096
    m = n = k = t * tiles
    ex = Example(
        kernel="matmul", dims={"M": m, "N": n, "K": k}, scalars={"alpha": 1.0, "beta": 0.5},
        cluster_values={"TILE_M": t, "TILE_N": t, "TILE_K": t},
        tile_values={"TILE_M": 32, "TILE_N": 32, "TILE_K": 4}, super_grid=[tiles, tiles],
        tensors=[{"name": "A", "dtype": "f32", "shape": [m, k], "role": "input"},
                 {"name": "B", "dtype": "f32", "shape": [k, n], "role": "input"},
                 {"name": "C", "dtype": "f32", "shape": [m, n], "role": "inout"}],
        leaves=[
            {"name": "init", "grid": [t // 32, t // 32], "threads": 256, "dims": {"M": t, "N": t}},
            {"name": "step", "grid": [t // 32, t // 32], "threads": 256, "dims": {"M": t, "N": t, "K": t}},
        ],
    )
    for pm, pn in itertools.product(range(tiles), range(tiles)):
        c = ("C", (pm * t, pn * t), (t, t))
        launches = [LaunchSpec("init", [c], t * t)]
        for kt in range(tiles):
            reads = [("A", (pm * t, kt * t), (t, t)), ("B", (kt * t, pn * t), (t, t))]
            launches.append(LaunchSpec("step", reads, 2 * t * t * t))
        ex.units.append(UnitSpec((pm, pn), c, launches))
    return ex


def _flash_attention(blocks: int) -> Example:
    br, d = 1024, 64
    nq = nk = br * blocks
    ex = Example(
        kernel="flash_attention", dims={"Nq": nq, "Nk": nk, "D": d}, scalars={"scale": 0.125},
        cluster_values={"BR": br}, tile_values={"D": 64, "BR": 32, "BC": 32}, super_grid=[blocks],
        tensors=[{"name": "Q", "dtype": "f32", "shape": [nq, d], "role": "input"},
                 {"name": "K", "dtype": "f32", "shape": [nk, d], "role": "input"},
                 {"name": "V", "dtype": "f32", "shape": [nk, d], "role": "input"},
                 {"name": "O", "dtype": "f32", "shape": [nq, d], "role": "output"}],
        leaves=[{"name": "main", "grid": [br // 32], "threads": 256, "dims": {"Nq": br, "Nk": nk, "D": d}}],
    )
    for i in range(blocks):
        q = ("Q", (i * br, 0), (br, d))
        whole = [("K", (0, 0), (nk, d)), ("V", (0, 0), (nk, d))]
        launch = LaunchSpec("main", [q, *whole], 4 * br * nk * d)
        ex.units.append(UnitSpec((i,), ("O", (i * br, 0), (br, d)), [launch]))
    return ex


EXAMPLE_BUILDERS = {"add": _add, "matmul": _matmul, "flash_attention": _flash_attention}
DEFAULT_SIZE = {"add": 8, "matmul": 3, "flash_attention": 16}


def _nbytes(shape) -> int:
    n = 4
    for s in shape:
        n *= s
    return n


class _Sim:
    """Lays out one generation's instructions on nodes with an I/O clock and a compute clock."""

    def __init__(self, events: list, start_ids: dict[int, int]):
        self.events = events
        self.next_id = start_ids
        self.io: dict[int, float] = {}
        self.compute: dict[int, float] = {}

    def emit(self, node, kind, start, end, nbytes=0, peer=None, unit=None, leaf=None, generation=0,
             replanned=False):
        self.next_id[node] = self.next_id.get(node, 0) + 1
        self.events.append({"node": node, "id": self.next_id[node], "kind": kind, "start": start, "end": end,
                            "bytes": nbytes, "peer": peer, "unit": unit, "leaf": leaf,
                            "generation": generation, "replanned": replanned, "ok": True})
        return end

    def run_units(self, ex: Example, placed: list[tuple[int, int]], t0: float, generation: int,
                  replanned: bool):
        """placed: (unit index, node). Returns {unit: store end time}."""
        loader: dict[tuple, tuple[int, float]] = {}  # region -> (node, ready time)
        done = {}
        for u, node in placed:
            spec = ex.units[u]
            io = max(self.io.get(node, t0), t0)
            comp = max(self.compute.get(node, t0), t0)
            ready = io
            for launch in spec.launches:
                inputs_ready = io
                for tensor, start, shape in launch.reads:
                    key = (tensor, start, shape)
                    nbytes = _nbytes(shape)
                    self.emit(node, "allocate", io, io + TINY, unit=u, generation=generation,
                              replanned=replanned)
                    io += TINY
                    owner = loader.get(key)
                    if owner is None or owner[0] == node or tensor == spec.output[0]:
                        end = io + nbytes / STORAGE_BPS
                        self.emit(node, "load", io, end, nbytes, unit=u, generation=generation,
                                  replanned=replanned)
                        loader.setdefault(key, (node, end))
                    else:
                        begin = max(io, owner[1])
                        end = begin + nbytes / LINK_BPS
                        self.emit(node, "fetch", begin, end, nbytes, peer=owner[0], unit=u,
                                  generation=generation, replanned=replanned)
                    io = end
                    inputs_ready = max(inputs_ready, end)
                begin = max(comp, inputs_ready)
                comp = self.emit(node, "compute", begin, begin + launch.flops / FLOPS, unit=u,
                                 leaf=launch.leaf, generation=generation, replanned=replanned)
                ready = comp
            out_bytes = _nbytes(spec.output[2])
            begin = max(io, ready)
            io = self.emit(node, "store", begin, begin + out_bytes / STORAGE_BPS, out_bytes, unit=u,
                           generation=generation, replanned=replanned)
            self.emit(node, "free", io, io + TINY, unit=u, generation=generation, replanned=replanned)
            done[u] = io
            self.io[node], self.compute[node] = io, comp
        return done


def make_trace(example: str = "add", nodes: int = 2, size: int | None = None, fail_node: int | None = None,
               fail_fraction: float = 0.45, heartbeat_timeout: float = 0.05) -> dict:
    """A trace of `example` run on `nodes` CPU nodes; with `fail_node`, that node dies part-way.

    size: super-tiles (add, flash_attention) or super-tiles per side (matmul).
    """
    ex = EXAMPLE_BUILDERS[example](size or DEFAULT_SIZE[example])
    events: list[dict] = []
    sim = _Sim(events, {})
    placed = [(u, u % nodes) for u in range(len(ex.units))]
    stored = sim.run_units(ex, placed, 0.0, 0, False)
    units = [{"unit": u, "coord": list(ex.units[u].coord), "node": n, "generation": 0,
              "outputs": [{"tensor": ex.units[u].output[0], "start": list(ex.units[u].output[1]),
                           "shape": list(ex.units[u].output[2])}]} for u, n in placed]
    failures = []
    if fail_node is not None:
        end = max(e["end"] for e in events)
        died = end * fail_fraction
        detected = died + heartbeat_timeout
        kept = []
        for e in events:
            if e["node"] == fail_node and e["start"] >= died:
                continue  # never reported: the node was gone
            if e["node"] == fail_node and e["end"] > died:
                e["end"], e["ok"] = died, False
            if e["kind"] == "fetch" and e["peer"] == fail_node and e["end"] > died:
                e["end"], e["ok"] = max(e["start"], min(e["end"], detected)), False
            kept.append(e)
        events[:] = kept
        failures.append({"node": fail_node, "time": detected,
                         "reason": f"missed heartbeats for {heartbeat_timeout:g} s"})
        lost = [u for u, n in placed if n == fail_node and stored[u] > died]
        alive = [n for n in range(nodes) if n != fail_node]
        for n in alive:
            sim.io[n] = max(sim.io.get(n, 0.0), detected)
        replan = [(u, alive[i % len(alive)]) for i, u in enumerate(lost)]
        sim.run_units(ex, replan, detected, 1, True)
        for u, n in replan:
            units.append({**units[u], "node": n, "generation": 1, "replanned": True})
    # A pod reports each tile it served to a peer as a "serve" event (start = end, id = its buffer).
    for e in [e for e in events if e["kind"] == "fetch" and e["ok"]]:
        events.append({"node": e["peer"], "id": 1000 + e["id"], "kind": "serve", "start": e["end"],
                       "end": e["end"], "bytes": e["bytes"], "peer": e["node"], "unit": None, "leaf": None,
                       "generation": e["generation"], "replanned": e["replanned"], "ok": True})
    events.sort(key=lambda e: (e["start"], e["node"]))
    wall = max(e["end"] for e in events)
    summary_nodes = []
    for n in range(nodes):
        mine = [e for e in events if e["node"] == n and e["kind"] != "serve"]
        summary_nodes.append({
            "node": n, "instructions": len(mine),
            "bytes_loaded": sum(e["bytes"] for e in mine if e["kind"] == "load"),
            "bytes_fetched": sum(e["bytes"] for e in mine if e["kind"] == "fetch"),
            "bytes_served": sum(e["bytes"] for e in events if e["kind"] == "serve" and e["node"] == n),
            "bytes_stored": sum(e["bytes"] for e in mine if e["kind"] == "store"),
            "compute_s": sum(e["end"] - e["start"] for e in mine if e["kind"] == "compute"),
        })
    return {
        "format": "phobos-trace/1",
        "job": {"kernel": ex.kernel, "source": (EXAMPLES / f"{example}.phk").read_text(), "dims": ex.dims,
                "scalars": ex.scalars, "cluster_values": ex.cluster_values, "tile_values": ex.tile_values,
                "super_grid": ex.super_grid, "tensors": ex.tensors, "leaves": ex.leaves},
        "nodes": [{"node": n, "address": f"127.0.0.1:{41000 + n}", "backend": "cpu", "device": "cpu",
                   "vram_bytes": 8 << 30} for n in range(nodes)],
        "units": units,
        "events": events,
        "failures": failures,
        "summary": {"wall_s": wall, "nodes": summary_nodes},
    }


if __name__ == "__main__":  # handy for looking at a page by hand: python tests/visualizer/fake_trace.py
    import json
    import sys

    name = sys.argv[1] if len(sys.argv) > 1 else "matmul"
    fail = int(sys.argv[2]) if len(sys.argv) > 2 else None
    json.dump(make_trace(name, nodes=3, fail_node=fail), sys.stdout)
