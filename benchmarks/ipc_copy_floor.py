"""The floor under a pod's CUDA IPC fetch: what each CUDA call on its path costs, hot and cold.

A child process allocates a 16 MiB tile (plain cudaMalloc, as a GPU pod does) and exports its IPC
handle; this process maps it once and copies out of it, timing each call of the copy's path:
the copy itself (cudaMemcpyPeerAsync, and cudaMemcpyAsync with cudaMemcpyDefault), making an
event (or taking one made before), recording it, and polling it until the copy is done; the copy
also through the driver API straight (cuMemcpyDtoDAsync, by ctypes), to see what the runtime
layer adds, and as a copy kernel of our own (16-byte loads and stores, launched by cupy), to see
whether a launch costs the driver less than a copy call. Three rhythms:
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


def driver_copy():
    """cuMemcpyDtoDAsync_v2 of the driver library, by ctypes."""
    import ctypes

    copy = ctypes.CDLL("libcuda.so.1").cuMemcpyDtoDAsync_v2
    copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    copy.restype = ctypes.c_int
    return copy


COPY_KERNEL = r"""
extern "C" __global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                  unsigned long long count) {
  unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count; i += step)
    dst[i] = src[i];
}
"""


def copy_calls(cupy, stream) -> dict:
    """The ways to issue the copy on `stream`: kind -> fn(dst, src)."""
    import numpy as np

    runtime, driver = cupy.cuda.runtime, driver_copy()
    kernel = cupy.RawKernel(COPY_KERNEL, "copy16")
    blocks = 4 * cupy.cuda.Device().attributes["MultiProcessorCount"]
    count = np.uint64(TILE_BYTES // 16)

    def launch(dst, src):
        kernel((blocks,), (256,), (np.uint64(src), np.uint64(dst), count), stream=stream)

    def through_driver(dst, src):
        status = driver(dst, src, TILE_BYTES, stream.ptr)
        if status != 0:
            raise RuntimeError(f"cuMemcpyDtoDAsync failed: CUresult {status}")

    return {
        "kernel": launch,
        "peer": lambda dst, src: runtime.memcpyPeerAsync(dst, 0, src, 0, TILE_BYTES, stream.ptr),
        "default": lambda dst, src: runtime.memcpyAsync(dst, src, TILE_BYTES, runtime.memcpyDefault,
                                                         stream.ptr),
        "driver": through_driver,
    }


def one_copy(cupy, dst, src_ptr: int, stream, copy, kept_event) -> dict[str, float]:
    """One copy's calls, each timed (µs)."""
    marks = [time.perf_counter_ns()]
    copy(dst.ptr, src_ptr)
    marks.append(time.perf_counter_ns())
    event = kept_event or cupy.cuda.Event(block=False, disable_timing=True)
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


def rhythm(cupy, dst, src_ptr: int, stream, copy, rounds: int, pause: float, spawn: bool,
           kept_event) -> dict:
    rows = []
    for _ in range(rounds):
        if pause:
            time.sleep(pause)
        if spawn:
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        rows.append(one_copy(cupy, dst, src_ptr, stream, copy, kept_event))
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
        kept, calls = cupy.cuda.Event(block=False, disable_timing=True), copy_calls(cupy, stream)
        calls["kernel"](dst.ptr, src_ptr)  # compiled and loaded before any timing
        stream.synchronize()
        for kind, event in (("peer", None), ("peer", kept), ("default", kept), ("driver", kept),
                            ("kernel", kept)):
            label = f"{kind}, {'kept' if event else 'new'} event"
            for name, rounds, pause, spawn in (("hot", args.rounds, 0.0, False),
                                               ("idle 20 ms", args.rounds // 4, 0.02, False),
                                               ("spawn", args.rounds // 8, 0.02, True)):
                row = rhythm(cupy, dst, src_ptr, stream, calls[kind], rounds, pause, spawn, event)
                steps = "  ".join(f"{k} {v:.1f}" for k, v in row.items())
                print(f"{label:19} {name:10} {steps}", flush=True)
        check = cupy.empty(4, cupy.uint8)
        cupy.cuda.runtime.memcpy(check.data.ptr, dst.ptr, 4, cupy.cuda.runtime.memcpyDefault)
        assert (check == 1).all(), "the copy did not bring the owner's bytes"
        cupy.cuda.runtime.ipcCloseMemHandle(src_ptr)
    finally:
        owner.stdin.close()
        owner.wait()


if __name__ == "__main__":
    main()
