"""Pod speed on loopback, with real pod processes (CPU backend).

- Tile transfer: a 16 MiB f32 tile fetched by one pod from another (target >= 1 GB/s), on the
  ticketed bulk TCP path and on the fallback path (4 MiB chunks over the RPC). Each round is a
  job of its own, dropped on both pods once timed, as phobos-sched drops a job at its end on
  running pods. Timed: the fetching pod's whole plan (allocate, fetch with header RPC,
  transfer, CRC-32C check on both sides, release, free) from submit to its `finished` report,
  and the Fetch instruction alone (its event's start to end). The owner's load from storage is
  done (and its crc cached) before the clock starts.
  With two GPU pods on one host (marker gpu) the fetch maps the owner's buffer by CUDA IPC and
  copies device to device.
- Per-instruction overhead (target < 200 us/instruction): a plan of 2000 instructions on one pod,
  submit to `finished`, divided by the count. Two shapes: allocate/free pairs (pure pod
  bookkeeping, event reports included) and a chain of computes of a 16-element add leaf (the
  interpreter's own time for that leaf is measured in-process and reported beside it).

Run: PYTHONPATH=. .venv/bin/pytest benchmarks/test_pod_transfer.py --benchmark-only -s
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import statistics
import subprocess
import sys
import time

import capnp
import numpy as np
import pytest

from schemas import capnp_io
from schemas.instructions import Allocate, Compute, Fetch, Free, Load, NodePlan
from schemas.program import Leaf, Region, TensorInfo
from tests.pod.harness import Sink, connect, running_pods, submit

TILE_BYTES = 16 * 1024 * 1024
N = TILE_BYTES // 4
LEAF_SOURCE = """
@autotune(BLOCK in [16, 4096])
kernel add(a: tensor<f32>[N], b: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + b[base :+ BLOCK]
}
"""
TINY = Leaf(name="main", kernel="add", source=LEAF_SOURCE, dims=(("N", 16),), tile_values=(("BLOCK", 16),),
            grid=(1,), threads=256, tensors=("a", "b", "c"), scalars=())
PROGRAM = capnp_io.JobProgram(kernel="add", leaves=(TINY,), scalars=(),
                              tensors=(TensorInfo("x", "f32", (N,), "input"),),
                              leaf_writes=(("main", ("c",)),))


@contextlib.contextmanager
def loop_runner():
    runner = LoopRunner()
    try:
        yield runner
    finally:
        runner.close()


class LoopRunner:
    """One event loop with the KJ loop entered, driven from synchronous benchmark rounds."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.kj = capnp.kj_loop()
        self.run(self.kj.__aenter__())

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def close(self):
        self.run(self.kj.__aexit__(None, None, None))
        self.loop.close()
        asyncio.set_event_loop(None)


async def drop_everywhere(links, job: str) -> None:
    """Drop a finished job on every pod, as phobos-sched does at a job's end on running pods:
    the next round's job then finds what the pods keep across jobs (pooled allocations, mappings
    of a peer's allocations, prepared leaves) as a user's next job would."""
    for _, pod in links:
        await pod.cancel(job)


def _tile_file(folder, devices: tuple[str, ...]) -> str:
    """The tile's file (16 MiB of f32), as a URI; skips GPU pods where there is no GPU."""
    if devices:  # benchmarks/ has no conftest that skips `gpu` tests where there is no GPU
        cupy = pytest.importorskip("cupy")
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no GPU")
    np.save(folder / "x.npy", np.random.default_rng(0).standard_normal(N).astype(np.float32))
    return (folder / "x.npy").as_uri()


def _connect_all(runner, procs, sink) -> tuple[list, list]:
    """Links to every pod (each said hello to `sink`) and the pods as plan peers."""
    async def connect_all():
        links = [await connect(addr) for _, addr in procs]
        for node, (_, pod) in enumerate(links):
            await pod.hello(sink, node)
        return links

    return runner.run(connect_all()), [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]


@pytest.mark.parametrize("flags,devices", [
    ((), ()),
    (("--no-data-port",), ()),
    pytest.param((), ("0", "0"), marks=pytest.mark.gpu),
], ids=["bulk-port", "rpc-chunks", "gpu-pods"])
def test_tile_transfer_16mib(benchmark, tmp_path, flags, devices):
    uri = _tile_file(tmp_path, devices)
    counter = itertools.count()
    with running_pods(2, tmp_path, extra=flags, devices=devices) as procs, loop_runner() as runner:
        sink = Sink()
        links, peers = _connect_all(runner, procs, sink)
        current = {}

        async def prepare_owner(job):
            owner = NodePlan(0, 1, (Allocate(0, (), 0, (N,)), Load(1, (0,), 0, 0, Region("x", (0,), (N,))),
                                    Free(2, (1,), 0, peers=(1,))), TILE_BYTES, (uri,))
            await submit(links[0][1], job, PROGRAM, owner, peers)
            await links[0][1].tileHeader(job, 1, 0)  # returns once loaded; caches the crc

        def setup():
            job = current["job"] = f"t{next(counter)}"
            runner.run(prepare_owner(job))

        async def fetch(job):
            plan = NodePlan(1, 1, (Allocate(0, (), 0, (N,)), Fetch(1, (0,), 0, peer=0, peer_buffer=0),
                                   Free(2, (1,), 0)), TILE_BYTES)
            await submit(links[1][1], job, PROGRAM, plan, peers)
            result = await sink.wait_finished([(1, job, 1)], timeout=60)
            assert result == [(True, "")]

        plain, plans = [], []

        def fetch_then_plain_socket():
            start = time.perf_counter()
            runner.run(fetch(current["job"]))
            plans.append(time.perf_counter() - start)
            runner.run(drop_everywhere(links, current["job"]))
            plain.append(plain_socket_seconds())  # the same tile between two plain processes

        rounds = int(os.environ.get("PHOBOS_TRANSFER_ROUNDS", "9"))
        benchmark.pedantic(fetch_then_plain_socket, setup=setup, rounds=rounds, iterations=1)
        fetches = [e for node, e in sink.reported if e.kind == "fetch"]
        best_fetch = min(e.end - e.start for e in fetches)
        plan_gbps = TILE_BYTES / statistics.median(plans) / 1e9
        plain_gbps = TILE_BYTES / statistics.median(plain) / 1e9
        fetch_gbps = TILE_BYTES / statistics.median(e.end - e.start for e in fetches) / 1e9
        benchmark.extra_info.update(tile_bytes=TILE_BYTES, plan_GBps=round(plan_gbps, 3),
                                    fetch_instruction_GBps=round(fetch_gbps, 3),
                                    plain_socket_GBps=round(plain_gbps, 3),
                                    fetch_over_plain=round(fetch_gbps / plain_gbps, 3),
                                    load_average=os.getloadavg()[0])
        print(f"\n16 MiB tile, {flags or 'bulk port'} {devices or 'cpu'} (medians of {len(fetches)}): "
              f"plan {plan_gbps:.2f} GB/s, fetch instruction {fetch_gbps:.2f} GB/s (best "
              f"{TILE_BYTES / best_fetch / 1e9:.2f}), two plain processes with a blocking socket "
              f"{plain_gbps:.2f} GB/s: fetch / plain = {fetch_gbps / plain_gbps:.2f}")


WINDOW = 16  # tiles in flight at once for the bandwidth figure


@pytest.mark.parametrize("flags,devices", [
    ((), ()),
    pytest.param((), ("0", "0"), marks=pytest.mark.gpu),
], ids=["bulk-port", "gpu-pods"])
def test_tile_window_bandwidth(benchmark, tmp_path, flags, devices):
    """Bandwidth with WINDOW 16 MiB tiles in flight between two pods (one plan of WINDOW
    independent fetches): the bytes over the time from the first fetch's start to the last one's
    end. One tile alone (test_tile_transfer_16mib) pays the owner's RPC round trip per tile; with
    several in flight the round trips overlap and the copies set the pace, as in a job whose
    units wait for several tiles."""
    uri = _tile_file(tmp_path, devices)
    counter = itertools.count()
    owner = NodePlan(0, 1, tuple(itertools.chain.from_iterable(
        (Allocate(3 * i, (), i, (N,)), Load(3 * i + 1, (3 * i,), i, 0, Region("x", (0,), (N,))),
         Free(3 * i + 2, (3 * i + 1,), i, peers=(1,))) for i in range(WINDOW))), WINDOW * TILE_BYTES, (uri,))
    fetcher = NodePlan(1, 1, tuple(itertools.chain.from_iterable(
        (Allocate(3 * i, (), i, (N,)), Fetch(3 * i + 1, (3 * i,), i, peer=0, peer_buffer=i),
         Free(3 * i + 2, (3 * i + 1,), i)) for i in range(WINDOW))), WINDOW * TILE_BYTES)
    with running_pods(2, tmp_path, extra=flags, devices=devices) as procs, loop_runner() as runner:
        sink = Sink()
        links, peers = _connect_all(runner, procs, sink)
        jobs = []

        async def prepare_owner():
            if jobs:  # the last round's job, dropped here rather than in the timed round
                await drop_everywhere(links, jobs[-1])
            job = f"w{next(counter)}"
            jobs.append(job)
            await submit(links[0][1], job, PROGRAM, owner, peers)
            for i in range(WINDOW):  # every tile loaded (and its crc cached) before the clock
                await links[0][1].tileHeader(job, 1, i)

        async def fetch_all():
            await submit(links[1][1], jobs[-1], PROGRAM, fetcher, peers)
            assert await sink.wait_finished([(1, jobs[-1], 1)], timeout=120) == [(True, "")]

        benchmark.pedantic(lambda: runner.run(fetch_all()), setup=lambda: runner.run(prepare_owner()),
                           rounds=int(os.environ.get("PHOBOS_TRANSFER_ROUNDS", "9")), iterations=1)
        spans = []
        for job in jobs:
            fetches = [e for e in sink.job_events[job] if e.kind == "fetch"]  # the fetcher's only
            assert len(fetches) == WINDOW
            spans.append(max(e.end for e in fetches) - min(e.start for e in fetches))
        gbps = WINDOW * TILE_BYTES / statistics.median(spans) / 1e9
        benchmark.extra_info.update(window=WINDOW, tile_bytes=TILE_BYTES, window_GBps=round(gbps, 3),
                                    best_window_GBps=round(WINDOW * TILE_BYTES / min(spans) / 1e9, 3),
                                    load_average=os.getloadavg()[0])
        print(f"\n{WINDOW} x 16 MiB tiles in flight, {devices or 'cpu bulk port'}: {gbps:.2f} GB/s "
              f"(median of {len(spans)}; best {WINDOW * TILE_BYTES / min(spans) / 1e9:.2f})")


PLAIN_SENDER = """
import socket, sys
import numpy as np
data = np.ones(int(sys.argv[1]), np.uint8)
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
conn.sendall(memoryview(data))
conn.close()
"""


def plain_socket_seconds() -> float:
    """Seconds for TILE_BYTES from one plain process to another (blocking sendall -> recv_into a
    preallocated buffer), from connect to the last byte: the yardstick for the pods' transfer."""
    sender = subprocess.Popen([sys.executable, "-c", PLAIN_SENDER, str(TILE_BYTES)], stdout=subprocess.PIPE,
                              text=True)
    try:
        port = int(sender.stdout.readline())
        into = memoryview(bytearray(TILE_BYTES))
        start = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            got = 0
            while got < TILE_BYTES:
                n = sock.recv_into(into[got:])
                if not n:
                    raise ConnectionError("the plain sender stopped early")
                got += n
        return time.perf_counter() - start
    finally:
        sender.wait()


def overhead_plan(kind: str, count: int) -> NodePlan:
    instructions = []
    if kind == "allocate-free":
        for i in range(count // 2):
            instructions += [Allocate(2 * i, (), i, (16,)), Free(2 * i + 1, (2 * i,), i)]
    else:
        instructions.append(Allocate(0, (), 0, (16,)))
        for i in range(1, count - 1):
            instructions.append(Compute(i, (i - 1,), "main", (("a", 0), ("b", 0), ("c", 0)), unit=i))
        instructions.append(Free(count - 1, (count - 2,), 0))
    return NodePlan(0, 1, tuple(instructions), 64)


def leaf_time_s() -> float:
    """The interpreter's own time for one launch of the tiny leaf, in this process."""
    from compiler.cluster.leaves import load_leaf
    from compiler.interp.interpreter import run_kernel

    kernel, binding = load_leaf(TINY)
    buffer = np.zeros(16, np.float32)
    arrays = {n: buffer for n in "abc"}  # bound as the plan binds them: one buffer for all three
    run_kernel(kernel, binding, arrays, {})
    start = time.perf_counter()
    for _ in range(200):
        run_kernel(kernel, binding, arrays, {})
    return (time.perf_counter() - start) / 200


@pytest.mark.parametrize("kind", ["allocate-free", "compute-chain"])
def test_per_instruction_overhead(benchmark, tmp_path, kind):
    count = 2000
    counter = itertools.count()
    with running_pods(1, tmp_path) as procs, loop_runner() as runner:
        sink = Sink()

        async def connect_one():
            client, pod = await connect(procs[0][1])
            await pod.hello(sink, 0)
            return client, pod

        client, pod = runner.run(connect_one())  # the client must outlive the calls
        plan = overhead_plan(kind, count)

        jobs = []

        async def one_plan():
            job = f"o{next(counter)}"
            jobs.append(job)
            await submit(pod, job, PROGRAM, plan, [])
            result = await sink.wait_finished([(0, job, 1)], timeout=120)
            assert result == [(True, "")]
            await asyncio.sleep(0.05)  # the last event batch

        benchmark.pedantic(lambda: runner.run(one_plan()), rounds=3, iterations=1)
        per_us = benchmark.stats.stats.min / count * 1e6
        # Steady state: from the first instruction's start to the last one's end, which leaves out
        # the submit itself (decoding the plan, parsing the leaf once per job).
        spans = []
        for job in jobs:
            events = [e for e in sink.job_events[job] if e.kind != "serve"]
            assert len(events) == count
            spans.append(max(e.end for e in events) - min(e.start for e in events))
        run_us = min(spans) / count * 1e6
        leaf_us = leaf_time_s() * 1e6 if kind == "compute-chain" else 0.0
        # compute-chain: every instruction but two is a compute, so the pod's own share is the
        # running time per instruction less the interpreter's time for the leaf
        overhead_us = run_us - leaf_us * (count - 2) / count
        benchmark.extra_info.update(instructions=count, per_instruction_us=round(per_us, 1),
                                    per_instruction_running_us=round(run_us, 1),
                                    interpreter_leaf_us=round(leaf_us, 1),
                                    pod_overhead_us=round(overhead_us, 1))
        print(f"\n{kind}: {per_us:.0f} us per instruction submit to finished, {run_us:.0f} us running "
              f"({count} instructions); interpreter time of the leaf alone: {leaf_us:.0f} us; "
              f"pod overhead {overhead_us:.0f} us per instruction")
