"""new-job on a user's path: the checks that need no pod run at once, --dim comes from the input
files where they give it, values outside a search space are taken with a warning, and leaf
@autotune values can be pinned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.errors import UserError
from scheduler import cli
from scheduler.jobs.jobfile import job_kernel, read_job
from scheduler.jobs.prepare import compile_any, compile_program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _new_job(capsys, folder: Path, *args: str) -> tuple[int, str, str]:
    from common.cli import run_main

    with pytest.raises(SystemExit) as info:
        run_main(cli.main, ["new-job", *args, "-o", str(folder / "job.capnp")])
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def _add_inputs(folder: Path, n: int) -> list[str]:
    np.save(folder / "a.npy", np.arange(n, dtype=np.float32))
    np.save(folder / "b.npy", np.ones(n, np.float32))
    return ["--tensor", "a=file:a.npy", "--tensor", "b=file:b.npy", "--tensor", "c=file:c.npy"]


def test_dims_come_from_the_input_files(tmp_path, capsys):
    code, out, err = _new_job(capsys, tmp_path, str(EXAMPLES / "add.phk"), *_add_inputs(tmp_path, 196608))
    assert code == 0, err
    assert dict(read_job(tmp_path / "job.capnp").dims) == {"N": 196608}


def test_a_dim_that_conflicts_with_a_file_names_both(tmp_path, capsys):
    code, _, err = _new_job(capsys, tmp_path, str(EXAMPLES / "add.phk"), "--dim", "N=1000",
                            *_add_inputs(tmp_path, 196608))
    assert code == 2
    assert err == ("error: --dim N=1000 conflicts with tensor a: file:a.npy has shape [196608], "
                   "so N = 196608\n")
    assert not (tmp_path / "job.capnp").exists()


def test_missing_dimension_is_worded_as_the_compiler_words_it(tmp_path, capsys):
    from compiler.cli.commands import main as compiler_main

    args = ["--tensor", "a=file:a.npy", "--tensor", "b=file:b.npy", "--tensor", "c=file:c.npy"]
    code, _, sched_err = _new_job(capsys, tmp_path, str(EXAMPLES / "add.phk"), *args)
    from common.cli import run_main

    with pytest.raises(SystemExit):
        run_main(compiler_main, ["run", str(EXAMPLES / "add.phk"), *(
            arg for t in "abc" for arg in ("--tensor", f"{t}={tmp_path / (t + '.npy')}"))])
    compiler_err = capsys.readouterr().err
    assert code == 2
    want = ("error: missing dimension N of kernel add: give --dim N=... "
            "or an existing tensor file whose shape sets it\n")
    assert sched_err == compiler_err == want


def test_a_job_that_can_never_run_is_refused_at_once(tmp_path, capsys):
    kernel = tmp_path / "halo.phk"
    kernel.write_text((EXAMPLES / "add.phk").read_text().replace("[16, 4096]", "[48, 4096]"))
    code, _, err = _new_job(capsys, tmp_path, str(kernel), *_add_inputs(tmp_path, 4096))
    assert code == 2
    assert "super-tile BLOCK = 1048576 is not a whole multiple of the leaf's tile BLOCK = 48" in err
    assert not (tmp_path / "job.capnp").exists()


def test_wrong_input_file_is_refused_by_new_job(tmp_path, capsys):
    args = _add_inputs(tmp_path, 4096)
    np.save(tmp_path / "b.npy", np.ones(4096, np.float64))
    code, _, err = _new_job(capsys, tmp_path, str(EXAMPLES / "add.phk"), *args)
    assert code == 2 and "b.npy: unsupported dtype <f8" in err


def test_values_outside_the_space_are_kept_with_a_warning_and_tiles_pinned(tmp_path, capsys):
    code, out, err = _new_job(capsys, tmp_path, str(EXAMPLES / "add.phk"), *_add_inputs(tmp_path, 4096),
                              "--cluster", "BLOCK=1024", "--tile", "BLOCK=256")
    assert code == 0
    assert err == ("warning: @cluster BLOCK = 1024 is outside its search space (1048576, 2097152, 4194304, "
                   "8388608, 16777216); using it as given\n")
    job = read_job(tmp_path / "job.capnp")
    assert dict(job.cluster_values) == {"BLOCK": 1024} and dict(job.tile_values) == {"BLOCK": 256}
    program = compile_program(job_kernel(job), dict(job.dims), dict(job.cluster_values),
                              dict(job.tile_values))
    assert len(program.units) == 4 and dict(program.leaves[0].tile_values) == {"BLOCK": 256}


def test_missing_input_is_a_warning_and_an_output_read_first_too(tmp_path, capsys):
    args = ["--dim", "M=64", "--dim", "N=64", "--dim", "K=32", "--scalar", "alpha=1", "--scalar", "beta=1",
            "--tensor", "A=file:A.npy", "--tensor", "B=file:B.npy", "--tensor", "C=file:C.npy"]
    code, _, err = _new_job(capsys, tmp_path, str(EXAMPLES / "matmul.phk"), *args)
    assert code == 0
    assert [line.split(":")[0] + ":" + line.split(":")[1] for line in err.splitlines()] == [
        "warning: tensor A", "warning: tensor B", "warning: tensor C"]
    assert err.splitlines()[2] == (
        f"warning: tensor C: {tmp_path / 'C.npy'} does not exist yet, and the kernel reads its old values at "
        f"{EXAMPLES / 'matmul.phk'}:13:15 before writing them, so it must when the job runs")  # c_old = C[..]


@pytest.mark.parametrize("old, new", [
    (["--kernel", "add.phk"], "new-job takes the kernel file first: `new-job add.phk [--kernel NAME] ...`"),
    (["x.phk", "--name", "add"], "--name is now --kernel NAME"),
    (["x.phk", "--set", "BLOCK=4"], "--set is gone: use --tile NAME=V for an @autotune value, --cluster"),
    (["x.phk", "--cluster-set", "BLOCK=4"], "--cluster-set is now --cluster NAME=V"),
])
def test_old_spellings_name_the_new_ones(tmp_path, capsys, old, new):
    code, _, err = _new_job(capsys, tmp_path, *old)
    assert code == 2 and err.startswith("error: " + new) and err.count("\n") == 1


def test_autotune_start_lists_every_combination_with_its_reason(tmp_path):
    from scheduler.jobs.jobfile import build_job

    kernel = tmp_path / "odd.phk"
    kernel.write_text((EXAMPLES / "add.phk").read_text().replace("[16, 4096]", "[48, 4096]"))
    job = build_job(kernel, None, {"N": 4096}, {}, {t: f"file:{t}.npy" for t in "abc"})
    with pytest.raises(UserError) as err:
        compile_any(job_kernel(job), dict(job.dims), {}, None)
    lines = str(err.value).splitlines()
    assert lines[0] == "no @cluster combination compiles:"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        f"BLOCK={v}" for v in (1048576, 2097152, 4194304, 8388608, 16777216)]
    assert all("not a whole multiple of the leaf's tile BLOCK = 48" in line for line in lines[1:])


def test_the_python_api_pins_leaf_tiles_too(tmp_path):
    import phobos

    _add_inputs(tmp_path, 4096)
    with pytest.warns(UserWarning, match=r"^@cluster BLOCK = 1024 is outside its search space"):
        job = phobos.job(EXAMPLES / "add.phk", tensors={t: f"file:{t}.npy" for t in "abc"}, dims={},
                         cluster_values={"BLOCK": 1024}, tile_values={"BLOCK": 256}, base_dir=tmp_path)
    job.save(tmp_path / "api.capnp")
    saved = read_job(tmp_path / "api.capnp")
    assert dict(saved.dims) == {"N": 4096} and dict(saved.tile_values) == {"BLOCK": 256}
