"""How often a job's kernel is parsed in the process that makes and runs it: exactly once, whether
through the command line (`new-job`, then the job: once per command) or
`phobos.run(phobos.job(path))`. The one checked IR goes on to new-job's checks, the cluster
compiler, its leaves (made as IR from it, compiler/cluster/leaves.py: no leaf text is parsed
where it was made) and the run. A pod is another process: it parses each leaf it is sent once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import phobos
from scheduler import cli
from tests.parse_counts import count_parses, leaf_parses

JOBS = Path(__file__).resolve().parents[2] / "examples" / "jobs"


@dataclass(frozen=True)
class Case:
    kernel: str
    dims: dict
    scalars: dict
    inputs: tuple[str, ...]
    output: str
    shape: tuple[int, ...]
    expected: float  # every element of the output


CASES = {  # a cluster loop (init and step leaves), and a kernel with one leaf
    "matmul": Case("matmul.phk", {"M": 256, "N": 256, "K": 256}, {"alpha": 1, "beta": 0}, ("A", "B"), "C",
                   (256, 256), 256.0),
    "add": Case("add.phk", {"N": 4096}, {}, ("a", "b"), "c", (4096,), 2.0),
}


@pytest.fixture()
def parses(monkeypatch, tmp_path):
    """The files parsed in this process (tests/parse_counts.py: counted inside the parser)."""
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path / "cache"))
    seen = count_parses(monkeypatch)
    monkeypatch.chdir(tmp_path)
    return seen


def _inputs(case: Case, folder: Path) -> None:
    for tensor in case.inputs:
        np.save(folder / f"{tensor}.npy", np.ones(case.shape, np.float32))
    np.save(folder / f"{case.output}.npy", np.zeros(case.shape, np.float32))


def _result_ok(case: Case, folder: Path) -> None:
    out = np.load(folder / f"{case.output}.npy")
    assert np.array_equal(out, np.full(case.shape, case.expected, np.float32))


@pytest.mark.parametrize("name", CASES)
def test_the_command_line_parses_the_kernel_once_per_command(parses, tmp_path, name):
    case = CASES[name]
    _inputs(case, tmp_path)
    flags = [f"--dim={k}={v}" for k, v in case.dims.items()]
    flags += [f"--scalar={k}={v}" for k, v in case.scalars.items()]
    flags += [f"--tensor={t}=file:{t}.npy" for t in (*case.inputs, case.output)]
    assert cli.main(["new-job", str(JOBS / case.kernel), *flags, "-o", "job.capnp"]) == 0
    assert dict(parses) == {str(JOBS / case.kernel): 1}  # new-job: checks and the cluster compile
    parses.clear()
    assert cli.main(["job.capnp", "--local-pods", "1", "--storage-root", str(tmp_path)]) == 0
    assert sum(parses.values()) == 1 and leaf_parses(parses) == {}, parses
    _result_ok(case, tmp_path)


@pytest.mark.parametrize("name", CASES)
def test_phobos_run_of_phobos_job_parses_the_kernel_once(parses, tmp_path, name):
    case = CASES[name]
    _inputs(case, tmp_path)
    tensors = {t: f"file:{t}.npy" for t in (*case.inputs, case.output)}
    job = phobos.job(JOBS / case.kernel, dims=case.dims, scalars=case.scalars, tensors=tensors,
                     base_dir=tmp_path)
    result = phobos.run(job, local_pods=1, storage_roots=[tmp_path])
    assert result.ok, result.reason
    # the job's checks and its run each compile the cluster program, from the one IR
    assert dict(parses) == {str(JOBS / case.kernel): 1}
    _result_ok(case, tmp_path)


def test_the_count_sees_each_way_to_the_parser(parses):
    """The counter is inside the parser: a parse through the front end's pipeline, through the
    parser module itself and of a printed leaf's text are all counted (a re-parse the tests above
    would otherwise miss)."""
    from compiler.cluster.leaves import forget_leaf_kernels, load_leaf
    from compiler.frontend import load, parser
    from scheduler.jobs import prepare as prep
    from tests.job_files import write_add_job

    path = JOBS / "add.phk"
    load.load_file(path)
    parser.parse(path.read_text(), "direct.phk")
    assert dict(parses) == {str(path): 1, "direct.phk": 1}
    job, _ = write_add_job(Path.cwd(), seed=1)
    program = prep.prepare(job, Path.cwd() / "add.job", [Path.cwd()], {"BLOCK": 256}).program
    forget_leaf_kernels()  # as in a pod's process: the leaf's text is all there is
    parses.clear()
    load_leaf(program.leaves[0])
    assert leaf_parses(parses) == {f"<cluster leaf {program.leaves[0].name}>": 1}
