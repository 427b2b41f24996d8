"""The scheduler parses and checks a job's kernel once per job, tuner included.

Parses are counted inside the parser, by file name (tests/parse_counts.py), which tells the job's
own kernel apart from the generated leaves (whose names say "cluster leaf": none is parsed where
it is made).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.job_files import write_add_job
from tests.parse_counts import count_parses, leaf_parses


@pytest.fixture
def parses(monkeypatch) -> Counter:
    return count_parses(monkeypatch)


def _add_job(tmp_path) -> tuple[str, np.ndarray]:
    job, want = write_add_job(tmp_path, seed=3)
    return job.kernel_file, want


def _kernel_parses(parses: Counter, kernel_file: str) -> int:
    return sum(n for name, n in parses.items() if name == kernel_file)


@pytest.mark.parametrize("tuned", [False, True], ids=["plain", "autotune"])
def test_one_parse_of_the_kernel_per_job(tmp_path, monkeypatch, capsys, parses, tuned):
    from scheduler.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("scheduler.pods.local_pods.visible_gpus", lambda: 0)  # CPU pods even on a GPU machine
    kernel_file, want = _add_job(tmp_path)
    parses.clear()  # building the job parsed it; that is `new-job`, not this run
    flags = ["--autotune", "--nodes", "2"] if tuned else []
    rc = main([str(tmp_path / "add.job"), "--local-pods", "2", "--storage-root", str(tmp_path), *flags])
    out = capsys.readouterr().out
    assert rc == 0, out
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), want)
    assert _kernel_parses(parses, kernel_file) == 1, dict(parses)
    # the cluster compiler makes its leaves as IR from the kernel's (compiler/cluster/leaves.py):
    # the scheduler parses no leaf, tuner or not (the CPU pods parse each leaf's text in their own
    # processes, once per job: tests/pod)
    assert leaf_parses(parses) == {}, dict(parses)
    assert sum(parses.values()) == 1, dict(parses)
