"""The three programs start, print usage, take --log-level and resolve paths where the user is."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from common.paths import REPO_ROOT

PROGRAMS = ["compiler", "scheduler", "pod"]


def run(program: str, *args: str, cwd, env=None) -> subprocess.CompletedProcess:
    """The program as `bazel run` starts it: its module from the repo, from another folder."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    cmd = [sys.executable, "-m", f"{program}.main", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_prints_usage(program, tmp_path):
    result = run(program, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ")
    assert "--log-level" in result.stdout


@pytest.mark.parametrize("program", PROGRAMS)
def test_bad_log_level_is_a_clean_user_error(program, tmp_path):
    result = run(program, "--log-level", "loud", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_a_bad_environment_variable_is_a_clean_user_error(tmp_path):
    kernel = REPO_ROOT / "examples" / "add.phk"
    result = run("compiler", "cuda", str(kernel), "--dim", "N=1024", cwd=tmp_path,
                 env={"PHOBOS_CUDA_DOT_UNROLL": "four"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "error: $PHOBOS_CUDA_DOT_UNROLL='four' is not an integer"


# The compiler with no command logs its start and exits 0; the scheduler and pod need a job or a
# token to start at all, so their relative paths are covered by their own tests.
@pytest.mark.parametrize("program", ["compiler"])
def test_relative_paths_are_the_users_not_bazels(program, tmp_path):
    user_dir, runfiles_dir = tmp_path / "user", tmp_path / "runfiles"
    user_dir.mkdir()
    runfiles_dir.mkdir()
    result = run(
        program, "--log-level", "debug", "--log-file", "out.log",
        cwd=runfiles_dir, env={"BUILD_WORKING_DIRECTORY": str(user_dir)},
    )
    assert result.returncode == 0, result.stderr
    assert not (runfiles_dir / "out.log").exists()
    first = json.loads((user_dir / "out.log").read_text().splitlines()[0])
    assert first["level"] == "debug"
