"""Tests run under the repo's .venv (set up by tools/bazel) with the locked packages importable."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest


def test_interpreter_is_the_repos_venv():
    venv = Path(sys.prefix)
    assert sys.prefix != sys.base_prefix, f"not in a venv: {sys.executable}"
    assert venv.name == ".venv" and (venv.parent / "third_party" / "requirements.lock").is_file()
    if "TEST_SRCDIR" in os.environ:  # under Bazel: tools/bazel passed the stamp of that same .venv
        assert os.environ["PHOBOS_VENV_STAMP"] == (venv / ".phobos-stamp").read_text().strip()


@pytest.mark.parametrize("module", ["capnp", "structlog", "numpy", "ml_dtypes", "uvloop", "hypothesis"])
def test_locked_packages_import(module):
    importlib.import_module(module)


def test_nvrtc_is_installed_without_a_gpu():
    import nvidia.cuda_nvrtc

    [folder] = nvidia.cuda_nvrtc.__path__
    assert (Path(folder) / "lib" / "libnvrtc.so.12").is_file()
