"""Where CI requires the extras (PHOBOS_REQUIRE_EXTRAS=1), torch is installed; elsewhere this
folder's tests skip without it. Imports nothing that needs torch: so the folder always collects a
test (pytest fails a run that collects none)."""

from __future__ import annotations

from tests.extras import check_extra_installed


def test_torch_is_installed_where_the_extras_are_required():
    check_extra_installed("torch", "torch", "docs/torch.md")
