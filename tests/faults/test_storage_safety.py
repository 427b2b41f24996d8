"""Hostile storage (issue 16): outputs sharing a file, FIFOs, truncated files, full disks,
read-only folders, huge unit counts and closed pipes each end as one clear line, with every
output unchanged and no staging file left. Real scheduler processes on real files."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.faults.storage_run import (
    TWO_OUTPUTS,
    N,
    env,
    job_file,
    leftovers,
    mounted_tmpfs,
    sched,
    two_output_job,
)
from tests.job_files import JOB_KERNELS

ADD = JOB_KERNELS / "add.phk"


def new_job(folder, kernel, tensors: dict[str, str]):
    args = ["new-job", kernel, "--dim", f"N={N}", "-o", folder / "job.capnp"]
    for name, uri in tensors.items():
        args += ["--tensor", f"{name}={uri}"]
    return sched(args)


@pytest.fixture()
def folder(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(N, dtype=np.float32))
    np.save(tmp_path / "b.npy", np.ones(N, np.float32))
    return tmp_path


def test_new_job_refuses_two_outputs_in_one_file(folder):
    (folder / "link.npy").symlink_to(folder / "s.npy")
    np.save(folder / "old.npy", np.zeros(N, np.float32))
    os.link(folder / "old.npy", folder / "hard.npy")
    for s, d in (("s", "s"), ("s", "link"), ("old", "hard")):
        done = new_job(folder, TWO_OUTPUTS, {"a": "file:a.npy", "b": "file:b.npy", "s": f"file:{s}.npy",
                                             "d": f"file:{d}.npy"})
        assert "are both outputs and name one file" in done.one_line_error()
    assert not (folder / "job.capnp").exists()


def test_new_job_refuses_an_output_that_is_an_input(folder):
    (folder / "alias.npy").symlink_to(folder / "a.npy")
    for c in ("a", "alias"):
        done = new_job(folder, ADD, {"a": "file:a.npy", "b": "file:b.npy", "c": f"file:{c}.npy"})
        assert "inputs are only read" in done.one_line_error()
    # two inputs may share a file
    done = new_job(folder, ADD, {"a": "file:a.npy", "b": "file:alias.npy", "c": "file:c.npy"})
    assert done.code == 0, done.err


def test_the_scheduler_refuses_shared_files_before_any_pod(folder):
    (folder / "link.npy").symlink_to(folder / "s.npy")
    old = np.full(N, 7.0, np.float32)
    np.save(folder / "s.npy", old)
    job = job_file(folder, TWO_OUTPUTS, {"N": N}, {"a": "file:a.npy", "b": "file:b.npy", "s": "file:s.npy",
                                                    "d": "file:link.npy"})
    assert "are both outputs" in sched([job, "--local-pods", "1"]).one_line_error()
    job = job_file(folder, ADD, {"N": N}, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:a.npy"})
    assert "inputs are only read" in sched([job, "--local-pods", "1"]).one_line_error()
    np.testing.assert_array_equal(np.load(folder / "s.npy"), old)
    np.testing.assert_array_equal(np.load(folder / "a.npy"), np.arange(N, dtype=np.float32))
    assert leftovers(folder) == []


def test_a_fifo_in_the_storage_root_is_refused_not_waited_on(folder):
    os.mkfifo(folder / "pipe.npy")
    job = job_file(folder, ADD, {"N": N}, {"a": "file:a.npy", "b": "file:pipe.npy", "c": "file:c.npy"})
    line = sched([job, "--local-pods", "1"], timeout=60).one_line_error()
    assert "pipe.npy: not a regular file (a FIFO)" in line
    job = job_file(folder, ADD, {"N": N}, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:pipe.npy"})
    assert "not a regular file (a FIFO)" in sched([job, "--local-pods", "1"], timeout=60).one_line_error()
    job = job_file(folder, ADD, {"N": N}, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:c.npy"})
    done = sched([job, "--local-pods", "1", "--expect", f"c={folder / 'pipe.npy'}"], timeout=60)
    assert "not a regular file (a FIFO)" in done.one_line_error()


def test_a_truncated_input_is_refused_naming_it(folder):
    data = (folder / "b.npy").read_bytes()
    (folder / "short.npy").write_bytes(data[:-100])
    job = job_file(folder, ADD, {"N": N}, {"a": "file:a.npy", "b": "file:short.npy", "c": "file:c.npy"})
    line = sched([job, "--local-pods", "1"]).one_line_error()
    assert f"{folder / 'short.npy'}: truncated .npy file" in line
    assert not (folder / "c.npy").exists() and leftovers(folder) == []


def test_a_read_only_output_folder_is_found_before_the_pods_start(folder):
    with mounted_tmpfs(folder / "ro", "ro,size=1m") as ro:
        job = job_file(folder, ADD, {"N": N}, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:ro/c.npy"})
        done = sched([job, "--local-pods", "1", "--storage-root", folder])
        assert f"folder {ro} is not writable" in done.one_line_error()
        assert "PHOBOS_POD" not in done.out and "pod" not in done.err.lower()
        (folder / "job.capnp").unlink()
        refused = new_job(folder, ADD, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:ro/c.npy"})
        assert f"folder {ro} is not writable" in refused.one_line_error()  # new-job finds it too
        assert not (folder / "job.capnp").exists()


def test_a_job_with_too_many_units_is_refused_before_it_exhausts_memory(folder):
    big = 1 << 35  # under the 2^36-element limit, but 2^27 super-tiles of 256
    job = job_file(folder, ADD, {"N": big}, {"a": "file:x.npy", "b": "file:y.npy", "c": "file:z.npy"})
    done = sched([job, "--cluster", "BLOCK=256", "--local-pods", "1"], address_space=4 << 30)
    assert "units of work" in done.one_line_error() and "choose larger @cluster values" in done.err


def test_show_job_into_a_closed_pipe_stops_quietly(folder):
    import subprocess
    import sys

    job = job_file(folder, ADD, {"N": N}, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:c.npy"})
    read_end, write_end = os.pipe()
    os.close(read_end)  # `show-job JOB | head` after head has exited
    from tests.faults.storage_run import REPO

    done = subprocess.run([sys.executable, "-m", "scheduler.main", "show-job", str(job)], cwd=REPO, env=env(),
                          stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""


def test_a_full_disk_fails_naming_the_output_and_keeps_the_old_one(folder):
    n = 1 << 17  # 512 KiB of f32; the 1 MiB disk holds the old output but not a staging copy too
    rng = np.random.default_rng(1)
    for name in ("a", "b"):
        np.save(folder / f"{name}.npy", rng.standard_normal(n).astype(np.float32))
    with mounted_tmpfs(folder / "disk", "size=1m") as disk:
        old = np.full(n, 3.0, np.float32)
        np.save(disk / "c.npy", old)
        job = job_file(folder, ADD, {"N": n}, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:disk/c.npy"})
        done = sched([job, "--local-pods", "1", "--storage-root", folder])
        line = done.one_line_error()
        assert f"{disk / 'c.npy'}: cannot reserve" in line and "No space left on device" in line
        np.testing.assert_array_equal(np.load(disk / "c.npy"), old)
        assert leftovers(disk) == []
        # No old output, and a disk too small for the new one: pods never write into a hole.
        (disk / "c.npy").unlink()
        np.save(disk / "filler.npy", np.zeros(3 * n // 2, np.float32))
        done = sched([job, "--local-pods", "1", "--storage-root", folder])
        assert f"{disk / 'c.npy'}: cannot reserve" in done.one_line_error()
        assert not (disk / "c.npy").exists() and leftovers(disk) == []


def test_stale_staging_of_a_killed_job_is_reported_and_removed(folder):
    stale = folder / ".c.npy.phobos-staging-20260101-000000-deadbeef"
    stale.write_bytes(b"left by a scheduler killed with -9")
    other = folder / ".other.npy.phobos-staging-20260101-000000-deadbeef"  # not this job's tensor
    other.write_bytes(b"x")
    half = folder / "..c.npy.phobos-commit-20260101-000000-deadbeef.k2j4_x.tmp"  # a record cut mid-write
    half.write_bytes(b'{"format": "phobos-co')
    job = job_file(folder, ADD, {"N": N}, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:c.npy"})
    done = sched([job, "--local-pods", "1"])
    assert done.code == 0, done.err
    assert f"note: removed {stale}, a staging copy left by job 20260101-000000-deadbeef" in done.err
    assert f"note: removed {half}, a commit record that a stopped job had not finished writing" in done.err
    assert not stale.exists() and not half.exists() and other.exists()
    np.testing.assert_array_equal(np.load(folder / "c.npy"), np.arange(N, dtype=np.float32) + 1)


def test_two_output_job_runs(folder):
    job = two_output_job(folder)
    done = sched([job, "--local-pods", "1"])
    assert done.code == 0, done.err
    a, b = np.load(folder / "a.npy"), np.load(folder / "b.npy")
    np.testing.assert_array_equal(np.load(folder / "s.npy"), a + b)
    np.testing.assert_array_equal(np.load(folder / "d.npy"), a - b)


def test_a_disk_that_fills_up_before_the_commit_record_rolls_the_commit_back(folder):
    n = 4096  # 16 KiB + header: 5 pages of tmpfs, for the old output and again for the staging copy
    np.save(folder / "a.npy", np.ones(n, np.float32))
    np.save(folder / "b.npy", np.ones(n, np.float32))
    # 11 pages: the old output (5), the lock file with its holder's name (1), the staging copy (5),
    # and not one more for the commit record
    with mounted_tmpfs(folder / "disk", "size=44k") as disk:
        old = np.full(n, 3.0, np.float32)
        np.save(disk / "c.npy", old)
        job = job_file(folder, ADD, {"N": n}, {"a": "file:a.npy", "b": "file:b.npy", "c": "file:disk/c.npy"})
        done = sched([job, "--local-pods", "1", "--storage-root", folder])
        assert done.code == 1, done.err
        assert "cannot write the commit record" in done.err and "no output was changed" in done.err
        np.testing.assert_array_equal(np.load(disk / "c.npy"), old)
        assert leftovers(disk) == [] and "Traceback" not in done.err
