"""How often a job's kernel is parsed in the process that makes and runs it: the user's kernel
once (its checked IR goes on to new-job's checks, the cluster compiler and the run), whether
through the command line (`new-job`, then the job) or `phobos.run(phobos.job(path))`. Each
cluster compile also checks the leaves it made (compiler/cluster/leaves.py: leaves are still
made as source text and parsed back; issue 34 item 3 would make them IR)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import phobos
from compiler import pipeline
from scheduler import cli

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "examples" / "jobs" / "matmul.phk"
DIMS = {"M": 256, "N": 256, "K": 256}


@pytest.fixture()
def parses(monkeypatch, tmp_path):
    """The files parsed in this process (pipeline.parse_stage is the parser's one caller)."""
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path / "cache"))
    seen: Counter = Counter()
    real = pipeline.parse

    def counting(text: str, filename: str):
        seen[filename] += 1
        return real(text, filename)

    monkeypatch.setattr(pipeline, "parse", counting)
    for tensor in "AB":
        np.save(tmp_path / f"{tensor}.npy", np.ones((256, 256), np.float32))
    np.save(tmp_path / "C.npy", np.zeros((256, 256), np.float32))
    monkeypatch.chdir(tmp_path)
    return seen


def _by_kind(seen: Counter) -> tuple[int, int]:
    """(parses of the user's file, parses of cluster leaves)."""
    user = sum(n for name, n in seen.items() if "(cluster leaf" not in name)
    return user, sum(seen.values()) - user


def test_the_command_line_parses_the_kernel_once_per_command(parses, tmp_path):
    flags = [f"--dim={k}={v}" for k, v in DIMS.items()] + ["--scalar=alpha=1", "--scalar=beta=0"]
    flags += [f"--tensor={t}=file:{t}.npy" for t in "ABC"]
    assert cli.main(["new-job", str(KERNEL), *flags, "-o", "job.capnp"]) == 0
    assert _by_kind(parses) == (1, 2)  # init and step, checked once by new-job's cluster compile
    parses.clear()
    assert cli.main(["job.capnp", "--local-pods", "1", "--storage-root", str(tmp_path)]) == 0
    assert _by_kind(parses) == (1, 2)
    assert np.array_equal(np.load(tmp_path / "C.npy"), np.full((256, 256), 256.0, np.float32))


def test_phobos_run_of_phobos_job_parses_the_kernel_once(parses, tmp_path):
    job = phobos.job(KERNEL, dims=DIMS, scalars={"alpha": 1.0, "beta": 0.0},
                     tensors={t: f"file:{t}.npy" for t in "ABC"}, base_dir=tmp_path)
    result = phobos.run(job, local_pods=1, storage_roots=[tmp_path])
    assert result.ok, result.reason
    # the job's checks and its run each compile the cluster program: the leaves are checked twice
    assert _by_kind(parses) == (1, 4)
    assert np.array_equal(np.load(tmp_path / "C.npy"), np.full((256, 256), 256.0, np.float32))
