"""The job's record: the --trace JSON (format phobos-trace/1, read by the visualizer) and the
summary printed at the end (wall time; per node instructions, bytes moved, compute time).

The recorder only collects; `finish` shapes the JSON, and `summary_text` renders it for people.
Times are seconds since the job started (pods report Unix time; hosts are assumed NTP-synced).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from common.atomic import write_atomically
from scheduler.running.cluster_messages import InstructionInfo
from schemas.instructions import KIND_NAMES

TRACE_FORMAT = "phobos-trace/1"


@dataclass(frozen=True)
class NodeRecord:
    node: int
    address: str
    backend: str
    device: str
    vram_bytes: int


class TraceRecorder:
    def __init__(self, prepared):
        self.prepared = prepared
        self.nodes: list[NodeRecord] = []
        self.units: list[dict] = []
        self.events: list[dict] = []
        self.planned: set[tuple[int, int]] = set()  # (generation, node) already recorded
        # instruction id (unique in the job) -> its kind and unit: the scheduler's own record
        # (ClusterState.instruction_info), read, not made again (a million units' plans hold ten
        # million instructions: a second pass over them cost seconds and a tuple key each)
        self.described: Mapping[int, InstructionInfo] = {}

    def add_node(self, record: NodeRecord) -> None:
        self.nodes.append(record)

    def add_plan(self, plan, node: int, described: Mapping[int, InstructionInfo]) -> None:
        """Record `node`'s part of `plan`; `described` describes its instructions (and keeps
        describing every later plan's: the trace reads it when their events come)."""
        self.described = described
        if (plan.generation, node) in self.planned:
            return
        self.planned.add((plan.generation, node))
        mine = sorted(index for index, placed in plan.placement.items() if placed == node)
        # from the units' columns: a compiled program's Unit objects are not made for the trace
        for index, (coord, outputs) in zip(mine, self.prepared.program.units.unit_outputs(mine), strict=True):
            self.units.append({
                "unit": index, "coord": list(coord), "node": node, "generation": plan.generation,
                "outputs": [{"tensor": t, "start": start, "shape": shape} for t, start, shape in outputs],
            })

    def add_event(self, node: int, generation: int, event, t0: float, accepted: bool = True) -> None:
        info = self.described.get(event.id) if event.unit is None else None
        unit = event.unit if info is None else info.unit
        self.events.append({
            "node": node, "id": event.id, "kind": event.kind,
            "start": event.start - t0, "end": event.end - t0, "bytes": event.bytes,
            "peer": event.peer, "unit": unit, "leaf": event.leaf, "generation": generation,
            "replanned": generation > 1, "ok": event.ok and accepted,
            **({"copy_s": event.copy_s} if event.copy_s else {}),
            **({"message": event.message} if event.message else {}),
        })

    def finish(self, state, wall_s: float) -> dict:
        program = self.prepared.program
        job = self.prepared.job
        return {
            "format": TRACE_FORMAT,
            "job": {
                "id": self.prepared.job_id,
                "kernel": program.kernel,
                "source": job.kernel_source or program.source,  # the whole file: comments too
                "dims": dict(program.dims),
                "scalars": dict(self.prepared.scalars),
                "cluster_values": dict(program.cluster_values),
                "tile_values": dict(program.tile_values),
                "super_grid": list(program.super_grid),
                "tensors": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "role": t.role,
                             "uri": dict(job.tensors).get(t.name, "")} for t in program.tensors],
                "leaves": [{"name": leaf.name, "grid": list(leaf.grid), "threads": leaf.threads,
                            "dims": dict(leaf.dims)} for leaf in program.leaves],
                "reduction": _reduction(program.reduction),
            },
            "nodes": [{"node": n.node, "address": n.address, "backend": n.backend, "device": n.device,
                       "vram_bytes": n.vram_bytes} for n in self.nodes],
            "units": self.units,
            "events": sorted(self.events, key=lambda e: (e["start"], e["node"])),
            "failures": [{"node": f.node, "time": f.time, "reason": f.reason}
                         for f in (state.failures if state is not None else [])],
            # each re-plan after a death: the units it moved, from which node to which
            "replans": [{"generation": r.generation, "time": r.time, "cause": r.cause,
                         "units": [{"unit": u, "from": a, "to": b} for u, a, b in r.moved]}
                        for r in (state.replans if state is not None else [])],
            "summary": summarize(self.events, [n.node for n in self.nodes], wall_s),
        }


def summarize(events: list[dict], nodes: list[int], wall_s: float) -> dict:
    per = {n: {"node": n, "instructions": 0, "bytes_loaded": 0, "bytes_fetched": 0, "bytes_served": 0,
               "bytes_stored": 0, "compute_s": 0.0} for n in nodes}
    for e in events:
        row = per.get(e["node"])
        if row is None:
            continue
        kind = e["kind"]
        if kind == "serve":
            row["bytes_served"] += e["bytes"]
            continue
        if kind in KIND_NAMES:
            row["instructions"] += 1
        if kind == "load":
            row["bytes_loaded"] += e["bytes"]
        elif kind == "fetch":
            row["bytes_fetched"] += e["bytes"]
        elif kind == "store":
            row["bytes_stored"] += e["bytes"]
        elif kind == "compute":
            row["compute_s"] += max(0.0, e["end"] - e["start"])
    return {"wall_s": wall_s, "nodes": [per[n] for n in nodes]}


def _reduction(reduction) -> dict | None:
    """A split cluster loop, for the trace (None: not split)."""
    if reduction is None or reduction.shares < 2:
        return None
    return {"form": reduction.form, "shares": reduction.shares, "tree": reduction.tree,
            "hosts": list(reduction.hosts)}


def summary_text(trace: dict, ok: bool, reason: str = "") -> str:
    s = trace["summary"]
    job = trace["job"]
    head = "succeeded" if ok else f"FAILED: {reason}"
    units = len({u["unit"] for u in trace["units"]})
    nodes = len(trace["nodes"])
    split = job.get("reduction")
    each = f", each split over {split['shares']} shares ({split['tree']} tree)" if split else ""
    lines = [f"job {job['id']} ({job['kernel']}, {units} unit{'s' * (units != 1)}{each} on {nodes} "
             f"node{'s' * (nodes != 1)}) {head}",
             f"wall time {s['wall_s']:.3f} s"]
    header = f"{'node':>4}  {'backend':<8} {'instr':>7} {'loaded':>10} {'fetched':>10} {'served':>10} " \
             f"{'stored':>10} {'compute s':>10}"
    lines.append(header)
    backends = {n["node"]: n["backend"] for n in trace["nodes"]}
    for row in s["nodes"]:
        lines.append(f"{row['node']:>4}  {backends.get(row['node'], '?'):<8} {row['instructions']:>7} "
                     f"{_bytes(row['bytes_loaded']):>10} {_bytes(row['bytes_fetched']):>10} "
                     f"{_bytes(row['bytes_served']):>10} {_bytes(row['bytes_stored']):>10} "
                     f"{row['compute_s']:>10.3f}")
    if trace.get("phases"):
        from scheduler.tracing.phases import phases_text

        lines.append(phases_text(trace["phases"]))
    addresses = {n["node"]: n.get("address") for n in trace["nodes"]}
    for f in trace["failures"]:
        name = f"node {f['node']}" + (f" ({addresses[f['node']]})" if addresses.get(f["node"]) else "")
        lines.append(f"{name} lost at {f['time']:.3f} s: {f['reason']}")
    for r in trace.get("replans", ()):
        moved = {}
        for u in r["units"]:
            moved.setdefault(u["from"], []).append(u["unit"])
        which = "; ".join(f"from node {n}: {_ranges(units)}" for n, units in sorted(moved.items())) or "none"
        lines.append(f"re-planned {len(r['units'])} unit(s) at {r['time']:.3f} s (generation "
                     f"{r['generation']}; {r['cause']}): {which}")
    return "\n".join(lines)


def _ranges(units: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out: list[tuple[int, int]] = []
    for u in sorted(units):
        if out and out[-1][1] == u - 1:
            out[-1] = (out[-1][0], u)
        else:
            out.append((u, u))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def _bytes(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def write_trace(trace: dict, path: Path) -> None:
    write_atomically(path, json.dumps(trace, indent=1), label=f"--trace {path}")
