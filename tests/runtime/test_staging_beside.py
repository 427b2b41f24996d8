"""The outputs' staging copies are created beside the job's head (scheduler/running/run.py): the plans go
out at once and the pods load and compute while the copies are made, but no store writes before
they exist; a staging failure after the plans went out, and a Ctrl-C while the copies are made,
leave no copy behind and the outputs as they were, and the pods serve the next job.

Real pod processes on loopback and a session in this process, so that `create_staging` can be
held (a threading.Event) or made to fail. Each hold is released on an event (the pods' reports
reaching the scheduler, the interrupt being taken), never after a sleep. The hold stops the
thread BEFORE it creates the copy: a store that did not wait would find no file and fail the job.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import types

import numpy as np
import pytest

from common.errors import UserError
from scheduler.jobs.jobfile import read_job
from scheduler.jobs.prepare import prepare
from scheduler.running import interrupt
from scheduler.running import run as run_module
from scheduler.tracing.tracefile import TraceRecorder
from tests.faults.harness import hold_staging, staging_files
from tests.job_files import make_job, write_inputs
from tests.runtime.cluster import open_cluster, open_session, run_scheduler, start_pod

N = 4096
OLD = np.full(N, 7.0, np.float32)


@pytest.fixture()
def cluster(tmp_path):
    c, _, close = open_cluster(tmp_path, 2)  # one KJ loop a thread: a session per test
    yield c
    close()


def add_job(root):
    """An add job writing c (its old contents OLD): (job file, the sum it must write)."""
    rng = np.random.default_rng(5)
    arrays = {"a": rng.standard_normal(N).astype(np.float32), "b": rng.standard_normal(N).astype(np.float32)}
    write_inputs(root, {**arrays, "c": OLD})
    return make_job(root, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"}), arrays["a"] + arrays["b"]


@pytest.fixture()
def job(cluster):
    return add_job(cluster.root)


class Reports:
    """The kinds of the pods' instruction events, as they reach the scheduler; `seen(kind)` is an
    event set once one of that kind has arrived; `stores`: each store's (start, end), Unix times."""

    def __init__(self, monkeypatch):
        self.kinds: list[str] = []
        self.stores: list[tuple[float, float]] = []
        self._seen: dict[str, threading.Event] = {}
        real = TraceRecorder.add_event

        def add_event(recorder, node, generation, event, t0, accepted=True):
            self.kinds.append(event.kind)
            if event.kind == "store":
                self.stores.append((event.start, event.end))
            self.seen(event.kind).set()
            return real(recorder, node, generation, event, t0, accepted)

        monkeypatch.setattr(TraceRecorder, "add_event", add_event)

    def seen(self, kind: str) -> threading.Event:
        return self._seen.setdefault(kind, threading.Event())


def told_to_drop(monkeypatch) -> list[int]:
    """The nodes the scheduler tells to drop the job (JobRun._cancel), in order."""
    told, real = [], run_module.JobRun._cancel

    async def cancel(job_run, node):
        told.append(node)
        await real(job_run, node)

    monkeypatch.setattr(run_module.JobRun, "_cancel", cancel)
    return told


def test_pods_load_and_compute_while_the_copies_are_made_and_store_only_after(cluster, job, monkeypatch):
    path, expected = job
    reports = Reports(monkeypatch)
    release = threading.Event()
    waiting, _ = hold_staging(monkeypatch, release)
    before_release: list[str] = []
    released: list[float] = []

    def releaser():
        waiting.wait(60)
        reports.seen("compute").wait(60)  # the plans went out, and the pods loaded and computed
        before_release.extend(reports.kinds)
        released.append(time.time())  # the copy is made after this
        release.set()

    helper = threading.Thread(target=releaser, daemon=True)
    helper.start()
    result = cluster.run(path, cluster_values={"BLOCK": 1024})
    helper.join(10)
    assert result.ok, result.reason
    assert "load" in before_release and "compute" in before_release and "store" not in before_release
    np.testing.assert_array_equal(np.load(cluster.root / "c.npy"), expected)
    assert staging_files(cluster.root) == []
    # every store wrote after the copy was made, and the job's wait for it counts from the first
    # store that asked (a store event starts when it asks) to the copy's end, past the release
    [released_at] = released
    assert reports.stores and all(end > released_at for _, end in reports.stores)
    phases = result.trace["phases"]
    first_ask = min(start for start, _ in reports.stores) + 1e-5  # the phases are rounded to 1 us
    assert phases["staging"] > 0 and phases["staging_wait"] >= max(0.0, released_at - first_ask)
    assert phases["submit"] <= phases["run"]  # from the submission: the first instruction falls in the run


def full_disk(final_path, *args, **kwargs):
    raise UserError(f"{final_path}: cannot reserve 16512 bytes for its staging copy (No space left on "
                    "device); the output was not changed")


def test_a_staging_failure_after_the_plans_went_out_fails_the_job_and_leaves_nothing(tmp_path, monkeypatch):
    """On --keep-serving pods: they drop the failed job and serve the next one, of this session
    and of a new scheduler process."""
    path, expected = add_job(tmp_path)
    token = "staging-failure-test-0123456789"
    pods = [start_pod(tmp_path, token, "--keep-serving") for _ in range(2)]
    addresses = [address for _, address in pods]
    try:
        cluster, close = open_session(tmp_path, addresses, token)
        try:
            reports = Reports(monkeypatch)
            hold_staging(monkeypatch, reports.seen("load"), then=full_disk)  # fails once the pods read
            told = told_to_drop(monkeypatch)
            with pytest.raises(UserError) as failed:
                cluster.run(path, cluster_values={"BLOCK": 1024})
            assert str(failed.value).startswith(f"{tmp_path / 'c.npy'}: cannot reserve")
            assert "\n" not in str(failed.value)  # the one line the command prints, exit 2
            assert "store" not in reports.kinds
            assert sorted(told) == [0, 1]  # both pods told to drop the job
            assert staging_files(tmp_path) == []
            np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), OLD)
            monkeypatch.undo()  # the disk has room again: the same pods run the next job
            result = cluster.run(path, cluster_values={"BLOCK": 1024})
            assert result.ok, result.reason
        finally:
            close()
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), expected)
        np.save(tmp_path / "c.npy", OLD)
        done = run_scheduler(tmp_path, token, str(path), "--pods", ",".join(addresses),
                             "--cluster", "BLOCK=1024")
        assert done.returncode == 0, done.stdout + done.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), expected)
        assert all(pod.poll() is None for pod, _ in pods)
    finally:
        for pod, _ in pods:
            pod.kill()
            pod.wait()
            pod.stdout.close()


@pytest.mark.parametrize("create_first", [False, True])
def test_ctrl_c_while_the_copies_are_made_leaves_nothing_behind(cluster, job, monkeypatch, create_first):
    """SIGINT while the staging thread is held (before or after creating the copy): the job is
    interrupted (exit 130), the pods told to drop it, the copy removed once the thread is over."""
    path, expected = job
    taken = threading.Event()  # the interrupt was taken: the job is being stopped

    def write(text: str) -> None:
        if text.startswith("interrupted by SIGINT"):
            taken.set()

    monkeypatch.setattr(interrupt, "sys", types.SimpleNamespace(stderr=types.SimpleNamespace(
        write=write, flush=lambda: None)))
    waiting, over = hold_staging(monkeypatch, taken, create_first=create_first)
    told = told_to_drop(monkeypatch)

    def interrupter():
        waiting.wait(60)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupter, daemon=True).start()
    prepared = prepare(read_job(path), path, [cluster.root], {"BLOCK": 1024})
    running = interrupt.interruptible(cluster.session.run(prepared, cluster.options))
    with pytest.raises(interrupt.Interrupted) as stopped:
        cluster.loop.run_until_complete(running)
    assert stopped.value.exit_code == 130
    assert sorted(told) == [0, 1]
    assert over.wait(60)  # the thread is over (the job waited for it): nothing it made is left
    assert staging_files(cluster.root) == []
    np.testing.assert_array_equal(np.load(cluster.root / "c.npy"), OLD)
    monkeypatch.undo()
    result = cluster.run(path, cluster_values={"BLOCK": 1024})
    assert result.ok, result.reason
    np.testing.assert_array_equal(np.load(cluster.root / "c.npy"), expected)
