"""Where CI requires the extras (PHOBOS_REQUIRE_EXTRAS=1), torch is installed; elsewhere this
folder's tests skip without it. Imports nothing that needs torch: so the folder always collects a
test (pytest fails a run that collects none)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def test_torch_is_installed_where_the_extras_are_required():
    found = importlib.util.find_spec("torch") is not None
    if os.environ.get("PHOBOS_REQUIRE_EXTRAS") == "1":
        assert found, "PHOBOS_REQUIRE_EXTRAS=1 but torch is not installed: run tools/extras torch"
    elif not found:
        pytest.skip("torch is not installed (docs/torch.md)")
