"""common.paths finds the repo's files in the checkout and in Bazel's runfiles tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.paths import REPO_ROOT, repo_file


def test_root_is_the_runfiles_tree_under_bazel_and_the_checkout_otherwise():
    if "TEST_SRCDIR" in os.environ:
        expected = Path(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])
    else:
        expected = Path(__file__).resolve().parents[2]
    assert REPO_ROOT == expected


def test_finds_declared_files():
    assert repo_file("pyproject.toml").is_file()
    assert repo_file("schemas/job.capnp").is_file()  # data of //schemas
    assert repo_file("examples/matmul.phk").is_file()  # data = ["//examples"]


def test_missing_file_says_how_to_declare_it():
    with pytest.raises(FileNotFoundError, match="add the target that holds it"):
        repo_file("examples/no-such-kernel.phk")
