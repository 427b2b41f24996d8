"""A split in the job file and on the command line: `new-job --split N --tree T` stores it,
`show-job` shows it, the run's `--split` overrides it, and the mistakes are one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.cli import run_main
from compiler.cluster.tree import SplitRequest
from scheduler import cli
from scheduler.jobs.jobfile import read_job
from scheduler.jobs.prepare import prepare

KERNEL = str(Path(__file__).resolve().parents[2] / "examples" / "jobs" / "matmul_split_k.phk")
FLAGS = ["--dim", "M=256", "--dim", "N=256", "--dim", "K=16384", "--scalar", "alpha=1", "--scalar", "beta=0",
         "--tensor", "A=file:A.npy", "--tensor", "B=file:B.npy", "--tensor", "C=file:C.npy"]


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run_main(cli.main, list(argv))
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_new_job_stores_the_split_and_show_job_shows_it(tmp_path, capsys):
    job = tmp_path / "job.capnp"
    code, _, err = _cli(capsys, "new-job", KERNEL, *FLAGS, "--split", "4", "--tree", "binary", "-o", str(job))
    assert code == 0, err
    assert read_job(job).split == SplitRequest(4, "binary")
    code, out, _ = _cli(capsys, "show-job", str(job))
    assert code == 0 and "  split    4 shares, binary tree" in out.splitlines()
    hosts = ["--split", "3", "--tree", "hosts", "--hosts", "2,1"]
    code, _, err = _cli(capsys, "new-job", KERNEL, *FLAGS, *hosts, "-o", str(job))
    assert code == 0, err
    assert read_job(job).split == SplitRequest(3, "hosts", (2, 1))


def test_a_job_without_a_split_has_none(tmp_path, capsys):
    job = tmp_path / "job.capnp"
    assert _cli(capsys, "new-job", KERNEL, *FLAGS, "-o", str(job))[0] == 0
    assert read_job(job).split is None
    assert not any(line.startswith("  split") for line in _cli(capsys, "show-job", str(job))[1].splitlines())


def test_the_run_split_overrides_the_jobs(tmp_path, capsys):
    import numpy as np

    job = tmp_path / "job.capnp"
    for name, shape in (("A", (256, 16384)), ("B", (16384, 256)), ("C", (256, 256))):
        np.save(tmp_path / f"{name}.npy", np.zeros(shape, np.float32))
    assert _cli(capsys, "new-job", KERNEL, *FLAGS, "--split", "4", "-o", str(job))[0] == 0
    assert prepare(read_job(job), job, [tmp_path]).program.reduction.shares == 4
    again = prepare(read_job(job), job, [tmp_path], split=SplitRequest(2, "flat"))
    assert (again.program.reduction.shares, again.program.reduction.tree) == (2, "flat")


@pytest.mark.parametrize("flags,message", [
    (["--tree", "binary"], "--tree and --hosts go with --split N"),
    (["--split", "0"], "the split count must be a positive integer"),
    (["--split", "2", "--tree", "hosts", "--hosts", "1,2"], "a tree by hosts needs each host's share count"),
    (["--split", "2", "--tree", "hosts", "--hosts", "a,b"], "--hosts a,b: expected share counts"),
    (["--split", "64"], "cannot split 4 chunk(s) of the cluster loop over 64 shares"),
])
def test_split_mistakes_are_one_line(tmp_path, capsys, flags, message):
    code, _, err = _cli(capsys, "new-job", KERNEL, *FLAGS, *flags, "-o", str(tmp_path / "job.capnp"))
    assert code == 2 and message in err and "Traceback" not in err, err
