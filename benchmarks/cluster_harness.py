"""The I/O side of the cluster benchmarks: data files, cold storage, pod sessions, running a job.

Pods are started once per (device, pod count) and kept for every case that uses them, as a
cluster's pods would be; a job's time is then what a user of a running cluster waits for:
prepare (compile the cluster program, check storage) + plan + submit + every instruction on
the pods + the staged outputs committed. Pod start-up is not part of it.

Storage is kept cold-ish: before every timed job the tensors' pages are dropped from the page
cache (posix_fadvise DONTNEED after an fsync; best effort: where the filesystem ignores it the
reads are warm, and so is the bandwidth the bound uses, measured the same way).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.cluster_cases import Case, Problem, input_names, tensor_shapes
from common.paths import repo_file

KERNEL_DIR = "benchmarks/kernels"


def kernel_path(case: Case) -> Path:
    return repo_file(f"{KERNEL_DIR}/{case.kernel_file}")


# ---- files -------------------------------------------------------------------------------------------


def data_root() -> Path:
    """Where the benchmark tensors live: $PHOBOS_BENCH_DATA or a fresh temporary folder."""
    base = os.environ.get("PHOBOS_BENCH_DATA")
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="cluster-bench-", dir=base)).resolve()
    return Path(tempfile.mkdtemp(prefix="phobos-cluster-bench-")).resolve()


def save_synced(path: Path, array: np.ndarray) -> None:
    """np.save, then fsync so the pages are clean and can be dropped from the cache."""
    with open(path, "wb") as f:
        np.save(f, array)
        f.flush()
        os.fsync(f.fileno())


def drop_cache(paths: list[Path]) -> None:
    for path in paths:
        if not path.exists():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:  # a filesystem without fadvise: reads stay warm (see the module doc)
            pass
        finally:
            os.close(fd)


@dataclass
class ProblemFiles:
    """One problem's tensors on disk, shared by every case of that problem."""

    problem: Problem
    folder: Path
    arrays: dict[str, np.ndarray]  # original contents of every tensor (C's old values too)

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.npy"

    def input_paths(self) -> list[Path]:
        return [self.path(n) for n in input_names(self.problem)]

    def all_paths(self) -> list[Path]:
        return [self.path(n) for n in tensor_shapes(self.problem)]

    def reset(self, output: str) -> None:
        """Put back the output's original contents (C is read as beta * C_old) and drop every
        tensor from the page cache, so each timed job starts from the same cold storage."""
        save_synced(self.path(output), self.arrays[output])
        drop_cache(self.all_paths())


def write_problem(root: Path, problem: Problem, arrays: dict[str, np.ndarray]) -> ProblemFiles:
    folder = root / f"{problem.kind}-{problem.label}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        save_synced(folder / f"{name}.npy", array)
    return ProblemFiles(problem, folder, arrays)


def read_bandwidth(paths: list[Path], repeats: int = 3, cold: bool = True) -> float:
    """Bytes/s reading whole .npy files the way a pod's load does: a fresh memory map of each
    file, copied into memory. Best of `repeats` (the bound wants the fastest storage can go)."""
    best = 0.0
    for _ in range(repeats):
        if cold:
            drop_cache(paths)
        total = 0
        t0 = time.perf_counter()
        for path in paths:
            mapped = np.load(path, mmap_mode="r")
            out = np.empty(mapped.shape, mapped.dtype)
            np.copyto(out, mapped)
            total += out.nbytes
            del mapped
        best = max(best, total / (time.perf_counter() - t0))
    return best


def read_with_durable_write_s(paths: list[Path], write_bytes: int, folder: Path, repeats: int = 2) -> float:
    """Seconds to read `paths` cold (as read_bandwidth does) while, beside it, a file of
    `write_bytes` is written into `folder` and fsynced: what any job that reads these inputs and
    commits an output of that size must move through the same disk. Best of `repeats`."""
    import threading

    piece = np.random.default_rng(0).integers(0, 256, 16 << 20, dtype=np.uint8).tobytes()
    target = folder / ".durable-write-probe"

    def write() -> None:
        with open(target, "wb") as f:
            for left in range(write_bytes, 0, -len(piece)):
                f.write(piece[: min(left, len(piece))])
            f.flush()
            os.fsync(f.fileno())

    best = float("inf")
    for _ in range(repeats):
        drop_cache(paths)
        writer = threading.Thread(target=write)
        t0 = time.perf_counter()
        writer.start()
        read_bandwidth(paths, repeats=1, cold=False)
        writer.join()
        best = min(best, time.perf_counter() - t0)
        target.unlink()
    return best


# ---- pods and jobs -------------------------------------------------------------------------------------


@dataclass
class PodCluster:
    device: str  # "cpu" or "gpu"
    pods: int
    session: object  # scheduler.running.run.PodSession
    local: object  # scheduler.pods.local_pods.LocalPods


@dataclass
class ClusterPool:
    """One event loop (with pycapnp's KJ loop inside) and the pod clusters opened on it."""

    root: Path
    loop: asyncio.AbstractEventLoop
    kj: object
    clusters: dict[tuple[str, int], PodCluster] = field(default_factory=dict)

    @classmethod
    def open(cls, root: Path) -> ClusterPool:
        import capnp

        loop = asyncio.new_event_loop()
        kj = capnp.kj_loop()
        loop.run_until_complete(_enter(kj))
        return cls(root, loop, kj)

    def cluster(self, device: str, pods: int) -> PodCluster:
        key = (device, pods)
        if key not in self.clusters:
            self.clusters[key] = self.loop.run_until_complete(self._start(device, pods))
        return self.clusters[key]

    async def _start(self, device: str, pods: int) -> PodCluster:
        from scheduler.pods.local_pods import new_token, start_local_pods
        from scheduler.running.run import PodSession

        devices = ["cpu"] * pods if device == "cpu" else ["0"] * pods  # GPU cases share one GPU
        local = await start_local_pods(devices, [self.root], new_token(),
                                       ["--heartbeat-interval", "0.5", "--scheduler-timeout", "30"])
        session = PodSession(local.addresses, local.token)
        try:
            await session.open()
        except BaseException:
            await local.stop()
            raise
        return PodCluster(device, pods, session, local)

    def run_job(self, case: Case, files: ProblemFiles, timeout_s: float = 600.0):
        """Prepare and run one job to the end; returns the scheduler's RunResult."""
        from scheduler.jobs.jobfile import build_job, path_to_uri
        from scheduler.jobs.prepare import prepare
        from scheduler.running.run import RunOptions

        cluster = self.cluster(case.device, case.pods)
        problem = case.problem
        uris = {name: path_to_uri(files.path(name)) for name in tensor_shapes(problem)}
        job = build_job(kernel_path(case), None, problem.dim, dict(problem.scalars), uris,
                        dict(case.cluster_values))
        prepared = prepare(job, files.folder / "job.capnp", [self.root], dict(case.cluster_values))
        options = RunOptions(storage_roots=(self.root,), heartbeat_timeout=30.0)
        return self.loop.run_until_complete(
            asyncio.wait_for(cluster.session.run(prepared, options), timeout_s))

    def close(self) -> None:
        for cluster in self.clusters.values():
            self.loop.run_until_complete(cluster.session.close())
            self.loop.run_until_complete(cluster.local.stop())
        self.clusters.clear()
        self.loop.run_until_complete(self.kj.__aexit__(None, None, None))
        self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)


async def _enter(kj) -> None:
    await kj.__aenter__()


def trace_figures(trace: dict) -> dict[str, float | int]:
    """What the runtime did, summed over nodes, from the scheduler's trace summary."""
    nodes = trace["summary"]["nodes"]
    return {
        "runtime_wall_s": trace["summary"]["wall_s"],
        "instructions": sum(n["instructions"] for n in nodes),
        "bytes_loaded": sum(n["bytes_loaded"] for n in nodes),
        "bytes_fetched": sum(n["bytes_fetched"] for n in nodes),
        "bytes_stored": sum(n["bytes_stored"] for n in nodes),
        "compute_s_total": sum(n["compute_s"] for n in nodes),
        "compute_s_busiest": max((n["compute_s"] for n in nodes), default=0.0),
        "units": len(trace.get("units", [])),
    }
