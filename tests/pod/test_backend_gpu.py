"""The GPU backend (marker gpu): buffers on the device, leaves through PTX, CUDA IPC between pods
sharing a host, results equal to the CPU backend's (the reference interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

from common import storage
from pod.backends.backend_cpu import CpuBackend
from schemas import capnp_io
from tests.pod.harness import Sink, connect, hello_all, logged, run_async, running_pods, submit
from tests.pod.test_pod_rpc import HALF, PROGRAM, add_plans, make_inputs

pytestmark = pytest.mark.gpu


def test_gpu_backend_matches_the_interpreter():
    from pod.backends.backend_gpu import GpuBackend

    gpu, cpu = GpuBackend(0), CpuBackend()
    assert gpu.describe()[1] > 0
    gpu.prepare("j", PROGRAM)
    cpu.prepare("j", PROGRAM)
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(HALF).astype(np.float32) for _ in range(2))
    bufs = {name: gpu.allocate((HALF,)) for name in "abc"}
    gpu.upload(bufs["a"], a)
    gpu.upload(bufs["b"], b)
    gpu.compute("j", "main", bufs, {})
    want = {"a": a.copy(), "b": b.copy(), "c": np.zeros(HALF, np.float32)}
    cpu.compute("j", "main", want, {})
    np.testing.assert_array_equal(gpu.download(bufs["c"]), want["c"])  # f32 add: exact on both
    np.testing.assert_array_equal(gpu.download(bufs["a"]), a)


def test_a_leaf_is_prepared_once_for_job_after_job(monkeypatch):
    """As on CPU pods, a GPU pod keeps its prepared leaves by content: the second job of one
    kernel (dropped in between) reuses the first job's compiled leaf and module, and adds right.
    PROGRAM ships no compiled leaf, so the pod compiles it here (pod/backends/gpu_leaves.py): once."""
    from compiler.cuda.mainloops.split_loop import launch as split_launch
    from pod.backends import backend_gpu

    parsed, real = [], backend_gpu.gpu_leaf
    monkeypatch.setattr(backend_gpu, "gpu_leaf",
                        lambda leaf, shipped, cc: parsed.append((leaf, shipped)) or real(leaf, shipped, cc))
    compiled, real_compile = [], split_launch.compile_leaf
    monkeypatch.setattr(split_launch, "compile_leaf",
                        lambda leaf, *args, **kw: compiled.append(leaf) or real_compile(leaf, *args, **kw))
    gpu = backend_gpu.GpuBackend(0)
    rng = np.random.default_rng(6)
    for job in ("job-1", "job-2"):
        gpu.prepare(job, PROGRAM)
        a, b = (rng.standard_normal(HALF).astype(np.float32) for _ in range(2))
        bufs = {name: gpu.allocate((HALF,)) for name in "abc"}
        gpu.upload(bufs["a"], a)
        gpu.upload(bufs["b"], b)
        gpu.compute(job, "main", bufs, {})
        np.testing.assert_array_equal(gpu.download(bufs["c"]), a + b)
        gpu.forget(job)
    assert len(parsed) == len(PROGRAM.leaves) == 1 and parsed[0][1] is None
    assert compiled == [PROGRAM.leaves[0]]


@pytest.mark.parametrize("devices", [("0", "0"), ("0", "cpu")], ids=["two-gpu-pods-ipc", "gpu-and-cpu"])
def test_gpu_pods_run_the_add_plans(tmp_path, devices):
    a, b, uris = make_inputs(tmp_path)
    staging = storage.create_staging(tmp_path / "c.npy", (2 * HALF,), "f32", "job-gpu")
    with running_pods(2, tmp_path, devices=devices) as procs:
        peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]

        async def scenario():
            sink = Sink()
            links = [await connect(addr) for _, addr in procs]
            infos = []
            for node, (_, pod) in enumerate(links):
                infos.append(capnp_io.read_pod_info((await pod.hello(sink, node)).info))
            plans = add_plans(uris)
            for node in (1, 0):  # the fetcher's plan first: its ask reaches node 0 before node 0's
                await submit(links[node][1], "job-gpu", PROGRAM, plans[node], peers)
            finished = await sink.wait_finished([(0, "job-gpu", 1), (1, "job-gpu", 1)], timeout=60)
            return infos, finished, sink.reported

        infos, results, reported = run_async(scenario)
    # a failed fetch drops what needed it and the plan still finishes: its reason is in its event
    assert [(node, e.kind, e.message) for node, e in reported if not e.ok] == []
    assert results == [(True, ""), (True, "")]
    assert infos[0].backend == "gpu" and infos[0].device_index == 0
    import cupy  # the hello says the GPU's compute capability, which the scheduler compiles for

    assert infos[0].compute_capability == int(cupy.cuda.Device(0).compute_capability) >= 80
    assert infos[1].compute_capability == (0 if devices[1] == "cpu" else infos[0].compute_capability)
    storage.commit(staging, tmp_path / "c.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a + b)


@pytest.mark.parametrize("piece_bytes", [1 << 20, 5 * 48 * 4], ids=["one-piece", "several-pieces"])
@pytest.mark.parametrize("dtype", ["bf16", "f16", "i32", "f32"])
def test_tiles_keep_their_dtype_through_pinned_copies(tmp_path, dtype, piece_bytes):
    """A region read into a pinned buffer and copied on asynchronously, then copied back and
    written: the same bytes, in the tensor's own dtype (bf16 held as its bits on the device)."""
    from pod.backends.backend_gpu import GpuBackend
    from schemas.program import Region

    gpu = GpuBackend(0)
    data = (np.arange(64 * 48) % 251 - 100).astype(storage.STORAGE_DTYPES[dtype]).reshape(64, 48)
    np.save(tmp_path / "in.npy", data)
    region = Region("t", (8, 0), (32, 48))
    buffer = gpu.allocate((32, 48), dtype)
    assert buffer.nbytes == 32 * 48 * data.dtype.itemsize
    source = tmp_path / "in.npy"
    gpu.piece_bytes = piece_bytes  # several pieces through the two pinned ones, a short last one
    nbytes, copy_s = gpu.fill(buffer, lambda host, first, count: storage.read_region_into(
        source, storage.region_rows(region, first, count), host))
    assert nbytes == buffer.nbytes and copy_s >= 0
    staging = storage.create_staging(tmp_path / "out.npy", (64, 48), dtype, "j")
    gpu.drain(buffer, lambda host, first, count: storage.write_region(
        staging, storage.region_rows(region, first, count), host))
    stored = np.load(staging).view(data.dtype)
    np.testing.assert_array_equal(stored[8:40], data[8:40])


def test_a_freed_buffer_allocation_is_reused_with_its_ipc_handle():
    import gc

    from pod.backends.backend_gpu import GpuBackend

    gpu = GpuBackend(0)
    first = gpu.allocate((1 << 20,))
    handle, pointer = gpu.ipc_handle(first), first.data.ptr
    del first
    gc.collect()
    second = gpu.allocate((1 << 20,))
    assert second.data.ptr == pointer and gpu.ipc_handle(second) == handle
    assert not bool(second.any())  # a reused allocation starts zeroed like a new one


def test_short_of_memory_the_pool_frees_allocations_never_lent_before_lent_ones(monkeypatch):
    """A failed cudaMalloc frees the idle allocations no peer was given a handle to and retries;
    the lent ones (a peer may keep them mapped) go only when that was not enough."""
    import gc

    import cupy

    from pod.backends.backend_gpu import GpuBackend

    gpu = GpuBackend(0)
    lent, plain = gpu.allocate((1 << 20,)), gpu.allocate((1 << 18,))
    gpu.ipc_handle(lent)
    lent_pointer = lent.data.ptr
    del lent, plain
    gc.collect()
    assert sorted(gpu._idle) == [1 << 20, 1 << 22]  # both idle, pooled by bytes
    real, failures = cupy.cuda.memory.Memory, [1]  # cudaMalloc fails this many times, then works

    def malloc(nbytes):
        if failures[0]:
            failures[0] -= 1
            raise cupy.cuda.memory.OutOfMemoryError(nbytes, 0, 0)
        return real(nbytes)

    monkeypatch.setattr(cupy.cuda.memory, "Memory", malloc)
    held = [gpu.allocate((1 << 19,))]  # a new size, one failure: the never-lent allocation goes
    assert sorted(gpu._idle) == [1 << 22]
    assert gpu.allocate((1 << 20,)).data.ptr == lent_pointer  # the lent one is still pooled
    gc.collect()
    assert sorted(gpu._idle) == [1 << 22]  # and back in the pool
    failures[0] = 2
    held.append(gpu.allocate((1 << 17,)))  # two failures: the lent one goes too
    assert gpu._idle == {} and lent_pointer not in gpu._lent and not failures[0]


def test_an_offered_tile_is_copied_without_asking_and_a_reused_allocation_brings_its_new_bytes(
        tmp_path, monkeypatch):
    """The owner offers its loaded tile to the peer whose plan fetches it (tileReady); the fetch,
    submitted once the offer has arrived, copies out of the owner's allocation without asking.
    The second job's tile lands in the same owner allocation (reused by size, same IPC handle):
    the fetcher maps it once, keeps the mapping after the first job is dropped on both pods, and
    the fetch must bring the second job's bytes, not the first's."""
    from schemas.instructions import Allocate, Fetch, Free, Load, NodePlan, Store
    from schemas.program import Region, TensorInfo

    monkeypatch.setenv("PHOBOS_TEST_POD_LOG", "debug")  # the fetcher's log says which path it took
    n = 1 << 20
    program = capnp_io.JobProgram(kernel=PROGRAM.kernel, leaves=PROGRAM.leaves, scalars=(),
                                  tensors=(TensorInfo("x", "f32", (n,), "input"),),
                                  leaf_writes=PROGRAM.leaf_writes)
    region = Region("x", (0,), (n,))
    jobs = {job: np.arange(n, dtype=np.float32) * (i + 1) - 7 for i, job in enumerate(("offer-1", "offer-2"))}
    with running_pods(2, tmp_path, devices=("0", "0")) as procs:
        peers = [capnp_io.Peer(i, addr) for i, (_, addr) in enumerate(procs)]

        async def scenario():
            sink, links = await hello_all(procs)
            results = []
            for job, data in jobs.items():
                np.save(tmp_path / f"{job}.npy", data)
                out = tmp_path / f"{job}-out.npy"
                storage.create_staging(out, (n,), "f32", job)
                owner = NodePlan(0, 1, (Allocate(0, (), 0, (n,)), Load(1, (0,), 0, 0, region),
                                        Free(2, (1,), 0, peers=(1,))), 4 * n,
                                 ((tmp_path / f"{job}.npy").as_uri(),))
                fetcher = NodePlan(1, 1, (Allocate(0, (), 0, (n,)), Fetch(1, (0,), 0, peer=0, peer_buffer=0),
                                          Store(2, (1,), 0, 0, region, unit=0), Free(3, (2,), 0)), 4 * n,
                                   (out.as_uri(),))
                await submit(links[0][1], job, program, owner, peers)
                await logged(tmp_path / "pod-1.log", "tile offered", job)  # the offer is there
                await submit(links[1][1], job, program, fetcher, peers)
                results += await sink.wait_finished([(0, job, 1), (1, job, 1)], timeout=60)
                for _, pod in links:  # dropped at its end, as phobos-sched does on running pods
                    await pod.cancel(job)
            return results

        assert run_async(scenario) == [(True, "")] * 4
    log = (tmp_path / "pod-1.log").read_text().splitlines()
    mapped = [line for line in log if "mapped a peer allocation" in line]
    assert len(mapped) == 1 and "offer-1" in mapped[0], mapped  # opened once, kept for offer-2
    for job, data in jobs.items():
        fetched = [line for line in log if "fetched" in line and job in line]
        assert len(fetched) == 1 and "cuda-ipc-offered" in fetched[0], fetched
        out = tmp_path / f"{job}-out.npy"
        storage.commit(storage.staging_path(out, job), out)
        np.testing.assert_array_equal(np.load(out), data)
