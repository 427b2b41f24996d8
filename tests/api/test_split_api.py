"""phobos.job(..., split=4, tree="binary"): the split is pinned in the job (the same bytes as
`new-job --split 4 --tree binary`), and phobos.run runs it over four CPU pods, every one computing;
a bad split is a phobos.Error before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import phobos

REPO = Path(__file__).resolve().parents[2]
KERNEL = REPO / "examples" / "jobs" / "matmul_split_k.phk"
DIMS = {"M": 256, "N": 256, "K": 16384}
TENSORS = {"A": "file:A.npy", "B": "file:B.npy", "C": "file:C.npy"}


def _inputs(folder: Path) -> np.ndarray:
    rng = np.random.default_rng(5)
    a = (np.floor(rng.uniform(-8, 8, (256, 16384))) / 8).astype(np.float32)  # exact sums in f32
    b = (np.floor(rng.uniform(-8, 8, (16384, 256))) / 8).astype(np.float32)
    for name, x in (("A", a), ("B", b), ("C", np.zeros((256, 256), np.float32))):
        np.save(folder / f"{name}.npy", x)
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def test_a_split_job_through_the_api(tmp_path):
    expected = _inputs(tmp_path)
    job = phobos.job(KERNEL, dims=DIMS, scalars={"alpha": 1.0, "beta": 0.0}, tensors=TENSORS,
                     base_dir=tmp_path, split=4, tree="binary")
    job.save(tmp_path / "api.capnp")
    flags = [f"--dim={k}={v}" for k, v in DIMS.items()] + ["--scalar=alpha=1.0", "--scalar=beta=0.0"]
    flags += [f"--tensor={k}={v}" for k, v in TENSORS.items()] + ["--split", "4", "--tree", "binary"]
    argv = [sys.executable, "-m", "scheduler.main", "new-job", str(KERNEL), *flags, "-o", "cli.capnp"]
    made = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "api.capnp").read_bytes() == (tmp_path / "cli.capnp").read_bytes()
    result = phobos.run(job, local_pods=4, storage_roots=[tmp_path])
    assert result.ok, result.reason
    assert {e["node"] for e in result.trace["events"] if e["kind"] == "compute"} == {0, 1, 2, 3}
    np.testing.assert_array_equal(np.load(tmp_path / "C.npy"), expected)


def test_a_bad_split_is_an_error_before_anything_runs(tmp_path):
    _inputs(tmp_path)
    with pytest.raises(phobos.Error, match="cannot split 4 chunk"):
        phobos.job(KERNEL, dims=DIMS, scalars={"alpha": 1.0, "beta": 0.0}, tensors=TENSORS,
                   base_dir=tmp_path, split=5)
    with pytest.raises(phobos.Error, match="unknown reduction tree 'ring'"):
        phobos.job(KERNEL, dims=DIMS, scalars={"alpha": 1.0, "beta": 0.0}, tensors=TENSORS,
                   base_dir=tmp_path, split=2, tree="ring")
