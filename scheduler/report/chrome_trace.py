"""A phobos trace in Chrome's trace-event JSON format, so Perfetto and chrome://tracing open a run.

    python -m scheduler.report.chrome_trace trace.json -o trace.chrome.json

One process per node (pid = node), one thread per instruction kind, one complete event
("ph": "X") per instruction with times in microseconds, metadata events naming processes and
threads, and an instant event where a node failed. A fetch names the node it read from in its
args ("peer").
"""

from __future__ import annotations

import argparse
import json
import os

from common.atomic import write_atomically
from common.cli import run_main, user_path
from scheduler.report.model import KINDS, check_trace, derive_nodes, parse_events
from scheduler.report.page import load_trace

US = 1e6  # trace-event times are microseconds; phobos traces hold seconds
FAILURE_TID = len(KINDS)  # a thread of its own on the dead node's process for the failure marker


def _metadata(pid: int, name: str, tid: int | None = None, sort: int | None = None) -> list[dict]:
    kind = "process" if tid is None else "thread"
    events = [{"ph": "M", "pid": pid, "tid": tid or 0, "name": f"{kind}_name", "args": {"name": name}}]
    if sort is not None:
        events.append({"ph": "M", "pid": pid, "tid": tid or 0, "name": f"{kind}_sort_index",
                       "args": {"sort_index": sort}})
    return events


def to_chrome_trace(trace: dict) -> dict:
    """The Chrome trace-event form of a phobos-trace/1 dict (raises UserError when malformed)."""
    check_trace(trace)
    events, _ = parse_events(trace)
    nodes = derive_nodes(trace, events)
    out: list[dict] = []
    for n in nodes:
        label = f"node {n['node']}" + (f" ({n['backend']}: {n['device']})" if n["backend"] else "")
        if n["failed_at"] is not None:
            label += " FAILED"
        out += _metadata(n["node"], label, sort=n["node"])
        for tid, kind in enumerate(KINDS):
            out += _metadata(n["node"], kind, tid=tid, sort=tid)
    for e in events:
        args = {"id": e.id, "bytes": e.bytes, "generation": e.generation, "replanned": e.replanned,
                "ok": e.ok}
        if e.peer is not None:
            args["peer"] = e.peer
        if e.unit is not None:
            args["unit"] = e.unit
        if e.leaf is not None:
            args["leaf"] = e.leaf
        if e.message:
            args["message"] = e.message
        name = e.kind if e.leaf is None else f"{e.kind} {e.leaf}"
        if e.replanned:
            name += " (re-planned)"
        if not e.ok:
            name += " (failed)"
        out.append({"ph": "X", "pid": e.node, "tid": KINDS.index(e.kind), "name": name, "cat": e.kind,
                    "ts": e.start * US, "dur": (e.end - e.start) * US, "args": args})
    for f in trace.get("failures", []):
        if f.get("node") is None or f.get("time") is None:
            continue
        out += _metadata(f["node"], "failure", tid=FAILURE_TID, sort=FAILURE_TID)
        out.append({"ph": "i", "s": "p", "pid": f["node"], "tid": FAILURE_TID, "name": "node failed",
                    "cat": "failure", "ts": float(f["time"]) * US, "args": {"reason": f.get("reason", "")}})
    job = trace["job"]
    return {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "otherData": {
            "format": "chrome trace-event, converted from phobos-trace/1",
            "kernel": str(job.get("kernel", "")),
            "dims": json.dumps(job.get("dims", {}), sort_keys=True),
            "wall_s": str((trace.get("summary") or {}).get("wall_s", "")),
        },
    }


def write_chrome_trace(trace: dict, path: str | os.PathLike) -> None:
    write_atomically(path, json.dumps(to_chrome_trace(trace), separators=(",", ":")))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.report.chrome_trace",
        description="Convert a phobos trace to Chrome trace-event JSON (Perfetto, chrome://tracing).",
    )
    parser.add_argument("trace", help="trace JSON written by the scheduler with --trace")
    parser.add_argument("-o", "--output", required=True, help="Chrome trace JSON file to write")
    args = parser.parse_args(argv)
    out = user_path(args.output)
    write_chrome_trace(load_trace(user_path(args.trace)), out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
