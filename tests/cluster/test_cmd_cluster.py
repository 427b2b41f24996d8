"""`//compiler -- cluster`: the printed program, abbreviation, flags and user errors."""

from __future__ import annotations

import pytest

from common.cli import run_main
from common.paths import repo_file
from compiler.cli.commands import main


def _run(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run_main(main, list(argv))
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_prints_grid_units_and_leaves(capsys):
    code, out, _ = _run(
        capsys,
        "cluster",
        str(repo_file("examples/matmul.phk")),
        "--dim",
        "M=16384",
        "--dim",
        "N=16384",
        "--dim",
        "K=16384",
    )
    assert code == 0
    assert "super-tile grid: 4 x 4 (x, y) = 16 units of work" in out
    assert "#6 (1, 2): init  reads C[4096:8192, 8192:12288]  writes C[4096:8192, 8192:12288]" in out
    assert "step  reads A[4096:8192, 12288:16384] B[12288:16384, 8192:12288] C[4096:8192, 8192:12288]" in out
    assert (
        "step: kernel matmul; dims M=4096, K=4096, N=4096; tiles TILE_M=32, TILE_N=32, TILE_K=4; "
        "CTA grid 128 x 128; 256 threads" in out
    )
    assert "more units" not in out


def test_abbreviates_beyond_sixteen_units(capsys):
    code, out, _ = _run(
        capsys,
        "cluster",
        str(repo_file("tests/cluster/kernels/add_small.phk")),
        "--dim",
        "N=4096",
        "--cluster",
        "BLOCK=64",
        "--tile",
        "BLOCK=32",
    )
    assert code == 0
    assert "= 64 units of work" in out
    assert "#15 (15,)" in out and "#16 (16,)" not in out
    assert "... and 48 more units" in out
    assert "tiles BLOCK=32; CTA grid 2;" in out


def test_cluster_value_outside_the_space_runs_with_a_one_line_warning(capsys):
    path = str(repo_file("tests/cluster/kernels/add_small.phk"))
    code, out, err = _run(capsys, "cluster", path, "--dim", "N=4096", "--cluster", "BLOCK=1024")
    assert code == 0 and "= 4 units of work" in out
    assert err == ("warning: @cluster BLOCK = 1024 is outside its search space (64, 128, 256); "
                   "using it as given\n")


def test_any_size_runs_with_a_smaller_last_super_tile(capsys):
    path = str(repo_file("examples/add.phk"))
    code, out, err = _run(capsys, "cluster", path, "--dim", "N=1000")
    assert code == 0 and err == ""
    assert "super-tile grid: 1 (x) = 1 units of work" in out
    assert "main: kernel add; dims N=1000; tiles BLOCK=16; CTA grid 63;" in out
    code, out, _ = _run(capsys, "cluster", path, "--dim", "N=2500000")
    assert "super-tile grid: 3 (x) = 3 units of work" in out
    assert ("#2 (2,): main@N=402848 reads a[2097152:2500000] b[2097152:2500000]  "
            "writes c[2097152:2500000]") in out


@pytest.mark.parametrize("old, new", [
    (["--set", "BLOCK=64"], "--set is gone: use --tile NAME=V for an @autotune value, --cluster NAME=V"),
    (["--cluster-set", "BLOCK=64"], "--cluster-set is now --cluster NAME=V"),
    (["--name", "add"], "--name is now --kernel NAME"),
])
def test_old_flag_spellings_name_the_new_ones(capsys, old, new):
    path = str(repo_file("examples/add.phk"))
    code, _, err = _run(capsys, "cluster", path, "--dim", "N=1000", *old)
    assert code == 2 and err.startswith("error: " + new) and err.count("\n") == 1


def test_cuda_prints_each_leafs_source(capsys):
    code, out, _ = _run(
        capsys,
        "cluster",
        str(repo_file("tests/cluster/kernels/matmul_small.phk")),
        "--dim",
        "M=64",
        "--dim",
        "N=64",
        "--dim",
        "K=32",
        "--cuda",
    )
    assert code == 0
    assert "// ---- leaf init ----" in out and "// ---- leaf step ----" in out
    assert out.count("__global__") >= 2


SPLIT_K = ("cluster", str(repo_file("examples/jobs/matmul_split_k.phk")),
           "--dim", "M=256", "--dim", "N=256", "--dim", "K=16384")


def test_split_prints_the_tree_and_verifies(capsys):
    code, out, _ = _run(capsys, *SPLIT_K, "--split", "4", "--tree", "hosts", "--hosts", "2,2", "--verify",
                        "--scalar", "alpha=1.5", "--scalar", "beta=0.5")
    assert code == 0, out
    assert "reduction: sum over 4 share(s), hosts tree, hosts of 2+2 shares" in out
    assert "round 1: 0 <- 1   2 <- 3" in out and "round 2: 0 <- 2" in out
    assert "share 0: init" in out and "share 1: zero" in out
    line = next(x for x in out.splitlines() if x.startswith("  C: max |difference|"))
    # 16384 products of unit normals per element (|C| ~ 200), summed in chunks of 4096 in another
    # grouping: f32 rounding only, far below 0.1.
    assert float(line.split()[3].rstrip(",")) < 0.1


@pytest.mark.parametrize("extra, message", [
    (["--tree", "binary"], "--tree and --hosts go with --split N"),
    (["--split", "4", "--tree", "hosts", "--hosts", "2,x"], "--hosts 2,x: expected share counts"),
    (["--split", "4", "--tree", "hosts", "--hosts", "2,1"], "summing to 4"),
    (["--split", "99"], "cannot split 4 chunk(s) of the cluster loop over 99 shares"),
    (["--split", "2", "--verify"], "--verify needs every scalar: give --scalar alpha=V"),
])
def test_split_flag_errors(capsys, extra, message):
    code, _, err = _run(capsys, *SPLIT_K, *extra)
    assert code == 2 and message in err, err
    assert "Traceback" not in err
