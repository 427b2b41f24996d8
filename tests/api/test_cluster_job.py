"""phobos.job / phobos.run / phobos.run_async on local CPU pods: the job file and the output are
the same bytes as through the command line (`phobos-sched new-job`, `phobos-sched JOB`, each a
real process); cancelling run_async stops the job as Ctrl-C does (pods told, staging removed,
outputs as they were); mistakes are phobos.Error before anything runs."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import phobos
from tests.faults.harness import staging_files, wait_until

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "examples" / "jobs"
DIMS = {"M": 256, "N": 256, "K": 256}
SCALARS = {"alpha": 2.0, "beta": 0.5}
TENSORS = {"A": "file:data/A.npy", "B": "file:data/B.npy", "C": "file:out/C.npy"}


def _folder(root: Path, name: str) -> Path:
    folder = root / name
    (folder / "data").mkdir(parents=True)
    (folder / "out").mkdir()
    rng = np.random.default_rng(7)
    for tensor, shape in (("A", (256, 256)), ("B", (256, 256))):
        values = np.floor(rng.uniform(-64, 64, shape)) / 64  # exact in f32, sums too
        np.save(folder / "data" / f"{tensor}.npy", values.astype(np.float32))
    np.save(folder / "out" / "C.npy", np.full((256, 256), 3.0, np.float32))
    return folder


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "scheduler.main", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _expected(folder: Path) -> np.ndarray:
    a = np.load(folder / "data" / "A.npy").astype(np.float64)
    b = np.load(folder / "data" / "B.npy").astype(np.float64)
    return (2.0 * (a @ b) + 0.5 * 3.0).astype(np.float32)


def test_a_job_through_the_api_gives_the_command_lines_bytes(tmp_path):
    cli_folder, api_folder = _folder(tmp_path, "cli"), _folder(tmp_path, "api")
    flags = [f"--dim={k}={v}" for k, v in DIMS.items()] + [f"--scalar={k}={v}" for k, v in SCALARS.items()]
    flags += [f"--tensor={k}={v}" for k, v in TENSORS.items()]
    made = _cli("new-job", str(JOBS / "matmul.phk"), *flags, "-o", "job.capnp", cwd=cli_folder)
    assert made.returncode == 0, made.stderr
    ran = _cli("job.capnp", "--local-pods", "2", cwd=cli_folder)
    assert ran.returncode == 0, ran.stderr

    kernel = phobos.load(JOBS / "matmul.phk")
    job = phobos.job(kernel, dims=DIMS, scalars=SCALARS, tensors=TENSORS, base_dir=api_folder)
    job.save(api_folder / "job.capnp")
    assert (api_folder / "job.capnp").read_bytes() == (cli_folder / "job.capnp").read_bytes()
    result = phobos.run(job, local_pods=2, storage_roots=[api_folder])

    assert result.ok and result.reason == "" and result.failures == []
    first_line = result.summary.splitlines()[0]  # job ID (matmul, 4 units on 2 nodes) succeeded
    assert first_line.startswith(f"job {result.job_id} ") and first_line.split(" ", 2)[2] in ran.stdout
    assert result.outputs == {"C": api_folder / "out" / "C.npy"}
    assert {e["kind"] for e in result.trace["events"]} >= {"load", "compute", "store"}
    assert (api_folder / "out" / "C.npy").read_bytes() == (cli_folder / "out" / "C.npy").read_bytes()
    np.testing.assert_array_equal(np.load(api_folder / "out" / "C.npy"), _expected(api_folder))


def test_run_async_and_a_loaded_job(tmp_path):
    folder = _folder(tmp_path, "async")
    phobos.job(JOBS / "matmul.phk", dims=DIMS, scalars=SCALARS, tensors=TENSORS,
               base_dir=folder).save(folder / "job.capnp")
    job = phobos.ClusterJob.load(folder / "job.capnp")
    assert job.kernel_name == "matmul" and job.dims == DIMS and job.tensors == TENSORS

    async def main():
        return await phobos.run_async(job, local_pods=2, storage_roots=[folder])

    result = asyncio.run(main())
    assert result.ok
    np.testing.assert_array_equal(np.load(folder / "out" / "C.npy"), _expected(folder))


def test_cancelling_run_async_stops_the_job_in_order(tmp_path, monkeypatch):
    n = 4096
    np.save(tmp_path / "a.npy", np.arange(n, dtype=np.float32))
    np.save(tmp_path / "b.npy", np.ones(n, np.float32))
    np.save(tmp_path / "c.npy", np.full(n, 7.0, np.float32))
    before = (tmp_path / "c.npy").read_bytes()
    monkeypatch.setenv("PHOBOS_FAULT", "slow-at=compute:1:600")  # the local pods' first compute waits
    job = phobos.job(JOBS / "add.phk", dims={"N": n}, base_dir=tmp_path,
                     tensors={"a": "file:a.npy", "b": "file:b.npy", "c": "file:c.npy"})

    async def main():
        task = asyncio.ensure_future(phobos.run_async(job, local_pods=2, storage_roots=[tmp_path],
                                                      cluster_values={"BLOCK": 1024}))
        await asyncio.to_thread(wait_until, lambda: staging_files(tmp_path), 120, "the job's staging file")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert staging_files(tmp_path) == []
    assert (tmp_path / "c.npy").read_bytes() == before


def test_mistakes_are_errors_before_anything_runs(tmp_path):
    folder = _folder(tmp_path, "bad")
    with pytest.raises(phobos.Error, match="kernel matmul has no dimension Q"):
        phobos.job(JOBS / "matmul.phk", dims={**DIMS, "Q": 1}, scalars=SCALARS, tensors=TENSORS,
                   base_dir=folder)
    job = phobos.job(JOBS / "matmul.phk", dims=DIMS, scalars=SCALARS, tensors=TENSORS, base_dir=folder)
    with pytest.raises(phobos.Error, match="local_pods and pods exclude each other"):
        phobos.run(job, pods=["127.0.0.1:1"], local_pods=2, storage_roots=[folder])
    with pytest.raises(phobos.Error, match="not a directory"):
        phobos.run(job, storage_roots=[folder / "nowhere"])
    shutil.rmtree(folder / "data")
    with pytest.raises(phobos.Error, match=r"data/A.npy: no such file"):
        phobos.run(job, local_pods=2, storage_roots=[folder])
    assert not list((folder / "out").glob(".*"))
