"""The //examples and //docs filegroups hold only files that git tracks.

Every test depends on both; a file that a run or a test writes into one of their folders (bytecode
in examples/jobs/__pycache__, the README's main job's examples/jobs/out/C.npy) would change the
filegroup and make Bazel rerun every test. Under Bazel the filegroups are what the runfiles tree
holds under examples/ and docs/; under plain pytest their glob patterns are evaluated here on the
checkout. Either way the result must equal `git ls-files` (less the BUILD files).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from common.paths import REPO_ROOT

FILEGROUPS = ("examples", "docs")


def _checkout() -> Path:
    """The git checkout: under Bazel, where the runfiles' symlinks lead."""
    return Path(os.path.realpath(REPO_ROOT / "README.md")).parent


def _tracked(folder: str) -> set[str]:
    try:
        out = subprocess.run(["git", "-C", str(_checkout()), "ls-files", "--", folder],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.fail(f"this test needs git and the checkout's .git ({err})")
    # BUILD files and git's own files (examples/jobs/out/.gitignore) are no data.
    return {line for line in out.splitlines()
            if not line.endswith("BUILD.bazel") and not line.rsplit("/", 1)[-1].startswith(".git")}


def _glob_patterns(folder: str) -> list[str]:
    build = (_checkout() / folder / "BUILD.bazel").read_text()
    match = re.search(r'name = "' + folder + r'",\s*srcs = glob\((\[.*?\])', build, re.S)
    assert match, f"{folder}/BUILD.bazel: the {folder} filegroup is not a plain glob([...])"
    return ast.literal_eval(match.group(1))


def _filegroup(folder: str) -> set[str]:
    if os.environ.get("TEST_SRCDIR"):  # under Bazel: the runfiles tree holds exactly the filegroup
        root = REPO_ROOT / folder
        return {f"{folder}/{p.relative_to(root)}" for p in root.rglob("*") if p.is_file() or p.is_symlink()}
    root = _checkout() / folder
    return {f"{folder}/{p.relative_to(root)}" for pattern in _glob_patterns(folder)
            for p in root.glob(pattern) if p.is_file()}


@pytest.mark.parametrize("folder", FILEGROUPS)
def test_filegroup_holds_only_tracked_files(folder):
    assert _filegroup(folder) - _tracked(folder) == set()


@pytest.mark.parametrize("folder", FILEGROUPS)
def test_filegroup_holds_every_tracked_file(folder):
    assert _tracked(folder) - _filegroup(folder) == set()


@pytest.mark.parametrize("folder", FILEGROUPS)
def test_written_files_stay_out_of_the_filegroup(folder, tmp_path):
    """What runs and tests write (bytecode, job outputs, hidden files) is not globbed."""
    if os.environ.get("TEST_SRCDIR"):
        pytest.skip("evaluates the glob patterns on the checkout; under Bazel the two tests above check "
                    "the real filegroup")
    root = tmp_path / folder
    for written in ("jobs/__pycache__/make_inputs.cpython-311.pyc", "jobs/out/C.npy", ".x.npy.tmp",
                    "a.npy", "run.html"):
        (root / written).parent.mkdir(parents=True, exist_ok=True)
        (root / written).write_bytes(b"")
    assert [p for pattern in _glob_patterns(folder) for p in root.glob(pattern)] == []


# Options `test` may set beyond `build`'s without making Bazel discard its analysis cache when the
# user switches between `run` and `test`: they steer running and reporting, not the configuration.
# A configuration option (--test_env, --test_arg, --define, ...) belongs under `build`, which both
# commands inherit.
TEST_ONLY_OPTIONS = {"--test_output", "--test_summary", "--test_verbose_timeout_warnings",
                     "--build_tests_only", "--test_tag_filters", "--test_size_filters",
                     "--test_timeout_filters"}


def test_run_and_test_share_one_configuration():
    rc = (_checkout() / ".bazelrc").read_text()
    commands = {line.split()[0] for line in rc.splitlines() if line.strip() and not line.startswith("#")}
    assert commands <= {"build", "test", "try-import"}, commands  # no `run`-only options either
    test_options = [option.split("=")[0] for line in rc.splitlines() if line.startswith("test ")
                    for option in line.split()[1:]]
    assert set(test_options) <= TEST_ONLY_OPTIONS, set(test_options) - TEST_ONLY_OPTIONS
    build_options = [line.split()[1] for line in rc.splitlines() if line.startswith("build ")]
    assert "--test_env=PHOBOS_VENV_STAMP" in build_options  # tools/bazel's stamp still reaches tests
    assert "--test_env=PHOBOS_TEST_RUN" in build_options  # and the link to the command's folder


def test_the_root_package_globs_no_subfolder():
    """A `**` glob at the root walks into the bazel-<folder> convenience symlink, the execroot that
    every command replants: each `bazel run`, `build` or `test` then reloaded the root package and
    re-analysed its dependents. Subfolders have their own packages."""
    build = (_checkout() / "BUILD.bazel").read_text()
    patterns = [p for args in re.findall(r"glob\((\[.*?\])", build, re.S) for p in ast.literal_eval(args)]
    assert patterns and all("/" not in p for p in patterns), patterns
