"""torch and phobos.torch for the torch integration's tests: the module importing this is skipped
where torch is not installed, except where $PHOBOS_REQUIRE_EXTRAS=1 (CI sets it: .ci/run), where a
missing torch fails the run instead of passing it by skipping every test. phobos.torch is imported
from here, after the check: without torch its import is an error, not a skip."""

from __future__ import annotations

import pytest

from tests.extras import extras_required

if extras_required():
    import torch  # an ImportError here fails the test module
else:
    torch = pytest.importorskip("torch", reason="torch is not installed (docs/torch.md)")

import phobos.torch as pt  # noqa: E402

__all__ = ["pt", "torch"]
