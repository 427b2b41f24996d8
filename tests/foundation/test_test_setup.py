"""The shared pytest runner, the GPU skip in tests/conftest.py and the //:ruff completeness check."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from common.paths import REPO_ROOT, repo_file


def load(relpath: str):
    spec = importlib.util.spec_from_file_location(Path(relpath).stem, repo_file(relpath))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runner_maps_bazels_test_environment_to_pytest():
    runner = load("tests/run_pytest.py")
    env = {"XML_OUTPUT_FILE": "/o/test.xml", "TEST_TMPDIR": "/t", "TESTBRIDGE_TEST_ONLY": "lexer"}
    args = runner.pytest_args(["tests/x/test_a.py"], env)
    assert args[:2] == ["-rs", "tests/x/test_a.py"]
    assert {"--junitxml=/o/test.xml", "--basetemp=/t/pytest"} <= set(args)
    assert args[-2:] == ["-k", "lexer"]
    assert runner.pytest_args([], {}) == ["-rs"]
    # what tests and the programs they start write goes to the scratch folder, not the checkout
    assert runner.scratch_environment({"TEST_TMPDIR": "/t"}) == {
        "HYPOTHESIS_STORAGE_DIRECTORY": "/t/hypothesis", "PYTHONPYCACHEPREFIX": "/t/pycache"}
    assert runner.scratch_environment({}) == {}


def test_runner_empties_its_scratch_folder(tmp_path):
    runner = load("tests/run_pytest.py")
    for written in ("pytest/test_a0/x.npy", "pycache/work/compiler/ir.cpython-311.pyc", "hypothesis/db/1"):
        (tmp_path / written).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / written).write_bytes(b"1")
    (tmp_path / "loose.txt").write_text("1")
    runner.empty_scratch(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and importlib.util.find_spec("cupy") is not None


def test_gpu_tests_skip_cleanly_without_a_gpu(tmp_path):
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n\n@pytest.mark.gpu\ndef test_needs_gpu():\n"
        "    import cupy\n\n    assert cupy.cuda.runtime.getDeviceCount() > 0\n"
    )
    # A separate pytest run with tests/conftest.py as its only plugin, on that one file.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "tests"), str(REPO_ROOT)])}
    cmd = [sys.executable, "-m", "pytest", "-rs", "-p", "conftest", "-c", str(repo_file("pyproject.toml")),
           "--rootdir", str(tmp_path), str(tmp_path / "test_marked.py")]
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    if has_gpu():
        assert "1 passed" in result.stdout, result.stdout
    else:
        assert result.returncode == 0, result.stdout
        assert "1 skipped" in result.stdout and "no GPU: cupy is not importable" in result.stdout


def test_ruff_check_names_files_left_out_of_its_data(tmp_path, monkeypatch):
    ruff_check = load("tests/foundation/ruff_check.py")
    checkout, runfiles = tmp_path / "checkout", tmp_path / "runfiles"
    skipped = [".venv/x.py", "third_party/y.py", "bazel-out/z.py", "build/lib/pkg/a.py"]
    for rel in ["pyproject.toml", "pkg/a.py", "newpkg/b.py", *skipped]:
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("")
    (runfiles / "pkg").mkdir(parents=True)
    for rel in ["pyproject.toml", "pkg/a.py"]:  # a runfiles tree is symlinks into the checkout
        (runfiles / rel).symlink_to(checkout / rel)
    assert ruff_check.python_files(checkout) == {"pkg/a.py", "newpkg/b.py"}
    monkeypatch.chdir(runfiles)
    assert ruff_check.main() == 1
    (runfiles / "newpkg").mkdir()
    (runfiles / "newpkg/b.py").symlink_to(checkout / "newpkg/b.py")
    assert ruff_check.main() == 0


def test_a_test_folder_importing_another_folders_module_depends_on_it():
    """Bazel runs each test folder with its own files and the libraries it names: a test that
    imports a module of another test folder (tests.faults.harness, say) collects under pytest
    from the checkout, and fails under `tools/bazel test //...` unless its BUILD file names a
    target of that folder. Every such import must have that dependency."""
    import ast
    import re

    checkout = Path(os.path.realpath(REPO_ROOT / "README.md")).parent  # under Bazel, the git checkout
    tests = checkout / "tests"
    folders = {p.parent.name for p in tests.glob("*/BUILD.bazel")}
    missing = []
    for folder in sorted(folders):
        deps = " ".join(re.findall(r"deps\s*=\s*[^\]]*\]", (tests / folder / "BUILD.bazel").read_text()))
        for path in sorted((tests / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                         else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                for name in names:
                    parts = name.split(".")
                    if len(parts) > 2 and parts[0] == "tests" and parts[1] in folders - {folder} \
                            and f'"//tests/{parts[1]}:' not in deps:
                        missing.append(f"{path.relative_to(checkout)} imports {name}; "
                                       f"tests/{folder}/BUILD.bazel's deps name no //tests/{parts[1]} target")
    assert missing == []
