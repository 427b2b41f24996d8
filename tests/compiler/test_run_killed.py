"""kill -9 of a real `phobos run` in the middle of writing its outputs leaves each output whole:
the old file or none, never a torn one. The command stops itself at the chosen point
(PHOBOS_RUN_FAULT, compiler/cli/run.py); the test waits for that stop (waitpid WUNTRACED: an
event, no sleep), looks at the half-written temporary file, then SIGKILLs the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler.cli.run import PIECE_BYTES

ROOT = Path(__file__).resolve().parents[2]
N = 3 * PIECE_BYTES // 4  # f32 elements: three pieces of data per output
KERNEL = """@autotune(BLOCK in [65536])
kernel two(a: tensor<f32>[N], c: tensor<f32>[N], d: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base :+ BLOCK] + 1.0
  d[base :+ BLOCK] = a[base :+ BLOCK] * 2.0
}
"""


def start_run(folder: Path, fault: str) -> subprocess.Popen:
    code = "import sys; from compiler.cli.commands import entry; sys.argv[0] = 'phobos'; entry()"
    args = [sys.executable, "-c", code, "run", str(folder / "two.phk"), "--dim", f"N={N}",
            *(f"--tensor={t}={folder / (t + '.npy')}" for t in "acd")]
    env = {**os.environ, "PHOBOS_RUN_FAULT": fault}
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_then_kill(process: subprocess.Popen) -> None:
    _, status = os.waitpid(process.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):  # it ended instead: say how
        pytest.fail(f"phobos run did not stop at the fault point: {status=} {process.stderr.read()!r}")
    process.kill()
    assert process.wait(timeout=60) == -signal.SIGKILL


def temporaries(folder: Path, output: str) -> list[Path]:
    return sorted(folder.glob(f".{output}.npy.*.tmp"))


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "two.phk").write_text(KERNEL)
    np.save(tmp_path / "a.npy", np.arange(N, dtype=np.float32))
    return tmp_path


# (the piece the command stops at, the output it is writing, how much of it its temporary holds):
# each output is its 128-byte header (piece 1 or 5), then three pieces of data.
MID_WRITE = [(2, "c", 128), (3, "c", 128 + PIECE_BYTES), (5, "d", 0), (7, "d", 128 + PIECE_BYTES)]


@pytest.mark.parametrize("piece,output,held", MID_WRITE)
def test_killed_mid_write_leaves_the_old_outputs_whole(folder, piece, output, held):
    old = {t: np.full(N, 7 + i, np.float32) for i, t in enumerate("cd")}
    for t, values in old.items():
        np.save(folder / f"{t}.npy", values)
    before = {t: (folder / f"{t}.npy").read_bytes() for t in "cd"}
    process = start_run(folder, f"stop-at=piece:{piece}")
    try:
        stop_then_kill(process)
    finally:
        process.kill()
    (half,) = temporaries(folder, output)
    assert half.stat().st_size == held < len(before[output])  # the kill came mid-write
    for t in "cd":
        assert (folder / f"{t}.npy").read_bytes() == before[t]
        np.testing.assert_array_equal(np.load(folder / f"{t}.npy"), old[t])


@pytest.mark.parametrize("fault", ["stop-at=piece:3", "stop-at=rename:1"])
def test_killed_before_its_renames_leaves_no_output_where_there_was_none(folder, fault):
    process = start_run(folder, fault)
    try:
        stop_then_kill(process)
    finally:
        process.kill()
    assert not (folder / "c.npy").exists() and not (folder / "d.npy").exists()
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["a.npy", "two.phk"]


def test_killed_between_renames_leaves_each_output_whole(folder):
    """Each output is replaced by one rename: c is the new file, d still the old one."""
    np.save(folder / "d.npy", np.full(N, 9, np.float32))
    process = start_run(folder, "stop-at=rename:2")
    try:
        stop_then_kill(process)
    finally:
        process.kill()
    a = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(np.load(folder / "c.npy"), a + 1)
    np.testing.assert_array_equal(np.load(folder / "d.npy"), np.full(N, 9, np.float32))


def test_unkilled_the_same_run_writes_both_outputs_and_no_temporary(folder):
    process = start_run(folder, "")
    assert process.wait(timeout=120) == 0, process.stderr.read()
    a = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(np.load(folder / "c.npy"), a + 1)
    np.testing.assert_array_equal(np.load(folder / "d.npy"), a * 2)
    assert not temporaries(folder, "c") and not temporaries(folder, "d")
