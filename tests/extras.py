"""The one rule for tests of an optional extra (torch, PyYAML): where CI requires the extras
($PHOBOS_REQUIRE_EXTRAS=1, .ci/run) the module must be installed, and a missing one fails the run;
elsewhere its tests skip."""

from __future__ import annotations

import importlib.util
import os

import pytest


def extras_required() -> bool:
    return os.environ.get("PHOBOS_REQUIRE_EXTRAS") == "1"


def check_extra_installed(module: str, what: str, page: str) -> None:
    """The body of each extra folder's always-collected test (pytest fails a run that collects
    none): `module` imports where the extras are required, else the test skips without it."""
    found = importlib.util.find_spec(module) is not None
    if extras_required():
        assert found, f"PHOBOS_REQUIRE_EXTRAS=1 but {what} is not installed: run tools/extras torch"
    elif not found:
        pytest.skip(f"{what} is not installed ({page})")
