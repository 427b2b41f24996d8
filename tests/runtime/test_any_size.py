"""A user's path through the runtime: the seed's kernels, unedited, at sizes that are no multiple
of their super-tiles, written with `new-job` and run on local pods, match numpy; a missing output
is created, unless the kernel reads its old values first; a pinned @cluster value outside the
search space runs with a warning; and when no combination can run, --autotune names every one
with its reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.paths import repo_file
from tests.runtime.test_cli import run_cli

RNG = np.random.default_rng(18)


def seed(kernel: str) -> str:
    """The matmul and the add of the `@cluster` guide's seed text, copied here as written (the
    same text as examples/matmul.phk and examples/add.phk today, but pinned: an edit of the
    examples must not change what these tests run)."""
    return str(repo_file(f"tests/runtime/seed/{kernel}.phk"))


def _new_job(capsys, folder, kernel: str, *args: str) -> None:
    code, _, err = run_cli(["new-job", seed(kernel), *args, "-o", str(folder / "job.capnp")], capsys)
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
    assert "(matmul, 1 unit on 2 nodes) succeeded" in out and "C matches the expected values" in out


def _seed_add_job(folder, capsys, n: int = 196608) -> tuple[np.ndarray, np.ndarray]:
    a, b = (RNG.standard_normal(n).astype(np.float32) for _ in range(2))
    np.save(folder / "a.npy", a)
    np.save(folder / "b.npy", b)
    _new_job(capsys, folder, "add", "--tensor", "a=file:a.npy", "--tensor", "b=file:b.npy",
             "--tensor", "c=file:c.npy")
    return a, b


def test_seed_add_at_196608_creates_its_output(tmp_path, capsys):
    a, b = _seed_add_job(tmp_path, capsys)
    code, out, err = run_cli([str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path)], capsys)
    assert code == 0, err
    assert "(add, 1 unit on 2 nodes) succeeded" in out  # smaller than the smallest super-tile: one unit
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a + b)


SPACE = "(1048576, 2097152, 4194304, 8388608, 16777216)"  # the seed add's @cluster BLOCK values


def test_a_pinned_cluster_value_outside_the_space_runs_with_a_one_line_warning(tmp_path, capsys):
    a, b = _seed_add_job(tmp_path, capsys)
    warning = f"warning: @cluster BLOCK = 65536 is outside its search space {SPACE}; using it as given\n"
    job = [str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path), "--cluster", "BLOCK=65536"]
    code, out, err = run_cli(job, capsys)
    assert (code, err) == (0, warning), err
    assert "(add, 3 units on 2 nodes) succeeded" in out  # 196608 = 65536 * 3
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a + b)
    code, out, err = run_cli([*job, "--autotune", "--tune-only"], capsys)
    assert (code, err) == (0, warning), err
    assert "pinned by --cluster: BLOCK=65536" in out


def test_values_pinned_by_new_job_stay_pinned_under_the_tuners(tmp_path, capsys):
    from scheduler.jobs.jobfile import read_job
    from scheduler.jobs.prepare import prepare

    _seed_add_job(tmp_path, capsys)
    _new_job(capsys, tmp_path, "add", "--tensor", "a=file:a.npy", "--tensor", "b=file:b.npy",
             "--tensor", "c=file:c.npy", "--cluster", "BLOCK=65536", "--tile", "BLOCK=256")
    job = tmp_path / "job.capnp"
    prepared = prepare(read_job(job), job, [tmp_path])
    assert (prepared.pinned_cluster, prepared.pinned_tiles) == ({"BLOCK": 65536}, {"BLOCK": 256})
    code, out, err = run_cli([str(job), "--storage-root", str(tmp_path), "--autotune", "--tune-only"], capsys)
    assert code == 0 and err.count("\n") == 1 and "BLOCK = 65536 is outside its search space" in err
    assert "pinned by --cluster: BLOCK=65536" in out and "chosen: BLOCK=65536" in out
    assert "BLOCK=1048576" not in out  # the search covered the pinned value only
    code, out, err = run_cli([str(job), "--storage-root", str(tmp_path), "--autotune", "--tune-only",
                              "--cluster", "BLOCK=1048576"], capsys)  # the run's value overrides the job's
    assert (code, err) == (0, ""), err
    assert "chosen: BLOCK=1048576" in out


def test_autotune_lists_every_combination_with_its_reason_when_none_fits(tmp_path, capsys):
    _seed_add_job(tmp_path, capsys)
    code, out, err = run_cli([str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path), "--autotune",
                              "--vram", "1000"], capsys)
    assert code == 2 and "Traceback" not in err
    lines = err.splitlines()
    assert lines[0] == "error: --autotune: no @cluster combination can run on 2 node(s):", err
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        f"BLOCK={v}" for v in (1048576, 2097152, 4194304, 8388608, 16777216)]
    assert all("at its peak, more than its 1000 B of memory" in line for line in lines[1:])


def test_autotune_lists_every_combination_with_its_reason_when_none_compiles(tmp_path, capsys):
    """No @cluster value is a whole multiple of the leaf's tile (48): `new-job` refuses such a job,
    so it is written by hand, as another tool might."""
    from scheduler.jobs.jobfile import build_job, write_job

    kernel = tmp_path / "odd.phk"
    kernel.write_text(Path(seed("add")).read_text().replace("[16, 4096]", "[48, 4096]"))
    for name in "ab":
        np.save(tmp_path / f"{name}.npy", np.ones(4096, np.float32))
    write_job(build_job(kernel, None, {"N": 4096}, {}, {t: f"file:{t}.npy" for t in "abc"}),
              tmp_path / "job.capnp")
    code, _, err = run_cli([str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path), "--autotune"],
                           capsys)
    assert code == 2 and "Traceback" not in err
    lines = err.splitlines()
    assert lines[0] == "error: no @cluster combination compiles:", err
    assert lines[1:] == [f"  BLOCK={v}: super-tile BLOCK = {v} is not a whole multiple of the leaf's tile "
                         "BLOCK = 48 (@autotune)" for v in (1048576, 2097152, 4194304, 8388608, 16777216)]
    assert not (tmp_path / "c.npy").exists()


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
    kernel.write_text(Path(seed("matmul")).read_text().replace(
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


def test_an_output_stored_inside_a_column_loop_is_created(tmp_path, capsys):
    """examples/softmax.phk, given an @cluster line: its output is stored inside a loop over column
    blocks and never read, so a missing file is created (it once counted as read, "no such file")."""
    kernel = tmp_path / "softmax.phk"
    kernel.write_text(repo_file("examples/softmax.phk").read_text().replace(
        "@autotune", "@cluster(BR in [16, 64])\n@autotune"))
    x = RNG.standard_normal((50, 300)).astype(np.float32)  # ragged along both axes
    np.save(tmp_path / "x.npy", x)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.save(tmp_path / "want.npy", e / e.sum(axis=1, keepdims=True))
    code, _, err = run_cli(["new-job", str(kernel), "--tensor", "x=file:x.npy", "--tensor", "y=file:y.npy",
                            "-o", str(tmp_path / "job.capnp")], capsys)
    assert (code, err) == (0, ""), err
    code, out, err = run_cli([str(tmp_path / "job.capnp"), "--storage-root", str(tmp_path),
                              "--expect", f"y={tmp_path / 'want.npy'}"], capsys)
    assert code == 0, err
    assert "(softmax, 4 units on 2 nodes) succeeded" in out and "y matches the expected values" in out


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
