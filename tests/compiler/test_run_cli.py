"""`//compiler -- run`: .npy in, .npy out; user mistakes exit 2 with one line and write nothing."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from common.cli import run_main
from compiler.cli import run as cmd_run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def main(argv: list[str]) -> int:
    """The run command alone, registered the way compiler/cli/commands.py registers it."""
    parser = argparse.ArgumentParser(prog="phobos-compiler")
    cmd_run.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def run_cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run_main(main, ["run", *map(str, argv)])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def add_args(tmp_path, n=1000, extra=()):
    return [EXAMPLES / "add.phk", "--dim", f"N={n}", "--tensor", f"a={tmp_path / 'a.npy'}",
            "--tensor", f"b={tmp_path / 'b.npy'}", "--tensor", f"c={tmp_path / 'c.npy'}", *extra]


@pytest.fixture
def add_inputs(tmp_path):
    a = np.arange(1000, dtype=np.float32)
    b = np.full(1000, 0.5, np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    return a, b


def test_run_creates_missing_output(tmp_path, add_inputs, capsys):
    a, b = add_inputs
    code, out, _ = run_cli(add_args(tmp_path, extra=["--tile", "BLOCK=64"]), capsys)
    assert code == 0
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a + b)
    assert "wrote c" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "b.npy", "c.npy"]  # no temp files


def test_run_reads_existing_output_for_beta(tmp_path, capsys):
    rng = np.random.default_rng(0)
    a, b, c = (rng.integers(-3, 4, s).astype(np.float32) for s in ((64, 32), (32, 32), (64, 32)))
    for name, arr in (("A", a), ("B", b), ("C", c)):
        np.save(tmp_path / f"{name}.npy", arr)
    args = [EXAMPLES / "matmul.phk", "--dim", "M=64", "--dim", "N=32", "--dim", "K=32",
            "--scalar", "alpha=2", "--scalar", "beta=-1"]
    args += [x for n in "ABC" for x in ("--tensor", f"{n}={tmp_path / (n + '.npy')}")]
    assert run_cli(args, capsys)[0] == 0
    # small integers: every product and sum is exact in f32
    np.testing.assert_array_equal(np.load(tmp_path / "C.npy"), 2 * a @ b - c)


def test_run_bf16_files(tmp_path, capsys):
    src = tmp_path / "k.phk"
    src.write_text("@autotune(B in [16])\nkernel k(x: tensor<bf16>[N], y: tensor<bf16>[N]) {\n"
                   "  y[ctx.block.x * B :+ B] = x[ctx.block.x * B :+ B] * 2.0\n}\n")
    x = np.linspace(-3, 3, 50).astype(ml_dtypes.bfloat16)
    np.save(tmp_path / "x.npy", x)
    args = [src, "--dim", "N=50", "--tensor", f"x={tmp_path / 'x.npy'}",
            "--tensor", f"y={tmp_path / 'y.npy'}"]
    assert run_cli(args, capsys)[0] == 0
    y = np.load(tmp_path / "y.npy").view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.astype(np.float32), (x.astype(np.float32) * 2).astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("case,expected", [
    ("wrong_shape", "--dim N=1000 conflicts with tensor a: "),
    ("wrong_dtype", "holds float64, the kernel expects float32"),
    ("missing_dim", "missing dimension N of kernel add: give --dim N=... or an existing tensor file"),
    ("missing_tensor", "missing tensor b: give --tensor b=FILE.npy"),
    ("missing_input_file", "tensor a: no such file"),
    ("unreadable", "tensor a: " + "{a}: not a .npy file (bad magic: it starts with b'not an'"),
    ("random_bytes", "tensor a: {a}: not a .npy file (bad magic: it starts with"),
    ("empty_file", "tensor a: {a}: not a .npy file (bad magic: the file is empty"),
    ("bad_set", "BLOCK = 3 is outside its @autotune search space"),
    ("unknown_tensor", "kernel add has no tensor q"),
    ("unknown_scalar", "kernel add has no scalar parameter s"),
    ("bad_kernel", "add.phk has no kernel nope (it has: add)"),
    ("no_source", "no such file"),
    ("no_output_folder", "tensor c: folder"),
])
def test_user_errors_exit_2_with_one_line_and_write_nothing(tmp_path, add_inputs, capsys, case, expected):
    args = add_args(tmp_path)
    if case == "wrong_shape":
        np.save(tmp_path / "a.npy", np.zeros(999, np.float32))
    elif case == "wrong_dtype":
        np.save(tmp_path / "b.npy", np.zeros(1000, np.float64))
    elif case == "missing_dim":
        args = [a for a in args if a not in ("--dim", "N=1000")]
        os.remove(tmp_path / "a.npy")
        os.remove(tmp_path / "b.npy")
    elif case == "missing_tensor":
        args = args[:5] + args[7:]
    elif case == "missing_input_file":
        os.remove(tmp_path / "a.npy")
    elif case == "unreadable":
        (tmp_path / "a.npy").write_bytes(b"not an npy file")
    elif case == "random_bytes":
        (tmp_path / "a.npy").write_bytes(np.random.default_rng(0).bytes(4000))
    elif case == "empty_file":
        (tmp_path / "a.npy").write_bytes(b"")
    elif case == "bad_set":
        args += ["--tile", "BLOCK=3"]
    elif case == "unknown_tensor":
        args += ["--tensor", f"q={tmp_path / 'q.npy'}"]
    elif case == "unknown_scalar":
        args += ["--scalar", "s=1"]
    elif case == "bad_kernel":
        args += ["--kernel", "nope"]
    elif case == "no_source":
        args[0] = tmp_path / "missing.phk"
    elif case == "no_output_folder":
        args[-1] = f"c={tmp_path / 'nowhere' / 'c.npy'}"
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert expected.format(a=tmp_path / "a.npy") in err
    assert err.count("\n") == 1 and "Traceback" not in err and "pickle" not in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written


def test_failure_in_the_kernel_leaves_existing_output_intact(tmp_path, add_inputs, capsys):
    np.save(tmp_path / "c.npy", np.full(1000, 7, np.float32))
    before = (tmp_path / "c.npy").read_bytes()
    code, _, err = run_cli(add_args(tmp_path, extra=["--scalar", "alpha=1"]), capsys)
    assert code == 2 and (tmp_path / "c.npy").read_bytes() == before


def test_gpu_device_without_gpu_support_is_one_line(tmp_path, add_inputs, capsys):
    try:
        import cupy  # noqa: F401

        pytest.skip("cupy is installed: this test is about machines without it")
    except ImportError:
        pass
    code, _, err = run_cli(add_args(tmp_path, extra=["--device", "gpu"]), capsys)
    assert code == 2 and err == "error: --device gpu needs cupy, which is not installed here\n"
    assert not (tmp_path / "c.npy").exists()


def test_exit_code_2_and_no_traceback_in_a_real_process(tmp_path, add_inputs):
    script = ("import sys; from common.cli import run_main; "
              "from tests.compiler.test_run_cli import main; run_main(main)")
    proc = subprocess.run([sys.executable, "-c", script, "run", *map(str, add_args(tmp_path, n=5))],
                          cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr == (f"error: --dim N=5 conflicts with tensor a: {tmp_path / 'a.npy'} "
                           "has shape [1000], so N = 1000\n")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["softmax", "matmul_plain"])
def test_gpu_device_agrees_with_the_interpreter(tmp_path, capsys, name):
    pytest.importorskip("cupy")
    rng = np.random.default_rng(0)
    if name == "softmax":
        dims, inputs, out = {"R": 37, "C": 300}, {"x": (37, 300)}, "y"
    else:
        dims, inputs, out = {"M": 70, "N": 45, "K": 37}, {"A": (70, 37), "B": (37, 45)}, "C"
    args = [EXAMPLES / f"{name}.phk"] + [x for d, v in dims.items() for x in ("--dim", f"{d}={v}")]
    for tensor, shape in inputs.items():
        np.save(tmp_path / f"{tensor}.npy", rng.standard_normal(shape).astype(np.float32))
        args += ["--tensor", f"{tensor}={tmp_path / (tensor + '.npy')}"]
    results = {}
    for device in ("cpu", "gpu"):
        target = tmp_path / f"{out}_{device}.npy"
        assert run_cli(args + ["--tensor", f"{out}={target}", "--device", device], capsys)[0] == 0
        results[device] = np.load(target)
    # f32 sums of at most 300 terms of unit size in a different order: well inside 1e-4.
    np.testing.assert_allclose(results["gpu"], results["cpu"], rtol=1e-4, atol=1e-5)


BF16_COPY = """kernel copy(a: tensor<f32>[N], c: tensor<bf16>[N]) {
  c[:] = a[:]
}
"""


def test_bf16_output_is_a_file_numpy_reads_back_as_bf16(tmp_path, capsys):
    import ml_dtypes

    (tmp_path / "copy.phk").write_text(BF16_COPY)
    np.save(tmp_path / "a.npy", np.array([1.0, 2.5, -3.0], np.float32))
    code, _, err = run_cli([tmp_path / "copy.phk", "--tensor", f"a={tmp_path / 'a.npy'}",
                            "--tensor", f"c={tmp_path / 'c.npy'}"], capsys)
    assert code == 0, err
    c = np.load(tmp_path / "c.npy")  # ml_dtypes is imported: numpy resolves the header's dtype
    assert c.dtype == ml_dtypes.bfloat16 and c.astype(np.float32).tolist() == [1.0, 2.5, -3.0]


MISSING_OUTPUTS = """kernel fill(a: tensor<f32>[R, C], c: tensor<f32>[R, C]) {
  for j in range(0, C, 1) {
    c[:, j] = a[:, j] * 2.0
  }
}

kernel accumulate(a: tensor<f32>[R, C], c: tensor<f32>[R, C]) {
  c[:, :] += a[:, :]
}
"""


def test_missing_output_is_created_unless_the_kernel_reads_it_first(tmp_path, capsys):
    (tmp_path / "k.phk").write_text(MISSING_OUTPUTS)
    np.save(tmp_path / "a.npy", np.ones((4, 3), np.float32))
    args = ["--tensor", f"a={tmp_path / 'a.npy'}", "--tensor", f"c={tmp_path / 'c.npy'}"]
    code, _, err = run_cli([tmp_path / "k.phk", "--kernel", "fill", *args], capsys)
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.full((4, 3), 2.0, np.float32))
    (tmp_path / "c.npy").unlink()
    code, _, err = run_cli([tmp_path / "k.phk", "--kernel", "accumulate", *args], capsys)
    assert code == 2
    assert err.splitlines()[0] == (f"{tmp_path / 'k.phk'}:8:3: error: tensor c: {tmp_path / 'c.npy'} "
                                   "does not exist, and the kernel reads its old values here before writing "
                                   "them; create the file first")
    assert not (tmp_path / "c.npy").exists()


@pytest.mark.parametrize("read_only", [["c"], ["c", "d"], ["d"]])
def test_a_read_only_output_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys, read_only):
    """A kernel of two outputs: whichever of them is read-only, neither is written."""
    source = tmp_path / "two.phk"
    source.write_text("kernel two(a: tensor<f32>[N], c: tensor<f32>[N], d: tensor<f32>[N]) {\n"
                      "  c[0 :+ 16] = a[0 :+ 16]\n  d[0 :+ 16] = a[0 :+ 16] * 2.0\n}\n")
    np.save(tmp_path / "a.npy", np.arange(16, dtype=np.float32))
    for name in ("c", "d"):
        np.save(tmp_path / f"{name}.npy", np.full(16, 7, np.float32))
    for name in read_only:
        os.chmod(tmp_path / f"{name}.npy", 0o444)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, err = run_cli([source, *(f"--tensor={n}={tmp_path / (n + '.npy')}" for n in "acd")], capsys)
    first = tmp_path / (read_only[0] + ".npy")
    assert code == 2
    assert err == (f"error: tensor {read_only[0]}: {first} is read-only; it is not overwritten "
                   "(make it writable, or write the output elsewhere)\n")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_read_only_ptx_output_is_refused(tmp_path, capsys):
    from compiler.cli import commands

    target = tmp_path / "add.ptx"
    target.write_text("old")
    os.chmod(target, 0o444)
    with pytest.raises(SystemExit) as info:
        run_main(commands.main, ["ptx", str(EXAMPLES / "add.phk"), "--dim", "N=1024", "-o", str(target)])
    assert info.value.code == 2
    assert capsys.readouterr().err == (f"error: -o {target}: {target} is read-only; it is not overwritten "
                                       "(make it writable, or write the output elsewhere)\n")
    assert target.read_text() == "old" and sorted(tmp_path.iterdir()) == [target]
