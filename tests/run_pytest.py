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


if __name__ == "__main__":
    # Python put this script's folder, symlinks resolved, first on sys.path: that is tests/ in the
    # checkout, where tests/compiler would pass for the compiler package. Imports come from the
    # runfiles tree only (pytest adds its root, see pythonpath in pyproject.toml).
    del sys.path[0]
    if "TEST_TMPDIR" in os.environ:
        # Hypothesis keeps its example database in the working directory, the runfiles tree here.
        os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", f"{os.environ['TEST_TMPDIR']}/hypothesis")
    import pytest

    sys.exit(pytest.main(pytest_args(sys.argv[1:], dict(os.environ))))
