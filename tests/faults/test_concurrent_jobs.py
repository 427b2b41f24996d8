"""Concurrent jobs cannot tear an output (issue 16): a job holds an exclusive lock on each output
and a shared lock on each input until its commit ends; a second job that needs one of them fails
at once, naming the file, and the first job's files are untouched. Real scheduler processes."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from tests.faults.storage_run import REPO, env, job_file, kill_tree, leftovers, sched
from tests.job_files import JOB_KERNELS

M = 256


@pytest.fixture()
def folder(tmp_path):
    rng = np.random.default_rng(2)
    for name in ("A", "B", "C"):
        np.save(tmp_path / f"{name}.npy", rng.standard_normal((M, M)).astype(np.float32))
    return tmp_path


def start_stuck_job(job) -> subprocess.Popen:
    """A scheduler whose only pod stops (SIGSTOP) at its first compute: the job stays in flight,
    holding its locks and its staging copy, until the test kills it."""
    return subprocess.Popen(
        [sys.executable, "-m", "scheduler.main", str(job), "--local-pods", "1", "--heartbeat-timeout", "600"],
        cwd=REPO, env=env(PHOBOS_FAULT="stop-at=compute:1"), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_staging(folder, process, deadline_s: float = 120) -> list[str]:
    """Wait (for an event, polling) until the job's staging copy exists."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        staged = [n for n in leftovers(folder) if "phobos-staging" in n]
        if staged:
            return staged
        if process.poll() is not None:
            raise AssertionError(f"the first job ended early: {process.stderr.read().decode()}")
        time.sleep(0.05)
    raise AssertionError("the first job never created its staging copy")


def test_a_second_job_on_a_busy_output_fails_at_once_and_the_first_one_is_untouched(folder):
    matmul = JOB_KERNELS / "matmul.phk"
    tensors = {"A": "file:A.npy", "B": "file:B.npy", "C": "file:C.npy"}
    dims = {"M": M, "N": M, "K": M}
    job = job_file(folder, matmul, dims, tensors, {"alpha": 1.0, "beta": 1.0})
    old_c = np.load(folder / "C.npy")
    first = start_stuck_job(job)
    try:
        staged = wait_for_staging(folder, first)
        # the same job again: it reads and writes C
        done = sched([job, "--local-pods", "1"])
        line = done.one_line_error()
        assert f"tensor C: {folder / 'C.npy'} is in use by another phobos job" in line
        assert "this job did not start" in line
        # a job reading C while the first one writes it
        np.save(folder / "D.npy", np.zeros((M, M), np.float32))
        reader = job_file(folder, matmul, dims, {"A": "file:C.npy", "B": "file:B.npy", "C": "file:D.npy"},
                          {"alpha": 1.0, "beta": 0.0}, name="reader")
        line = sched([reader, "--local-pods", "1"]).one_line_error()
        assert "tensor A:" in line and "is being written by another phobos job (job " in line
        # a job writing the first one's input
        writer = job_file(folder, matmul, dims, {"A": "file:B.npy", "B": "file:B.npy", "C": "file:A.npy"},
                          {"alpha": 1.0, "beta": 0.0}, name="writer")
        line = sched([writer, "--local-pods", "1"]).one_line_error()
        assert "tensor C:" in line and "in use by another phobos job" in line
        assert [n for n in leftovers(folder) if "phobos-staging" in n] == staged  # never touched
        np.testing.assert_array_equal(np.load(folder / "C.npy"), old_c)
    finally:
        kill_tree(first)
    # The first scheduler was killed: its lock went with it, its staging copy is stale.
    done = sched([job, "--local-pods", "1"])
    assert done.code == 0, done.err
    assert f"note: removed {folder / staged[0]}" in done.err
    assert leftovers(folder) == []
    a, b = np.load(folder / "A.npy").astype(np.float64), np.load(folder / "B.npy").astype(np.float64)
    np.testing.assert_allclose(np.load(folder / "C.npy"), a @ b + old_c, rtol=1e-4, atol=1e-3)
