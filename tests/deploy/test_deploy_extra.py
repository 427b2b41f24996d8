"""Where CI requires the extras (PHOBOS_REQUIRE_EXTRAS=1), PyYAML is installed; elsewhere this
folder's tests skip without it. Imports nothing that needs PyYAML: so the folder always collects a
test (pytest fails a run that collects none)."""

from __future__ import annotations

from tests.extras import check_extra_installed


def test_pyyaml_is_installed_where_the_extras_are_required():
    check_extra_installed("yaml", "PyYAML", "docs/kubernetes.md")
