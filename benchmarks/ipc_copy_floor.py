"""The floor under a pod's CUDA IPC fetch: what each CUDA call on its path costs, hot and cold.

A child process allocates a 16 MiB tile (plain cudaMalloc, as a GPU pod does) and exports its IPC
handle; this process maps it once and copies out of it, timing each call of the copy's path:
the copy itself (cudaMemcpyPeerAsync, and cudaMemcpyAsync with cudaMemcpyDefault), making an
event, recording it, and polling it until the copy is done. Three rhythms:
- hot: copies back to back, as in a plan with many fetches in flight;
- idle: a pause between copies, as between one-tile jobs;
- spawn: a pause and a Python subprocess started between copies, as in the pod benchmark's rounds
  (benchmarks/test_pod_transfer.py starts a plain-socket pair each round).
Also the cost of reading the clock, which every mark pays, and of a dict lookup, as the yardstick
for "one Python step".

Run on a GPU host: python3 benchmarks/ipc_copy_floor.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TILE_BYTES = 16 << 20
OWNER = """
import sys, cupy
mem = cupy.cuda.memory.Memory(int(sys.argv[1]))
cupy.cuda.runtime.memset(mem.ptr, 1, int(sys.argv[1]))
print(bytes(cupy.cuda.runtime.ipcGetMemHandle(mem.ptr)).hex(), flush=True)
sys.stdin.read()
"""


def clock_cost_ns(count: int = 100_000) -> tuple[float, float]:
    """(perf_counter call, dict lookup) in ns, each the best of five loops."""
    table = {("job", 1, 0, 3): 1}
    key = ("job", 1, 0, 3)
    clock, lookup = [], []
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(count):
            time.perf_counter_ns()
        clock.append((time.perf_counter_ns() - start) / count)
        start = time.perf_counter_ns()
        for _ in range(count):
            table.get(key)
        lookup.append((time.perf_counter_ns() - start) / count)
    return min(clock), min(lookup)


def one_copy(cupy, dst, src_ptr: int, stream, kind: str) -> dict[str, float]:
    """One copy's calls, each timed (µs)."""
    runtime = cupy.cuda.runtime
    marks = [time.perf_counter_ns()]
    if kind == "peer":
        runtime.memcpyPeerAsync(dst.ptr, 0, src_ptr, 0, TILE_BYTES, stream.ptr)
    else:
        runtime.memcpyAsync(dst.ptr, src_ptr, TILE_BYTES, runtime.memcpyDefault, stream.ptr)
    marks.append(time.perf_counter_ns())
    event = cupy.cuda.Event(block=False, disable_timing=True)
    marks.append(time.perf_counter_ns())
    stream.record(event)
    marks.append(time.perf_counter_ns())
    polls = 0
    while not event.done:
        polls += 1
    marks.append(time.perf_counter_ns())
    steps = [(b - a) / 1e3 for a, b in zip(marks, marks[1:], strict=False)]
    return {"copy call": steps[0], "event made": steps[1], "recorded": steps[2], "until done": steps[3],
            "polls": polls, "total": (marks[-1] - marks[0]) / 1e3}


def rhythm(cupy, dst, src_ptr: int, stream, kind: str, rounds: int, pause: float, spawn: bool) -> dict:
    rows = []
    for _ in range(rounds):
        if pause:
            time.sleep(pause)
        if spawn:
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        rows.append(one_copy(cupy, dst, src_ptr, stream, kind))
    return {key: statistics.median(row[key] for row in rows[1:]) for key in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    import cupy

    clock_ns, lookup_ns = clock_cost_ns()
    print(f"perf_counter_ns: {clock_ns:.0f} ns a call; a dict lookup: {lookup_ns:.0f} ns")
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(TILE_BYTES)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        handle = bytes.fromhex(owner.stdout.readline().strip())
        src_ptr = cupy.cuda.runtime.ipcOpenMemHandle(handle)
        dst = cupy.cuda.memory.Memory(TILE_BYTES)
        stream = cupy.cuda.Stream(non_blocking=True)
        for kind in ("peer", "default"):
            for name, rounds, pause, spawn in (("hot", args.rounds, 0.0, False),
                                               ("idle 20 ms", args.rounds // 4, 0.02, False),
                                               ("spawn", args.rounds // 8, 0.02, True)):
                row = rhythm(cupy, dst, src_ptr, stream, kind, rounds, pause, spawn)
                print(f"{kind:7} {name:10} " + "  ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
        check = cupy.empty(4, cupy.uint8)
        cupy.cuda.runtime.memcpy(check.data.ptr, dst.ptr, 4, cupy.cuda.runtime.memcpyDefault)
        assert (check == 1).all(), "the copy did not bring the owner's bytes"
        cupy.cuda.runtime.ipcCloseMemHandle(src_ptr)
    finally:
        owner.stdin.close()
        owner.wait()


if __name__ == "__main__":
    main()
