"""Find the repository's own files (examples/, schemas/, ...) from programs and tests.

Under Bazel, code runs from a runfiles tree that mirrors the checkout but holds only what its target
declares (`data = ["//examples"]`, ...); under plain `pytest` or `python -m`, it runs from the checkout.
This file sits at common/paths.py in both trees, so the root is two folders up. Symlinks are not
resolved: in a runfiles tree they lead back into the checkout and would hide a missing `data` entry.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(os.path.abspath(__file__)).parent.parent


def repo_file(relpath: str | os.PathLike) -> Path:
    """The path of `relpath` (e.g. "examples/matmul.phk") in the checkout or the runfiles tree."""
    path = REPO_ROOT / relpath
    if not path.exists():
        raise FileNotFoundError(
            f"{relpath} is not under {REPO_ROOT}; under Bazel, add the target that holds it "
            f"(e.g. //examples) to the data of the test or binary"
        )
    return path
