"""scheduler/jobs/job_storage.py without pods: the locks a job holds, and `abandon` (the way out of
every job, a Ctrl-C's included) removing the staging copies and dropping the locks, once the
staging thread (`stage_beside`) is over: never racing it."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from common import storage
from common.errors import UserError
from common.locks import is_locked
from scheduler.jobs.job_storage import JobStorage
from scheduler.jobs.jobfile import read_job
from scheduler.jobs.prepare import prepare
from tests.faults.harness import hold_staging, staging_files
from tests.job_files import make_job, write_inputs

N = 1024


@pytest.fixture()
def prepared(tmp_path):
    write_inputs(tmp_path, {"a": np.zeros(N, np.float32), "b": np.ones(N, np.float32)})
    np.save(tmp_path / "c.npy", np.full(N, 5.0, np.float32))
    job = make_job(tmp_path, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    return lambda: prepare(read_job(job), job, [tmp_path])


def test_abandon_removes_staging_and_drops_locks(prepared, tmp_path):
    files = JobStorage.open(prepared())
    staged = files.stage()
    assert staged["c"].exists() and is_locked(tmp_path / "c.npy") and is_locked(tmp_path / "a.npy")
    # the job writes all of c: nothing of the old file is copied (every store fills its region)
    np.testing.assert_array_equal(np.load(staged["c"]), np.zeros(N, np.float32))
    with pytest.raises(UserError, match="tensor c: .* is in use by another phobos job"):
        JobStorage.open(prepared())
    files.abandon()
    assert not staged["c"].exists()
    assert not is_locked(tmp_path / "c.npy") and not is_locked(tmp_path / "a.npy")
    files.abandon()  # twice is fine
    JobStorage.open(prepared()).abandon()


def test_a_committed_job_releases_its_locks(prepared, tmp_path):
    files = JobStorage.open(prepared())
    staged = files.stage()
    files.commit()
    assert not staged["c"].exists() and not is_locked(tmp_path / "c.npy")
    assert sorted(p.name for p in tmp_path.iterdir() if "phobos-" in p.name and "lock" not in p.name) == []


def test_only_the_regions_no_unit_writes_are_copied(prepared, tmp_path, monkeypatch):
    job = prepared()
    units = job.program.units
    kept = units[: len(units) // 2]  # as if the job wrote only the first half of c
    job = dataclasses.replace(job, program=dataclasses.replace(job.program, units=kept))
    written = {r.start[0] + i for u in kept for launch in u.launches for _, r in launch.writes
               for i in range(r.shape[0])}
    files = JobStorage.open(job)
    try:
        staged = np.load(files.stage()["c"])
    finally:
        files.abandon()
    want = np.array([0.0 if i in written else 5.0 for i in range(N)], np.float32)
    np.testing.assert_array_equal(staged, want)
    assert 0 < len(written) < N


def test_an_output_written_whole_is_not_copied(prepared, monkeypatch):
    from common import storage

    def refuse(*args):
        raise AssertionError("the old output was copied although the job writes all of it")

    monkeypatch.setattr(storage, "copy_regions", refuse)
    files = JobStorage.open(prepared())
    try:
        files.stage()
    finally:
        files.abandon()


@pytest.mark.parametrize("create_first", [True, False])
def test_abandon_waits_for_the_staging_thread_and_leaves_nothing(prepared, tmp_path, monkeypatch,
                                                                 create_first):
    """Abandoned while the thread is creating a copy (Ctrl-C): it is removed once the thread is
    over, whether the thread had created it yet or not; never left behind, nor removed early."""
    release = threading.Event()
    entered, _ = hold_staging(monkeypatch, release, create_first=create_first)
    files = JobStorage.open(prepared())
    marks, outcome = [], []
    files.stage_beside(marks.append, outcome.append)
    assert entered.wait(30)
    abandoning = threading.Thread(target=files.abandon)
    abandoning.start()
    abandoning.join(0.2)
    assert abandoning.is_alive() and is_locked(tmp_path / "c.npy")  # waits for the thread
    release.set()
    abandoning.join(30)
    assert not abandoning.is_alive() and outcome == [None] and marks == ["staging_start", "staging_end"]
    assert staging_files(tmp_path) == []
    assert not is_locked(tmp_path / "c.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.full(N, 5.0, np.float32))


def test_a_staging_failure_in_the_thread_is_handed_over_and_leaves_no_copy(prepared, tmp_path, monkeypatch):
    def full(final_path, *args, **kwargs):
        raise UserError(f"{final_path}: cannot reserve 4224 bytes for its staging copy (No space left on "
                        "device); the output was not changed")

    monkeypatch.setattr(storage, "create_staging", full)
    files = JobStorage.open(prepared())
    done = threading.Event()
    outcome = []
    files.stage_beside(lambda name: None, lambda error: (outcome.append(error), done.set()))
    assert done.wait(30)
    [error] = outcome
    assert isinstance(error, UserError) and str(error).startswith(f"{tmp_path / 'c.npy'}: cannot reserve")
    files.abandon()
    assert staging_files(tmp_path) == []
    assert not is_locked(tmp_path / "c.npy")
