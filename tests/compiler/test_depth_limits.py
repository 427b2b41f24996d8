"""Deep input ends in a `file:line:col: error:` with a caret and exit 2, in the CLI and in
`phobos.load`: never Python's RecursionError. At the limits (compiler/frontend/parse_expr.py:
MAX_NESTING, MAX_EXPR_DEPTH) a kernel still checks, runs in the interpreter and becomes CUDA C++."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import phobos
from common.cli import run_main
from compiler.cli import commands
from compiler.frontend.parse_expr import MAX_EXPR_DEPTH, MAX_NESTING

ROOT = Path(__file__).resolve().parents[2]
HEAD = "kernel k(a: tensor<f32>[N], c: tensor<f32>[N]) {\n"
STORE = "  c[0 :+ 16] = a[0 :+ 16] * x\n"


def parens(n: int) -> str:
    return HEAD + "  let x = " + "(" * n + "2.0" + ")" * n + "\n" + STORE + "}\n"


def minuses(n: int) -> str:
    return HEAD + "  let x = " + "- " * n + "2.0\n" + STORE + "}\n"


def nots(n: int) -> str:
    return HEAD + "  let t = " + "not " * n + "true\n  let x = 2.0\n" + STORE + "}\n"


def calls(n: int) -> str:
    return HEAD + "  let x = " + "abs(" * n + "2.0" + ")" * n + "\n" + STORE + "}\n"


def sums(n: int) -> str:
    return HEAD + "  let x = " + " + ".join(["0.5"] * n) + "\n" + STORE + "}\n"


def loops(n: int) -> str:
    opening = "".join(f"  for i{d} in range(0, 1) {{\n" for d in range(n))
    return HEAD + opening + "  let x = 2.0\n" + STORE + "}\n" * n + "}\n"


def tile_shape(n: int) -> str:
    return (HEAD + "  var t: tile<f32>[" + "(" * n + "16" + ")" * n + "] = 0.0\n  let x = 2.0\n"
            + "  c[0 :+ 16] = a[0 :+ 16] * x + t\n}\n")


def shape_lists(n: int) -> str:
    return HEAD + "  let x = 2.0 + sum(full(" + "[" * n + "16" + "]" * n + ", 0.0))\n" + STORE + "}\n"


# Each shape of deep input, with the deepest instance the limits accept (one more is refused). The
# kernel body's own block is one level of nesting; a parenthesis around an expression is one more.
DEEP = {
    "parentheses": (parens, MAX_NESTING - 1),
    "unary minus": (minuses, MAX_NESTING - 1),
    "not": (nots, MAX_NESTING - 1),
    "calls": (calls, MAX_NESTING - 1),
    "operator chain": (sums, MAX_EXPR_DEPTH),  # n terms: a tree n deep
    "blocks": (loops, MAX_NESTING - 2),  # the innermost store's index is one more level
    "tile shape": (tile_shape, MAX_NESTING - 1),
}
# Nested shape lists are never a valid kernel, but 5000 of them still end in the located error.
DEEP_5000 = {**DEEP, "shape lists": (shape_lists, None)}


def phobos_cli(path: Path, *args: str) -> subprocess.CompletedProcess:
    """The `phobos` command, in this process: pytest's frames under it make the stack deeper
    than a real command's (test_the_real_command_exits_2 runs one in its own process)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as done:
        run_main(commands.main, [*args, str(path)])
    return subprocess.CompletedProcess(args, done.value.code, out.getvalue(), err.getvalue())


def assert_clean_depth_error(text: str, name: str) -> None:
    first, source_line, caret = text.splitlines()[:3]
    assert first.startswith(f"{name}:") and ": error: " in first, text
    assert "too deep" in first and "docs/language.md" in first, text
    line, col = (int(v) for v in first.split(":")[1:3])
    assert caret.strip() and set(caret.strip()) == {"^"} and caret.index("^") == col - 1, text
    assert source_line and line >= 2, text
    assert "RecursionError" not in text and "Traceback" not in text, text


@pytest.mark.parametrize("shape", DEEP_5000)
def test_5000_levels_end_in_a_located_error_in_the_cli(shape, tmp_path):
    make, _ = DEEP_5000[shape]
    path = tmp_path / "deep.phk"
    path.write_text(make(5000))
    done = phobos_cli(path, "check")
    assert done.returncode == 2, done.stderr
    assert_clean_depth_error(done.stderr, str(path))


def test_the_real_command_exits_2(tmp_path):
    path = tmp_path / "deep.phk"
    path.write_text(parens(5000))
    code = "import sys; from compiler.cli.commands import entry; sys.argv[0] = 'phobos'; entry()"
    done = subprocess.run([sys.executable, "-c", code, "check", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert_clean_depth_error(done.stderr, str(path))


@pytest.mark.parametrize("shape", DEEP_5000)
def test_5000_levels_end_in_a_located_error_in_phobos_load(shape, tmp_path):
    make, _ = DEEP_5000[shape]
    path = tmp_path / "deep.phk"
    path.write_text(make(5000))
    with pytest.raises(phobos.Error) as info:
        phobos.load(path)
    assert_clean_depth_error(str(info.value), str(path))
    assert info.value.file == str(path) and info.value.line >= 2


@pytest.mark.parametrize("shape", DEEP)
def test_one_level_past_the_limit_is_refused(shape):
    make, deepest = DEEP[shape]
    with pytest.raises(phobos.Error) as info:
        phobos.from_source(make(deepest + 1), filename="k.phk")
    assert_clean_depth_error(str(info.value), "k.phk")


@pytest.mark.parametrize("shape", DEEP)
def test_at_the_limit_a_kernel_checks_runs_and_generates_cuda(shape, tmp_path):
    """The limits are low enough for every later stage (checker, interpreter, CUDA generator),
    which recurse over the tree, even inside pytest's own deep stack."""
    make, deepest = DEEP[shape]
    path = tmp_path / "deep.phk"
    path.write_text(make(deepest))
    a = np.arange(16, dtype=np.float32)
    np.save(tmp_path / "a.npy", a)
    done = phobos_cli(path, "run", "--dim", "N=16", "--tensor", f"a={tmp_path / 'a.npy'}",
                      "--tensor", f"c={tmp_path / 'c.npy'}")
    assert done.returncode == 0, done.stderr
    scale = {"operator chain": 0.5 * deepest, "unary minus": 2.0 * (-1) ** deepest}.get(shape, 2.0)
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), a * scale, rtol=1e-6)
    done = phobos_cli(path, "cuda", "--dim", "N=16")
    assert done.returncode == 0, done.stderr
    assert "__global__" in done.stdout
