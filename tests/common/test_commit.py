"""common/commit.py on real files: a commit record is trusted only for its own job's staging
copies beside their outputs, so a planted record cannot make recovery move other files."""

from __future__ import annotations

import json
import os
import threading

import pytest

from common import commit
from common.errors import UserError
from common.storage import staging_path


def plant(folder, job: str, pairs: list[tuple[str, str]], beside: str = "c.npy"):
    record = commit.record_path(folder / beside, job)
    outputs = [{"staging": str(folder / s), "final": str(folder / f)} for s, f in pairs]
    record.write_text(json.dumps({"format": commit.RECORD_FORMAT, "job": job, "outputs": outputs}))
    return record


def test_a_record_naming_another_file_as_staging_is_refused(tmp_path):
    (tmp_path / "precious.npy").write_bytes(b"keep")
    record = plant(tmp_path, "j1", [("precious.npy", "c.npy")])
    with pytest.raises(UserError, match="not the staging copy of"):
        commit.read_record(record)
    assert (tmp_path / "precious.npy").read_bytes() == b"keep"


def test_a_record_that_does_not_name_its_own_output_is_refused(tmp_path):
    other = staging_path(tmp_path / "d.npy", "j1").name
    record = plant(tmp_path, "j1", [(other, "d.npy")])
    with pytest.raises(UserError, match="does not name the output beside it"):
        commit.read_record(record)


def test_a_garbled_record_is_refused_naming_it(tmp_path):
    record = commit.record_path(tmp_path / "c.npy", "j1")
    record.write_text('{"format": "phobos-co')
    with pytest.raises(UserError, match="not a readable commit record"):
        commit.read_record(record)


def test_commit_all_leaves_nothing_but_the_outputs(tmp_path):
    pairs = []
    for name in ("c", "d"):
        final = tmp_path / f"{name}.npy"
        staging = staging_path(final, "j2")
        staging.write_bytes(name.encode())
        pairs.append(commit.Pair(staging, final))
    commit.commit_all("j2", pairs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npy", "d.npy"]
    assert (tmp_path / "d.npy").read_bytes() == b"d"


def _fds() -> dict[int, str]:
    """This process's open descriptors and what each names (a replaced file ends in '(deleted)')."""
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return fds


def test_commit_all_marks_its_steps_and_frees_the_old_output_after_it(tmp_path):
    old, new = tmp_path / "c.npy", tmp_path / "d.npy"
    old.write_bytes(b"old")
    pairs = []
    for final in (old, new):
        staging = staging_path(final, "j3")
        staging.write_bytes(b"new " + final.name.encode())
        pairs.append(commit.Pair(staging, final))
    before = _fds()
    marks, held = [], []

    def mark(name):
        marks.append(name)
        if name == "commit_renamed":  # renamed, yet the old c.npy is still open, not yet freed
            held.extend(t for fd, t in _fds().items() if fd not in before and t.endswith("(deleted)"))

    commit.commit_all("j3", pairs, mark)
    assert marks == ["commit_synced", "commit_recorded", "commit_renamed"]
    assert held == [f"{old} (deleted)"]  # the one old output; d.npy had none
    assert old.read_bytes() == b"new c.npy" and new.read_bytes() == b"new d.npy"
    for thread in [t for t in threading.enumerate() if t.name == "commit-old-outputs"]:
        thread.join(10)
    assert _fds().keys() <= before.keys()  # the old file let go of: nothing left open
