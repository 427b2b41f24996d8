"""Job files and inputs for the tests that run jobs on real pods (tests/runtime, tests/faults)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.paths import repo_file
from scheduler.jobs.jobfile import build_job, write_job

# Not resolved: under Bazel that would lead out of the runfiles tree into the checkout, and what
# the tests write there (make_inputs.py's bytecode) would change the //examples filegroup.
EXAMPLES = repo_file("examples")
JOB_KERNELS = EXAMPLES / "jobs"


def make_job(folder: Path, kernel: str, dims: dict[str, int], tensors: dict[str, str],
             scalars: dict[str, float] | None = None, name: str = "job") -> Path:
    """A job file in `folder`; `tensors` maps each tensor to its .npy file's stem in `folder`."""
    job = build_job(JOB_KERNELS / f"{kernel}.phk", None, dims, scalars or {},
                    {t: f"file:{stem}.npy" for t, stem in tensors.items()})
    path = folder / f"{name}.capnp"
    write_job(job, path)
    return path


def write_inputs(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", array)


def write_add_job(folder: Path, seed: int, n: int = 4096):
    """examples/jobs/add.phk over random a and b of `n` elements, written to `folder/add.job`
    (c.npy its output): the job, and the sum it must write."""
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    write_inputs(folder, {"a": a, "b": b})
    job = build_job(JOB_KERNELS / "add.phk", None, {"N": n}, {},
                    {"a": "file:a.npy", "b": "file:b.npy", "c": "file:c.npy"})
    write_job(job, folder / "add.job")
    return job, a + b


def in_page_cache(path: Path, offset: int) -> bool:
    """Whether the page of the file holding byte `offset` is in the page cache, asked without
    reading it (mincore on a map of the file): a read, even one that must not wait
    (RWF_NOWAIT), starts a read-ahead, which on a VM's disk may finish before the read returns."""
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as view:
        address = np.frombuffer(view, np.uint8).__array_interface__["data"][0]
        resident = (ctypes.c_ubyte * 1)()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mincore(ctypes.c_void_p(address + offset // page * page), ctypes.c_size_t(page), resident):
            raise OSError(ctypes.get_errno(), f"mincore of {path}")
        return bool(resident[0] & 1)
