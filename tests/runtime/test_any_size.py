"""A user's path through the runtime: the seed's kernels (examples/matmul.phk, examples/add.phk)
at sizes that are no multiple of their super-tiles, written with `new-job` and run on local pods,
match numpy; a missing output is created, unless the kernel reads its old values first."""

from __future__ import annotations

import numpy as np
import pytest

from common.paths import repo_file
from tests.runtime.test_cli import run_cli

RNG = np.random.default_rng(18)


def _new_job(capsys, folder, kernel: str, *args: str) -> None:
    code, _, err = run_cli(["new-job", str(repo_file(f"examples/{kernel}.phk")), *args,
                            "-o", str(folder / "job.capnp")], capsys)
    assert code == 0, err


def test_seed_matmul_at_256_384_128(tmp_path, capsys):
    a = RNG.standard_normal((256, 128)).astype(np.float32)
    b = RNG.standard_normal((128, 384)).astype(np.float32)
    c = RNG.standard_normal((256, 384)).astype(np.float32)
    for name, array in (("A", a), ("B", b), ("C", c)):
        np.save(tmp_path / f"{name}.npy", array)
    np.save(tmp_path / "want.npy", 1.5 * (a.astype(np.float64) @ b) - 0.5 * c)
    _new_job(capsys, tmp_path, "matmul", "--scalar", "alpha=1.5", "--scalar", "beta=-0.5",
             "--tensor", "A=file:A.npy", "--tensor", "B=file:B.npy", "--tensor", "C=file:C.npy")
    code, out, err = run_cli([str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path),
                              "--expect", f"C={tmp_path / 'want.npy'}"], capsys)
    assert code == 0, err
    assert "(matmul, 1 units on 2 nodes) succeeded" in out and "C matches the expected values" in out


def test_seed_add_at_196608_creates_its_output(tmp_path, capsys):
    n = 196608
    a, b = (RNG.standard_normal(n).astype(np.float32) for _ in range(2))
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    _new_job(capsys, tmp_path, "add", "--tensor", "a=file:a.npy", "--tensor", "b=file:b.npy",
             "--tensor", "c=file:c.npy")
    code, out, err = run_cli([str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path)], capsys)
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a + b)


@pytest.mark.parametrize("values", [("TILE_M=96", "TILE_N=64", "TILE_K=48"), ("TILE_M=4096",)])
def test_ragged_super_tiles_on_pods(tmp_path, capsys, values):
    m, n, k = 200, 136, 120
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    np.save(tmp_path / "A.npy", a)
    np.save(tmp_path / "B.npy", b)
    np.save(tmp_path / "C.npy", np.zeros((m, n), np.float32))  # beta * C reads it, even with beta = 0
    np.save(tmp_path / "want.npy", a.astype(np.float64) @ b)
    kernel = tmp_path / "mm.phk"  # the seed's matmul without @aligned: 200 is no multiple of 32
    kernel.write_text(repo_file("examples/matmul.phk").read_text().replace(
        "@aligned(M = TILE_M, N = TILE_N, K = TILE_K)\n", ""))
    cluster = [arg for v in values for arg in ("--cluster", v)]
    code, _, err = run_cli(["new-job", str(kernel), "--scalar", "alpha=1", "--scalar", "beta=0", *cluster,
                            "--tile", "TILE_K=8", "--tensor", "A=file:A.npy", "--tensor", "B=file:B.npy",
                            "--tensor", "C=file:C.npy", "-o", str(tmp_path / "job.capnp")], capsys)
    assert code == 0, err
    code, out, err = run_cli([str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path),
                              "--expect", f"C={tmp_path / 'want.npy'}"], capsys)
    assert code == 0, err + out
    assert "C matches the expected values" in out


def test_output_read_before_written_must_exist(tmp_path, capsys):
    np.save(tmp_path / "A.npy", np.ones((64, 32), np.float32))
    np.save(tmp_path / "B.npy", np.ones((32, 64), np.float32))
    _new_job(capsys, tmp_path, "matmul", "--scalar", "alpha=1", "--scalar", "beta=1",
             "--tensor", "A=file:A.npy", "--tensor", "B=file:B.npy", "--tensor", "C=file:C.npy")
    code, _, err = run_cli([str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path)], capsys)
    assert code == 2
    lines = err.splitlines()
    assert lines[0].endswith(f":13:15: error: tensor C: {tmp_path / 'C.npy'} does not exist, and the kernel "
                             "reads its old values here before writing them; create the file first")
    assert lines[1].strip().startswith("let c_old = C[") and "^" in lines[2]
    assert not (tmp_path / "C.npy").exists()
