"""phobos.job / phobos.run / phobos.run_async on local CPU pods: the job file and the output are
the same bytes as through the command line (`phobos-sched new-job`, `phobos-sched JOB`, each a
real process); cancelling run_async stops the job as Ctrl-C does (pods told, staging removed,
outputs as they were); mistakes are phobos.Error before anything runs."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import phobos
from scheduler.pods.local_pods import READY_LINE, new_token
from tests.api.test_python_doc import program_env
from tests.faults.harness import child_pids, process_alive, staging_files, wait_until

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
    env = program_env()
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


def _slow_add_job(folder: Path) -> phobos.ClusterJob:
    """A 4-unit add whose pods, started with PHOBOS_FAULT=slow-at=compute:1:600, hold their first
    compute ten minutes (staying responsive): a job that is surely running when stopped."""
    np.save(folder / "a.npy", np.arange(N_ADD, dtype=np.float32))
    np.save(folder / "b.npy", np.ones(N_ADD, np.float32))
    np.save(folder / "c.npy", np.full(N_ADD, 7.0, np.float32))
    return phobos.job(JOBS / "add.phk", dims={"N": N_ADD}, base_dir=folder,
                      tensors={"a": "file:a.npy", "b": "file:b.npy", "c": "file:c.npy"})


N_ADD = 4096
SLOW = "slow-at=compute:1:600"


def _cancel_once(running, job: phobos.ClusterJob, folder: Path, **where) -> None:
    """run_async the job on `where` (local_pods= or pods=), cancel it once `running()` holds, and
    see CancelledError reach the caller."""
    async def main():
        task = asyncio.ensure_future(phobos.run_async(job, storage_roots=[folder],
                                                      cluster_values={"BLOCK": 1024}, **where))
        await asyncio.to_thread(wait_until, running, 120, "the job to run")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_cancelling_run_async_stops_the_job_in_order(tmp_path, monkeypatch):
    job = _slow_add_job(tmp_path)
    before = (tmp_path / "c.npy").read_bytes()
    monkeypatch.setenv("PHOBOS_FAULT", SLOW)  # reaches the local pods
    _cancel_once(lambda: staging_files(tmp_path), job, tmp_path, local_pods=2)
    assert staging_files(tmp_path) == []
    assert (tmp_path / "c.npy").read_bytes() == before


def _pod(folder: Path, token: str, log: Path, fault: str) -> tuple[subprocess.Popen, str]:
    """A pod process that outlives its schedulers (--keep-serving), as pods given by address do."""
    env = program_env(PHOBOS_TOKEN=token, PHOBOS_FAULT=fault)
    argv = [sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0", "--device", "cpu",
            "--storage-root", str(folder), "--keep-serving", "--log-level", "info"]
    with open(log, "wb") as err:
        pod = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=err, text=True)
    line = pod.stdout.readline()  # the pod's first line: its address, once it listens
    assert line.startswith(READY_LINE), (line, log.read_text()[-2000:])
    return pod, line[len(READY_LINE):].strip()


def test_cancelling_a_job_on_pods_given_by_address_tells_the_pods(tmp_path):
    """The pods outlive the job: cancelled once both hold their plan (each pod's first compute
    held until a file appears), they are told to drop it (each logs the scheduler's cancel), stay
    up, and run the job again once the hold is released; staging is gone, the output as it was."""
    job = _slow_add_job(tmp_path)
    before = (tmp_path / "c.npy").read_bytes()
    token, release = new_token(), tmp_path / "release"
    logs = [tmp_path / f"pod{i}.log" for i in range(2)]
    pods = [_pod(tmp_path, token, log, f"hold-at=compute:1:{release}") for log in logs]
    try:
        addresses = [address for _, address in pods]

        def plans_held() -> bool:
            return bool(staging_files(tmp_path)) and all("plan submitted" in log.read_text() for log in logs)

        _cancel_once(plans_held, job, tmp_path, pods=addresses, token=token)
        assert staging_files(tmp_path) == []
        assert (tmp_path / "c.npy").read_bytes() == before
        for log in logs:
            assert "job cancelled by the scheduler" in log.read_text(), log.read_text()[-3000:]
        assert all(pod.poll() is None for pod, _ in pods)
        release.touch()
        result = phobos.run(job, pods=addresses, token=token, storage_roots=[tmp_path],
                            cluster_values={"BLOCK": 1024})
        assert result.ok and result.failures == []
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.arange(N_ADD, dtype=np.float32) + 1)
        for log in logs:  # pods that outlive the job are told to drop it when it ends well too
            assert log.read_text().count("job cancelled by the scheduler") == 2, log.read_text()[-3000:]
    finally:
        for pod, _ in pods:
            pod.kill()
            pod.wait()
            pod.stdout.close()


CTRL_C_PROGRAM = """
import sys

import phobos

job = phobos.ClusterJob.load(sys.argv[1])
try:
    phobos.run(job, local_pods=2, storage_roots=[sys.argv[2]], cluster_values={"BLOCK": 1024})
except phobos.Interrupted as err:
    print("interrupted", err.exit_code, flush=True)
    sys.exit(err.exit_code)
"""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_a_blocking_run_as_on_the_command_line(tmp_path, sig, code):
    """A program blocked in phobos.run gets Ctrl-C (or SIGTERM): the job stops in order (staging
    removed, output as it was, local pods gone) and phobos.Interrupted carries the exit code."""
    _slow_add_job(tmp_path).save(tmp_path / "job.capnp")
    before = (tmp_path / "c.npy").read_bytes()
    env = program_env(PHOBOS_FAULT=SLOW)
    with open(tmp_path / "program.err", "w") as err:
        program = subprocess.Popen([sys.executable, "-c", CTRL_C_PROGRAM, str(tmp_path / "job.capnp"),
                                    str(tmp_path)], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                   stderr=err, text=True)
    try:
        wait_until(lambda: staging_files(tmp_path) or program.poll() is not None, 120, "the job to start")
        pods = child_pids(program.pid)
        assert program.poll() is None and len(pods) == 2, (tmp_path / "program.err").read_text()[-3000:]
        program.send_signal(sig)
        out, _ = program.communicate(timeout=120)
    finally:
        if program.poll() is None:
            program.kill()
    err = (tmp_path / "program.err").read_text()
    assert (program.returncode, out) == (code, f"interrupted {code}\n"), err[-3000:]
    assert staging_files(tmp_path) == []
    assert (tmp_path / "c.npy").read_bytes() == before
    wait_until(lambda: all(not process_alive(p) for p in pods), 30, "the local pods to exit")


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


def test_a_job_is_checked_as_new_job_checks_it(tmp_path):
    """phobos.job runs new-job's checks: what can never run is an Error at once, new-job's
    warnings are UserWarnings naming the tensor."""
    with pytest.raises(phobos.Error, match=r"tensor C: folder .*/out does not exist"):
        phobos.job(JOBS / "matmul.phk", dims=DIMS, scalars=SCALARS, tensors=TENSORS, base_dir=tmp_path)
    (tmp_path / "out").mkdir()
    with pytest.warns(UserWarning) as record:
        phobos.job(JOBS / "matmul.phk", dims=DIMS, scalars=SCALARS, tensors=TENSORS, base_dir=tmp_path)
    said = [str(w.message) for w in record]
    assert [line.split(":")[0] for line in said] == ["tensor A", "tensor B", "tensor C"], said
    assert "A.npy does not exist yet; the kernel reads it" in said[0]
    assert "the kernel reads its old values at" in said[2]  # beta * C
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "A.npy", np.ones((200, 256), np.float32))  # M = 256 asked
    with pytest.raises(phobos.Error) as info:
        phobos.job(JOBS / "matmul.phk", dims=DIMS, scalars=SCALARS, tensors=TENSORS, base_dir=tmp_path)
    assert str(info.value) == ("error: dims={'M': 256} conflicts with tensor A: file:data/A.npy has shape "
                               "[200, 256], so M = 200")


def test_a_lost_node_is_in_the_results_failures_and_a_thread_may_run_the_job(tmp_path):
    """Three pods given by address, one of which dies at its first compute: the job is re-planned
    on the two others and succeeds, and JobResult.failures names the lost node. The blocking
    run is called from a worker thread (signals stay the program's; the job runs all the same)."""
    job = _slow_add_job(tmp_path)
    token = new_token()
    faults = ["", "", "kill-at=compute:1"]
    pods = [_pod(tmp_path, token, tmp_path / f"pod{i}.log", fault) for i, fault in enumerate(faults)]
    results: list = []
    try:
        worker = threading.Thread(target=lambda: results.append(phobos.run(
            job, pods=[address for _, address in pods], token=token, storage_roots=[tmp_path],
            cluster_values={"BLOCK": 1024}, heartbeat_interval=0.1, heartbeat_timeout=1.0)))
        worker.start()
        worker.join(timeout=240)
        assert not worker.is_alive() and len(results) == 1
    finally:
        for pod, _ in pods:
            pod.kill()
            pod.wait()
            pod.stdout.close()
    result = results[0]
    assert result.ok, result.reason
    assert [f["node"] for f in result.failures] == [2], result.failures
    lost = result.failures[0]
    named = f"node 2 ({pods[2][1]}) lost at {lost['time']:.3f} s: {lost['reason']}"
    assert lost["reason"] and named in result.summary, result.summary  # by its address, as --pods gave it
    assert "re-planned" in result.summary and "from node 2" in result.summary, result.summary
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.arange(N_ADD, dtype=np.float32) + 1)
