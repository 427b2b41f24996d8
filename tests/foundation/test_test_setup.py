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


def test_hypothesis_is_loaded_only_for_folders_that_import_it(tmp_path):
    runner = load("tests/run_pytest.py")
    plain, fuzzed = tmp_path / "plain", tmp_path / "fuzzed"
    plain.mkdir(), fuzzed.mkdir()
    (plain / "test_a.py").write_text("import pytest\nNOTE = 'not an import hypothesis'\n")
    (fuzzed / "test_b.py").write_text("import pytest\n")
    (fuzzed / "strategies.py").write_text("from hypothesis import strategies as st\n")
    assert runner.plugin_args([str(plain / "test_a.py")]) == ["-p", "no:hypothesispytest"]
    assert runner.plugin_args([str(plain / "test_a.py"), str(fuzzed / "test_b.py")]) == []
    assert runner.plugin_args([]) == []


def test_a_bazel_test_command_shares_its_ptx_and_bytecode_folder(tmp_path):
    """tools/bazel links PHOBOS_TEST_RUN to a new folder per `test` command: the runner puts the
    bytecode there and hands the PTX folder to tests/conftest.py; a dangling or missing link (the
    command is over, or Bazel was run without tools/bazel) shares nothing."""
    runner = load("tests/run_pytest.py")
    run = tmp_path / "run.abc"
    run.mkdir()
    link = tmp_path / "current"
    link.symlink_to(run)
    env = {"TEST_TMPDIR": "/t", "PHOBOS_TEST_RUN": str(link)}
    assert runner.command_folder(env) == str(run)
    assert runner.scratch_environment(env) == {
        "HYPOTHESIS_STORAGE_DIRECTORY": "/t/hypothesis", "PYTHONPYCACHEPREFIX": f"{run}/pycache",
        "PHOBOS_TEST_SHARED_PTX": f"{run}/ptx"}
    run.rmdir()
    assert runner.command_folder(env) is None
    assert "PHOBOS_TEST_SHARED_PTX" not in runner.scratch_environment(env)
    link.unlink()
    assert runner.command_folder(env) is None
    assert runner.command_folder({"PHOBOS_TEST_RUN": str(tmp_path)}) is None  # not a link
    assert runner.command_folder({}) is None


def test_a_run_links_the_shared_ptx_folder_into_its_own_cache(tmp_path):
    """tests/conftest.py: the run's cache folder is its own; only ptx/ is the command's."""
    shared = tmp_path / "shared-ptx"
    (tmp_path / "test_linked.py").write_text(
        "import os\nfrom pathlib import Path\n\nfrom common import cache\n\n\ndef test_linked():\n"
        f"    assert (cache.cache_dir() / 'ptx').resolve() == Path({str(shared)!r})\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PHOBOS_CACHE_DIR", "TEST_TMPDIR")}
    env["PHOBOS_TEST_SHARED_PTX"] = str(shared)
    result = _pytest_run(tmp_path, tmp_path / "test_linked.py", env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout and shared.is_dir()


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


def _pytest_run(tmp_path: Path, test_file: Path, env: dict[str, str], runner: bool = False,
                extra: tuple = ()):
    """A separate pytest run, with tests/conftest.py as its plugin, on one file (or folder)."""
    env = {**env, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "tests"), str(REPO_ROOT)])}
    head = [str(repo_file("tests/run_pytest.py"))] if runner else ["-m", "pytest", "-rs"]
    cmd = [sys.executable, *head, "-p", "conftest", "-c", str(repo_file("pyproject.toml")),
           "--rootdir", str(tmp_path), *extra, str(test_file)]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_test_run_compiles_into_its_own_cache_never_the_users(tmp_path):
    """With HOME at an empty folder and no PHOBOS_CACHE_DIR, a run that compiles PTX (through
    NVRTC, as tests/cuda does) leaves HOME empty: tests/conftest.py gave the run its own folder."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "test_compiles.py").write_text(
        "import os\nfrom pathlib import Path\n\nfrom common import cache\n"
        "from compiler.cuda.nvrtc import compile_to_ptx\n\n\ndef test_compile():\n"
        "    assert '.entry' in compile_to_ptx('extern \"C\" __global__ void k(float* x) { x[0] = 1; }')\n"
        "    assert list((cache.cache_dir() / 'ptx').iterdir())  # the PTX was cached, somewhere\n"
        "    assert not cache.cache_dir().is_relative_to(Path.home())\n"
        "    print('cache at', os.environ['PHOBOS_CACHE_DIR'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PHOBOS_CACHE_DIR", "TEST_TMPDIR")}
    result = _pytest_run(tmp_path, tmp_path / "test_compiles.py", {**env, "HOME": str(home)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert list(home.iterdir()) == []


def test_the_runner_runs_one_shard_of_the_tests_when_bazel_shards(tmp_path):
    (tmp_path / "test_five.py").write_text(
        "import pytest\n\n\n@pytest.mark.parametrize('i', range(5))\ndef test_i(i):\n    print('ran', i)\n")
    ran = []
    for index in range(2):
        status = tmp_path / f"status{index}"
        env = {**os.environ, "TEST_TOTAL_SHARDS": "2", "TEST_SHARD_INDEX": str(index),
               "TEST_SHARD_STATUS_FILE": str(status)}
        env.pop("TEST_TMPDIR", None)
        env.pop("XML_OUTPUT_FILE", None)
        result = _pytest_run(tmp_path, tmp_path / "test_five.py", env, runner=True)
        assert result.returncode == 0, result.stdout + result.stderr
        assert status.exists()  # tells Bazel the runner shards
        ran.append(int(result.stdout.split(" passed")[0].split()[-1]))
    assert ran == [3, 2]  # every test once, over both shards


def test_the_runner_can_deal_whole_test_files_to_the_shards(tmp_path):
    runner = load("tests/run_pytest.py")
    for name, count in (("test_a.py", 3), ("test_b.py", 1), ("test_c.py", 2)):
        (tmp_path / name).write_text(
            f"import pytest\n\n\n@pytest.mark.parametrize('i', range({count}))\ndef test_i(i):\n    pass\n")
    ran = []
    for index in range(2):
        env = {**os.environ, "TEST_TOTAL_SHARDS": "2", "TEST_SHARD_INDEX": str(index)}
        for name in ("TEST_TMPDIR", "XML_OUTPUT_FILE", "TEST_SHARD_STATUS_FILE"):
            env.pop(name, None)
        result = _pytest_run(tmp_path, tmp_path, env, runner=True, extra=[runner.WHOLE_MODULES, "-v"])
        assert result.returncode == 0, result.stdout + result.stderr
        ran.append(sorted({line.split("::")[0] for line in result.stdout.splitlines() if " PASSED" in line}))
    assert ran == [["test_a.py", "test_c.py"], ["test_b.py"]]  # files in collection order, each whole


def test_ci_runs_the_readmes_test_command_with_an_empty_cache_and_watches_the_users():
    """.ci/run (outside Bazel's runfiles: read from the checkout) runs the README's test command as
    written, with PHOBOS_CACHE_DIR a new empty folder, fails when the user's cache changed, and
    keeps the marked place where the torch/Slurm steps go."""
    import re

    checkout = Path(os.path.realpath(REPO_ROOT / "README.md")).parent
    ci = (checkout / ".ci" / "run").read_text()
    readme = (checkout / "README.md").read_text()
    test_command = re.search(r"^tools/bazel test //\.\.\.$", readme, re.M).group(0)
    assert re.search(rf"^{re.escape(test_command)}$", ci, re.M)
    assert 'PHOBOS_CACHE_DIR=$(mktemp -d' in ci and "export PHOBOS_CACHE_DIR" in ci
    assert 'user_cache="${XDG_CACHE_HOME:-$HOME/.cache}/phobos"' in ci and "changed the user's cache" in ci
    hook = ci.index("# ---- EXTRA CI STEPS"), ci.index("# ---- END EXTRA CI STEPS")
    assert ci.index(test_command) < hook[0] < hook[1] < ci.index("tools/bazel shutdown")
    done = subprocess.run(["bash", "-n", str(checkout / ".ci" / "run")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
