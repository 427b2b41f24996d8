"""A job's outputs commit all together or not at all (issue 16), also when the scheduler is
SIGKILLed at any step of the commit (PHOBOS_COMMIT_FAULT, common/commit.py): `phobos-sched
recover` or the next run of the job finishes or rolls back the cut commit and says which."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from common.commit import STEPS
from tests.faults.storage_run import leftovers, sched, two_output_job

OUTPUTS = 2  # the job writes s and d
# Up to and during the records the commit rolls back; from the first rename on it is finished.
CUTS = [(step, n) for step in STEPS for n in range(1, OUTPUTS + 1)]


def expect_new(step: str) -> bool:
    return STEPS.index(step) >= STEPS.index("rename")


@dataclass
class Job:
    path: Path
    new: dict
    old: dict


@pytest.fixture()
def job(tmp_path):
    path = two_output_job(tmp_path)
    a, b = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
    return Job(path, {"s": a + b, "d": a - b}, {"s": np.full_like(a, 1.0), "d": np.full_like(a, 2.0)})


def outputs(folder):
    return {name: np.load(folder / f"{name}.npy") for name in ("s", "d")}


@pytest.mark.parametrize(("step", "nth"), CUTS)
def test_a_commit_cut_at_any_step_is_finished_or_rolled_back_whole(job, step, nth):
    folder = job.path.parent
    for name, values in job.old.items():
        np.save(folder / f"{name}.npy", values)
    cut = sched([job.path, "--local-pods", "1"], PHOBOS_COMMIT_FAULT=f"kill-at={step}:{nth}")
    assert cut.code == -9, cut.err  # killed in the commit, after every unit was stored
    done = sched(["recover", job.path])
    assert done.code == 0, done.err
    want = job.new if expect_new(step) else job.old
    if step == "fsync" or (step == "record" and nth == 1):
        # no record on disk yet: only staging copies, removed as stale
        assert "a staging copy left by job" in done.out
    elif expect_new(step):
        # every record still there: finish (renaming what is left); one gone: only tidy up
        verb = "tidied up after job" if step == "forget" and nth > 1 else "finished the interrupted commit"
        assert verb in done.out, done.out
    else:
        assert "rolled back the interrupted commit" in done.out, done.out
    for name, values in outputs(folder).items():
        np.testing.assert_array_equal(values, want[name])
    assert leftovers(folder) == []
    assert "nothing to recover" in sched(["recover", job.path]).out


def test_the_next_run_of_the_job_finishes_a_cut_commit_and_says_so(job):
    folder = job.path.parent
    for name, values in job.old.items():
        np.save(folder / f"{name}.npy", values)
    cut = sched([job.path, "--local-pods", "1"], PHOBOS_COMMIT_FAULT="kill-at=rename:2")
    assert cut.code == -9
    mixed = outputs(folder)  # s renamed, d not: what a reader would see before any recovery
    np.testing.assert_array_equal(mixed["s"], job.new["s"])
    np.testing.assert_array_equal(mixed["d"], job.old["d"])
    done = sched([job.path, "--local-pods", "1"])
    assert done.code == 0, done.err
    assert "note: finished the interrupted commit of job" in done.err
    for name, values in outputs(folder).items():
        np.testing.assert_array_equal(values, job.new[name])
    assert leftovers(folder) == []
