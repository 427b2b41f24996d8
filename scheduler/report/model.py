"""What the run report shows, derived from a trace: pure functions, no I/O, no HTML.

The scheduler writes a trace in the "phobos-trace/1" format (docs/runtime.md, docs/visualizer.md).
`build_model(trace)` checks it and derives everything the page draws: the nodes and their
failures, the events in compact columns (a 10,000-instruction job must not become 10,000 JSON
objects the browser has to walk), the super-tile grid of every output tensor with the node that
finally owns each super-tile, the matrix of bytes moved between storage and nodes, and the
summary figures. The browser script only lays these out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from common.errors import UserError
from scheduler.tracing.tracefile import TRACE_FORMAT
from schemas.instructions import KIND_NAMES

# Not an instruction: a pod reports "serve" (start = end, id = its buffer, peer = the fetching node)
# each time a peer fetched one of its tiles.
KINDS = (*KIND_NAMES, "serve")
STORAGE = "storage"
# A strip of super-tiles longer than this is wrapped (at least this wide) so that it fits on screen.
WRAP_AT = 32


class TraceError(UserError):
    """The trace file is not a phobos trace the report can read."""


@dataclass(frozen=True)
class Event:
    node: int
    id: int
    kind: str
    start: float
    end: float
    bytes: int
    peer: int | None
    unit: int | None
    leaf: str | None
    generation: int
    replanned: bool
    ok: bool
    message: str | None = None  # why an instruction failed, when the pod said


# --------------------------------------------------------------------------------------------
# Checking the trace
# --------------------------------------------------------------------------------------------


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise TraceError(message)


def _number(value, index: int, name: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise TraceError(f"trace: events[{index}].{name} must be a finite number, got {value!r}")


def _int_or_none(value, index: int, name: str) -> int | None:
    # Messages are only formatted on failure: a trace may hold hundreds of thousands of events.
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TraceError(f"trace: events[{index}].{name} must be an integer, got {value!r}")


def parse_event(raw: dict, index: int) -> Event | None:
    """The event, or None for a kind this report does not know (a newer scheduler's): skipped."""
    _require(isinstance(raw, dict), f"trace: events[{index}] must be an object")
    kind = raw.get("kind")
    if kind not in KINDS:
        _require(isinstance(kind, str), f"trace: events[{index}].kind must be a string, got {kind!r}")
        return None
    node = _int_or_none(raw.get("node"), index, "node")
    if node is None:
        raise TraceError(f"trace: events[{index}].node is missing")
    start = _number(raw.get("start"), index, "start")
    end = _number(raw.get("end"), index, "end")
    if end < start:
        raise TraceError(f"trace: events[{index}] ends ({end}) before it starts ({start})")
    leaf = raw.get("leaf")
    return Event(
        node=node,
        id=_int_or_none(raw.get("id", index), index, "id") or 0,
        kind=kind,
        start=start,
        end=end,
        bytes=_int_or_none(raw.get("bytes"), index, "bytes") or 0,
        peer=_int_or_none(raw.get("peer"), index, "peer"),
        unit=_int_or_none(raw.get("unit"), index, "unit"),
        leaf=str(leaf) if leaf is not None else None,
        generation=_int_or_none(raw.get("generation"), index, "generation") or 0,
        replanned=bool(raw.get("replanned", False)),
        ok=bool(raw.get("ok", True)),
        message=str(raw["message"]) if raw.get("message") else None,
    )


def parse_events(trace: dict) -> tuple[list[Event], int]:
    """The events the report knows, and how many of unknown kinds were skipped."""
    parsed = [parse_event(raw, i) for i, raw in enumerate(trace.get("events", []))]
    known = [e for e in parsed if e is not None]
    return known, len(parsed) - len(known)


def check_trace(trace) -> None:
    _require(isinstance(trace, dict), "trace: the file must hold a JSON object")
    fmt = trace.get("format")
    _require(fmt == TRACE_FORMAT, f"trace: format must be {TRACE_FORMAT!r}, got {fmt!r}")
    _require(isinstance(trace.get("job"), dict), "trace: 'job' must be an object")
    for key in ("nodes", "units", "events", "failures"):
        _require(isinstance(trace.get(key, []), list), f"trace: '{key}' must be a list")


# --------------------------------------------------------------------------------------------
# Nodes, failures, summary, bytes
# --------------------------------------------------------------------------------------------


def derive_nodes(trace: dict, events: list[Event]) -> list[dict]:
    """Every node the trace names, in node order, with the time and reason of its failure."""
    info = {n["node"]: n for n in trace.get("nodes", []) if isinstance(n, dict) and "node" in n}
    ids = set(info) | {e.node for e in events} | {f.get("node") for f in trace.get("failures", [])}
    ids |= {u.get("node") for u in trace.get("units", []) if isinstance(u, dict)}
    ids.discard(None)
    failures = {}
    for f in trace.get("failures", []):
        # The first failure of a node is the one that matters: later reports repeat it.
        if f.get("node") is not None and f["node"] not in failures:
            failures[f["node"]] = f
    nodes = []
    for node in sorted(ids):
        n = info.get(node, {})
        fail = failures.get(node)
        nodes.append(
            {
                "node": node,
                "address": n.get("address", ""),
                "backend": n.get("backend", ""),
                "device": n.get("device", ""),
                "vram_bytes": n.get("vram_bytes"),
                "failed_at": float(fail["time"]) if fail and fail.get("time") is not None else None,
                "failure_reason": str(fail.get("reason", "")) if fail else None,
            }
        )
    return nodes


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of intervals: time in which at least one of them ran."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def derive_summary(trace: dict, events: list[Event], nodes: list[dict]) -> dict:
    """The trace's own summary where it has one; figures it lacks are computed from the events."""
    computed = {n["node"]: dict.fromkeys(
        ("instructions", "bytes_loaded", "bytes_fetched", "bytes_served", "bytes_stored"), 0
    ) | {"compute_s": 0.0} for n in nodes}
    # Bytes served: from the pods' own "serve" reports where the trace has them, else from the
    # fetches that peers made of each node's tiles.
    has_serves = any(e.kind == "serve" for e in events)
    for e in events:
        row = computed[e.node]
        if e.kind == "serve":
            row["bytes_served"] += e.bytes
            continue
        row["instructions"] += 1
        if e.kind == "load":
            row["bytes_loaded"] += e.bytes
        elif e.kind == "fetch":
            row["bytes_fetched"] += e.bytes
            if e.peer in computed and not has_serves:
                computed[e.peer]["bytes_served"] += e.bytes
        elif e.kind == "store":
            row["bytes_stored"] += e.bytes
        elif e.kind == "compute":
            row["compute_s"] += e.end - e.start
    # Computes may overlap on one node (several streams or threads): the busy time counts the
    # moments at least one ran, which compute_s (a sum) overcounts.
    per_node: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e.kind == "compute":
            per_node.setdefault(e.node, []).append((e.start, e.end))
    busy = {node: busy_time(spans) for node, spans in per_node.items()}
    given = trace.get("summary") or {}
    given_nodes = {n.get("node"): n for n in given.get("nodes", []) if isinstance(n, dict)}
    rows = []
    for node, figures in computed.items():
        merged = dict(figures)
        for key, value in given_nodes.get(node, {}).items():
            if key in merged and isinstance(value, (int, float)):
                merged[key] = value
        rows.append({"node": node, **merged, "compute_busy_s": busy.get(node, 0.0)})
    last_end = max((e.end for e in events), default=0.0)
    wall = given.get("wall_s")
    wall_s = float(wall) if isinstance(wall, (int, float)) else last_end
    totals = {
        key: sum(r[key] for r in rows)
        for key in ("instructions", "bytes_loaded", "bytes_fetched", "bytes_stored", "compute_s")
    }
    return {
        "wall_s": wall_s,
        "nodes": rows,
        "totals": totals,
        "events": sum(e.kind != "serve" for e in events),
        "serves": sum(e.kind == "serve" for e in events),
        "replanned_events": sum(e.replanned for e in events if e.kind != "serve"),
        "failed_events": sum(not e.ok for e in events),
        "failures": len(trace.get("failures", [])),
    }


def bytes_matrix(events: list[Event], nodes: list[dict]) -> dict:
    """Bytes moved from each source (storage, then the nodes) to each destination (nodes, storage).

    A load is storage -> node (or peer -> node when the trace names a peer), a fetch peer -> node,
    a store node -> storage. Only instructions that completed (ok) count: a failed one moved
    nothing the job kept.
    """
    ids = [n["node"] for n in nodes]
    src = [STORAGE] + ids
    dst = ids + [STORAGE]
    values = [[0] * len(dst) for _ in src]
    for e in events:
        if not e.ok:
            continue
        if e.kind in ("load", "fetch"):
            source = e.peer if e.peer is not None else STORAGE
            if source in src:
                values[src.index(source)][dst.index(e.node)] += e.bytes
        elif e.kind == "store":
            values[src.index(e.node)][dst.index(STORAGE)] += e.bytes
    return {
        "sources": [s if s == STORAGE else f"node {s}" for s in src],
        "destinations": [d if d == STORAGE else f"node {d}" for d in dst],
        "values": values,
    }


# --------------------------------------------------------------------------------------------
# Super-tile grids
# --------------------------------------------------------------------------------------------


def _layout(n_per_axis: list[int], coord: tuple[int, ...]) -> tuple[int, int]:
    """Row and column of a super-tile: the last axis across, every other axis down."""
    row = 0
    for axis in range(len(coord) - 1):
        row = row * n_per_axis[axis] + coord[axis]
    return row, coord[-1]


def _wrap(rows: int, cols: int, cells: list[dict]) -> tuple[int, int, bool]:
    """Fold a long 1-wide strip into a block, keeping row-major reading order."""
    count = rows * cols
    if rows == 1 and cols > WRAP_AT or cols == 1 and rows > WRAP_AT:
        # About twice as wide as tall, so that thousands of super-tiles still fit a panel.
        width = max(WRAP_AT, math.ceil(math.sqrt(2 * count)))
        for cell in cells:
            index = cell["col"] if rows == 1 else cell["row"]
            cell["row"], cell["col"] = divmod(index, width)
        return math.ceil(count / width), width, True
    return rows, cols, False


def super_tile_grids(trace: dict, events: list[Event]) -> list[dict]:
    """One grid per output tensor; each super-tile coloured by the node that finally owns it.

    After a failure a super-tile appears in several units (one per generation). The owner is the
    newest generation whose store completed, else the newest planned; earlier owners are kept as
    `previous` and the super-tile is marked re-planned.
    """
    tensors = {t["name"]: t for t in trace["job"].get("tensors", []) if isinstance(t, dict)}
    claims, shapes = _claims(trace, events)
    names = sorted({t for t, _ in claims}, key=lambda t: list(tensors).index(t) if t in tensors else 0)
    return [_grid(name, tensors.get(name, {}), claims, shapes) for name in names]


Key = tuple[str, tuple[int, ...]]  # (tensor, a super-tile's start)


def _claims(trace: dict, events: list[Event]) -> tuple[dict[Key, list[dict]], dict[Key, tuple[int, ...]]]:
    """Every unit's claim on each super-tile it writes, and each super-tile's shape."""
    stored = {(e.unit, e.generation) for e in events if e.kind == "store" and e.ok and e.unit is not None}
    claims: dict[Key, list[dict]] = {}
    shapes: dict[Key, tuple[int, ...]] = {}
    for u, unit in enumerate(trace.get("units", [])):
        _require(isinstance(unit, dict) and isinstance(unit.get("outputs", []), list),
                 f"trace: units[{u}] must be an object with a list of outputs")
        for out in unit.get("outputs", []):
            _require(
                isinstance(out, dict) and isinstance(out.get("tensor"), str)
                and isinstance(out.get("start"), list) and isinstance(out.get("shape"), list)
                and len(out["start"]) == len(out["shape"]) > 0,
                f"trace: units[{u}].outputs needs tensor, start and shape (one entry per axis)",
            )
            key = (out["tensor"], tuple(out["start"]))
            shapes[key] = tuple(out["shape"])
            generation = int(unit.get("generation") or 0)
            claims.setdefault(key, []).append({
                "unit": unit.get("unit"), "node": unit.get("node"), "generation": generation,
                "replanned": bool(unit.get("replanned", False)),
                "stored": (unit.get("unit"), generation) in stored, "coord": list(unit.get("coord", [])),
            })
    return claims, shapes


def _grid(name: str, info: dict, claims: dict[Key, list[dict]], shapes: dict[Key, tuple[int, ...]]) -> dict:
    keys = [k for k in claims if k[0] == name]
    rank = len(keys[0][1])
    _require(all(len(k[1]) == rank for k in keys), f"trace: outputs of tensor {name} differ in rank")
    # position of each start along each axis: the super-tile's index on that axis
    starts = [{v: i for i, v in enumerate(sorted({k[1][a] for k in keys}))} for a in range(rank)]
    n_per_axis = [len(s) for s in starts]
    cells = []
    for key in sorted(keys, key=lambda k: k[1]):
        history = sorted(claims[key], key=lambda c: (c["generation"], c["stored"]))
        done = [c for c in history if c["stored"]]
        owner = done[-1] if done else history[-1]
        coord = tuple(starts[a][key[1][a]] for a in range(rank))
        row, col = _layout(n_per_axis, coord)
        cells.append({
            "row": row, "col": col, "index": coord, "start": list(key[1]), "shape": list(shapes[key]),
            "node": owner["node"], "unit": owner["unit"], "generation": owner["generation"],
            "stored": owner["stored"], "replanned": owner["replanned"] or owner is not history[0],
            "previous": [{"node": c["node"], "unit": c["unit"], "generation": c["generation"]}
                         for c in history if c is not owner],
        })
    rows = math.prod(n_per_axis[:-1]) if rank > 1 else 1
    rows, cols, wrapped = _wrap(rows, n_per_axis[-1], cells)
    return {"tensor": name, "role": info.get("role", "output"), "dtype": info.get("dtype", ""),
            "shape": list(info.get("shape", [])), "per_axis": n_per_axis, "rows": rows, "cols": cols,
            "wrapped": wrapped, "cells": cells}


# --------------------------------------------------------------------------------------------
# The whole model
# --------------------------------------------------------------------------------------------


def single_gpu_grid(job: dict) -> dict:
    """The kernel's CTA grid on one GPU (as if @cluster were not there) at the job's dims, with
    the @autotune values the leaves used; or why it could not be worked out."""
    from compiler.frontend.binding import bind
    from compiler.frontend.load import load_text

    try:
        module = load_text(str(job.get("source", "")), filename="<trace>")
        kernel = module.kernel(job.get("kernel") or None)
        tile_values = dict(job.get("tile_values", {})) or None
        binding = bind(kernel, dict(job.get("dims", {})), tile_values=tile_values)
    except (UserError, KeyError, TypeError, ValueError) as err:  # CompileError is a UserError
        return {"grid": None, "why_not": str(err).splitlines()[0] if str(err) else type(err).__name__}
    return {"grid": list(binding.grid), "ctas": math.prod(binding.grid), "why_not": None}


def event_columns(events: list[Event]) -> dict:
    """The events as parallel arrays (one per field), sorted by start: compact for the page."""
    ordered = sorted(events, key=lambda e: (e.node, e.start, e.id))
    leaves = sorted({e.leaf for e in ordered if e.leaf is not None})
    return {
        "leaf_names": leaves,
        "node": [e.node for e in ordered],
        "id": [e.id for e in ordered],
        "kind": [KINDS.index(e.kind) for e in ordered],
        # Rounded to the nanosecond: more digits only make the page bigger.
        "start": [round(e.start, 9) for e in ordered],
        "end": [round(e.end, 9) for e in ordered],
        "bytes": [e.bytes for e in ordered],
        "peer": [e.peer if e.peer is not None else -1 for e in ordered],
        "unit": [e.unit if e.unit is not None else -1 for e in ordered],
        "leaf": [leaves.index(e.leaf) if e.leaf is not None else -1 for e in ordered],
        "generation": [e.generation for e in ordered],
        "replanned": [int(e.replanned) for e in ordered],
        "ok": [int(e.ok) for e in ordered],
        # Few events carry a message (failed ones): a sparse map from position to text.
        "messages": {str(i): e.message for i, e in enumerate(ordered) if e.message},
    }


def build_model(trace: dict) -> dict:
    """Everything the report page draws, derived from one trace."""
    check_trace(trace)
    events, skipped = parse_events(trace)
    job = trace["job"]
    nodes = derive_nodes(trace, events)
    grids = super_tile_grids(trace, events)
    return {
        "format": TRACE_FORMAT,
        "kernel": str(job.get("kernel", "")),
        "source": str(job.get("source", "")),
        "dims": job.get("dims", {}),
        "scalars": job.get("scalars", {}),
        "cluster_values": job.get("cluster_values", {}),
        "tile_values": job.get("tile_values", {}),
        "super_grid": job.get("super_grid", []),
        "single_gpu": single_gpu_grid(job),
        "tensors": job.get("tensors", []),
        "leaves": job.get("leaves", []),
        "kinds": list(KINDS),
        "nodes": nodes,
        "failures": trace.get("failures", []),
        "events": event_columns(events),
        "grids": grids,
        "super_tiles": sum(len(g["cells"]) for g in grids),
        "bytes": bytes_matrix(events, nodes),
        "summary": derive_summary(trace, events, nodes) | {"skipped_events": skipped},
        "phases": _phases(trace),
    }


def _phases(trace: dict) -> list[list]:
    """[[phase, seconds], ...] in the order scheduler/tracing/phases.py gives them (empty: an older trace)."""
    phases = trace.get("phases")
    if not isinstance(phases, dict):
        return []
    return [[str(name), float(value)] for name, value in phases.items() if isinstance(value, int | float)]
