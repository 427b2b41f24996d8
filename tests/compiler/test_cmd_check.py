"""The `check` command: its report for good kernels, exit code 2 and a caret for bad ones."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from common.paths import REPO_ROOT, repo_file
from compiler.cli import check as cmd_check
from compiler.frontend.load import load_file

REPO = REPO_ROOT

# The check command on its own, run as a program the way //compiler runs it (run_main turns a
# UserError into its rendered text and exit code 2).
CHECK_PROGRAM = """
import argparse, sys
from common.cli import run_main
from compiler.cli import check as cmd_check

def main(argv):
    parser = argparse.ArgumentParser()
    cmd_check.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)

run_main(main)
"""


def run_check(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", CHECK_PROGRAM, "check", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_report_for_matmul():
    module = load_file(repo_file("examples") / "matmul.phk")
    text = cmd_check.describe_module(module)
    assert "kernel matmul" in text
    assert "x: dim M, tile TILE_M" in text
    assert "y: dim N, tile TILE_N" in text
    assert "@aligned(M = TILE_M, N = TILE_N, K = TILE_K)" in text
    # TILE_M, TILE_N: 32..256 doubling = 4 values each; TILE_K 4..32 = 4 values
    assert "@autotune search space: 64 points" in text
    # 4096..16384 doubling = 3 values each, three names
    assert "@cluster search space: 27 points" in text


def test_report_counts_fixed_dimension():
    module = load_file(repo_file("examples") / "flash_attention.phk")
    text = cmd_check.describe_module(module)
    assert "@autotune search space: 9 points" in text  # D fixed (1) x BR 3 x BC 3
    assert "@cluster search space: 3 points" in text


def test_handler_prints_report(capsys):
    parser = argparse.ArgumentParser()
    cmd_check.register(parser.add_subparsers())
    args = parser.parse_args(["check", str(repo_file("examples") / "add.phk")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "kernel add" in out and "x: dim N, tile BLOCK" in out


def test_cli_bad_kernel_exits_2_with_caret(tmp_path):
    (tmp_path / "bad.phk").write_text(
        "@autotune(B in [32])\nkernel k(a: tensor<f32>[N]) {\n  a[0 :+ B] = b\n}\n"
    )
    result = run_check("bad.phk", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "bad.phk:3:15: error: unknown name 'b'"
    assert lines[1] == "  a[0 :+ B] = b"
    assert lines[2] == " " * 14 + "^"
    assert "Traceback" not in result.stderr and ".py" not in result.stderr


def test_cli_missing_file_exits_2(tmp_path):
    result = run_check("nope.phk", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: nope.phk: no such file"


def test_cli_good_kernel(tmp_path):
    result = run_check(str(repo_file("examples") / "softmax.phk"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "kernel softmax" in result.stdout


def test_through_the_compiler_command_table(tmp_path):
    """The same error through compiler.cli.commands, the //compiler program's command table."""
    (tmp_path / "bad.phk").write_text("kernel k(a: tensor<f32>[N]) {\n  a[0 :+ 4] = q\n}\n")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", "from compiler.cli.commands import entry; entry()", "check", "bad.phk"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[:3] == [
        "bad.phk:2:15: error: unknown name 'q'",
        "  a[0 :+ 4] = q",
        " " * 14 + "^",
    ]


def test_report_names_each_dots_precision():
    text = cmd_check.describe_module(load_file(repo_file("examples") / "mha_tf32.phk"))
    assert "y: dim H, one CTA per element" in text
    assert "dot at 17:26: tf32 (from @precision)" in text and "dot at 22:48: tf32 (from @precision)" in text
    text = cmd_check.describe_module(load_file(repo_file("examples") / "matmul_tf32.phk"))
    assert "dot at 12:12: tf32 (from its precision argument)" in text
    text = cmd_check.describe_module(load_file(repo_file("examples") / "matmul.phk"))
    assert "dot at 11:12: f32 (the default)" in text


HALO = """@cluster(BLOCK in [64, 256])
@autotune(BLOCK in [16, 64])
kernel shift(a: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  c[base :+ BLOCK] = a[base + 1 :+ BLOCK]
}
"""


def test_check_runs_the_cluster_rejections_that_need_no_dimension(tmp_path):
    (tmp_path / "shift.phk").write_text(HALO)
    done = run_check("shift.phk", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    first = done.stderr.splitlines()[0]
    assert first.startswith("shift.phk:5:24: error: 'a' is read outside its own super-tile"), done.stderr
    assert "Traceback" not in done.stderr


def test_an_online_softmax_cluster_loop_checks_without_a_warning(tmp_path):
    """An online-softmax cluster loop keeps its partial (m, l, acc) apart from the output; the
    cluster runtime holds such partials (and a split's), so `check` has nothing to warn about and
    the scheduler plans every example's program at one super-tile."""
    from compiler.cluster.build import compile_cluster
    from scheduler.planning.planner import NodeFigure, plan

    shutil.copy(repo_file("examples/decode_gqa.phk"), tmp_path / "decode.phk")
    done = run_check("decode.phk", cwd=tmp_path)
    assert done.returncode == 0 and "\nkernel decode_gqa\n" in "\n" + done.stdout and done.stderr == ""
    examples = sorted(REPO.glob("examples/**/*.phk"))
    programs = [compile_cluster(k, _one_super_tile_dims(k)) for path in examples
                for k in load_file(path).kernels if k.cluster is not None]
    assert any(p.kernel == "decode_gqa" for p in programs)
    for program in programs:
        uris = {t.name: f"file:///{t.name}.npy" for t in program.tensors if t.role != "partial"}
        assert plan(program, [NodeFigure(0), NodeFigure(1)], uris).node_plans


def _one_super_tile_dims(kernel) -> dict[str, int]:
    """Dimensions of one super-tile at the first @cluster values: single-valued @autotune names
    (D) at their value, every other dimension at the largest first @cluster value."""
    from compiler.frontend.binding import kernel_dims

    fixed = {d.name: d.values[0] for d in kernel.autotune.dims if len(d.values) == 1}
    size = max(d.values[0] for d in kernel.cluster.dims)
    return {d: fixed.get(d, size) for d in kernel_dims(kernel)}
