"""Make the example job: its inputs, the numpy-expected output and the job file, deterministically.

    PYTHONPATH=. .venv/bin/python examples/jobs/make_inputs.py

writes examples/jobs/data/{A,B,C_expected}.npy and examples/jobs/matmul.capnp (URIs relative to
the job file: file:data/A.npy, file:data/B.npy, file:out/C.npy). Then run it with

    tools/bazel run //scheduler -- examples/jobs/matmul.capnp --expect C=examples/jobs/data/C_expected.npy
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repo root, for `scheduler` and `compiler`

M = N = K = 512
SEED = 20261129


def make_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    # Values in [-1, 1) rounded to multiples of 1/64: exact in f32, sums of 512 products stay
    # well inside f32's exact range, so the expected output hardly depends on summation order.
    a = (np.floor(rng.uniform(-64, 64, (M, K))) / 64).astype(np.float32)
    b = (np.floor(rng.uniform(-64, 64, (K, N))) / 64).astype(np.float32)
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    return {"A": a, "B": b, "C_expected": expected}


def main() -> None:
    from scheduler.jobfile import build_job, write_job

    data = HERE / "data"
    data.mkdir(exist_ok=True)
    (HERE / "out").mkdir(exist_ok=True)
    for name, array in make_arrays().items():
        np.save(data / f"{name}.npy", array)
    job = build_job(HERE / "matmul_plain.phk", None, {"M": M, "N": N, "K": K}, {},
                    {"A": "file:data/A.npy", "B": "file:data/B.npy", "C": "file:out/C.npy"})
    # The job records where its kernel came from for messages; keep it relative to the repo.
    job = type(job)(**{**job.__dict__, "kernel_file": "examples/jobs/matmul_plain.phk"})
    write_job(job, HERE / "matmul.capnp")
    print(f"wrote {data}/A.npy, B.npy, C_expected.npy and {HERE / 'matmul.capnp'}")


if __name__ == "__main__":
    main()
