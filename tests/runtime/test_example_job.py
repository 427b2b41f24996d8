"""The README's job (examples/jobs/matmul.capnp) runs and matches its committed expected output.

It runs on a copy of examples/jobs in a temporary folder, so the test never writes into the
checkout, and it also proves the job's relative URIs follow the job file wherever it goes."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest

from common.cli import run_main
from scheduler import cli
from tests.job_files import JOB_KERNELS
from tests.runtime.test_cli import run_cli

EXAMPLE = JOB_KERNELS


def _make_inputs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_inputs", EXAMPLE / "make_inputs.py")
    module = importlib.util.module_from_spec(spec)
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in examples/
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    return module


def test_committed_inputs_are_what_make_inputs_makes():
    module = _make_inputs()
    for name, array in module.make_arrays().items():
        np.testing.assert_array_equal(np.load(EXAMPLE / "data" / f"{name}.npy"), array)


def test_the_split_k_inputs_line_names_the_files_written(tmp_path):
    """`make_inputs.py --split-k` once announced {A,B,C,C_expected}_split_k.npy: C_expected_split_k
    does not exist. The line names exactly the files the split-K job and its --expect read."""
    module = _make_inputs()
    line = module.wrote_line(module.save_arrays(module.split_k_arrays(), tmp_path / "out"))
    named = line.split(": ", 1)[1].split(", ")
    assert sorted(named) == sorted(p.name for p in (tmp_path / "out").iterdir())
    assert {"A_split_k.npy", "B_split_k.npy", "C_split_k.npy", "C_split_k_expected.npy"} == set(named)


def test_example_job_runs_and_matches(tmp_path, capsys):
    folder = tmp_path / "jobs"
    (folder / "out").mkdir(parents=True)
    shutil.copytree(EXAMPLE / "data", folder / "data")
    shutil.copy(EXAMPLE / "matmul.capnp", folder / "matmul.capnp")
    expected = folder / "data" / "C_expected.npy"
    code, out, err = run_cli([str(folder / "matmul.capnp"), "--expect", f"C={expected}",
                              "--storage-root", str(folder), "--local-pods", "2"], capsys)
    assert code == 0, err
    assert "C matches the expected values" in out
    assert "16 units on 2 nodes" in out
    assert (folder / "out" / "C.npy").exists()


def test_show_job_prints_the_example(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main(cli.main, ["show-job", str(EXAMPLE / "matmul.capnp")])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "file:data/A.npy" in text and "file:out/C.npy" in text and "M=512" in text
