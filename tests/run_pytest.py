"""The pytest runner behind every phobos_pytest target (tools/pytest.bzl); one file, shared by all.

Bazel runs it from the runfiles tree with the target's test files as arguments. It hands pytest the
places Bazel collects results from and honours `bazel test --test_filter=EXPR` (as pytest -k EXPR).
"""

from __future__ import annotations

import os
import sys


def pytest_args(argv: list[str], env: dict[str, str]) -> list[str]:
    args = ["-rs", *argv]  # -rs: list skip reasons (e.g. "no GPU") in the test log
    if "XML_OUTPUT_FILE" in env:
        args.append(f"--junitxml={env['XML_OUTPUT_FILE']}")
    if "TEST_TMPDIR" in env:
        args.append(f"--basetemp={env['TEST_TMPDIR']}/pytest")
    if env.get("TESTBRIDGE_TEST_ONLY"):
        args += ["-k", env["TESTBRIDGE_TEST_ONLY"]]
    return args


def scratch_environment(env: dict[str, str]) -> dict[str, str]:
    """Under Bazel, where tools write their own files: in the test's scratch folder, never in the
    checkout. Many tests start programs (pods, the scheduler) with the checkout on PYTHONPATH; their
    bytecode would otherwise land in compiler/__pycache__ and the like. Inherited by subprocesses."""
    if "TEST_TMPDIR" not in env:
        return {}
    tmp = env["TEST_TMPDIR"]
    # Hypothesis keeps its example database in the working directory, the runfiles tree here.
    return {"HYPOTHESIS_STORAGE_DIRECTORY": f"{tmp}/hypothesis", "PYTHONPYCACHEPREFIX": f"{tmp}/pycache"}


if __name__ == "__main__":
    # Python put this script's folder, symlinks resolved, first on sys.path: that is tests/ in the
    # checkout, where tests/compiler would pass for the compiler package. Imports come from the
    # runfiles tree only (pytest adds its root, see pythonpath in pyproject.toml).
    del sys.path[0]
    for name, value in scratch_environment(dict(os.environ)).items():
        os.environ.setdefault(name, value)
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]  # this process too, not only its children
    import pytest

    sys.exit(pytest.main(pytest_args(sys.argv[1:], dict(os.environ))))
