"""Where CI requires the extras (PHOBOS_REQUIRE_EXTRAS=1), PyYAML is installed; elsewhere this
folder's tests skip without it. Imports nothing that needs PyYAML: so the folder always collects a
test (pytest fails a run that collects none)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def test_pyyaml_is_installed_where_the_extras_are_required():
    found = importlib.util.find_spec("yaml") is not None
    if os.environ.get("PHOBOS_REQUIRE_EXTRAS") == "1":
        assert found, "PHOBOS_REQUIRE_EXTRAS=1 but PyYAML is not installed: run tools/extras torch"
    elif not found:
        pytest.skip("PyYAML is not installed (docs/kubernetes.md)")
