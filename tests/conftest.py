"""Settings shared by every test folder, under Bazel and plain pytest alike."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def gpu_missing() -> str | None:
    """Why GPU tests cannot run here, or None when cupy sees at least one device."""
    try:
        import cupy
    except ImportError as err:
        return f"no GPU: cupy is not importable ({err})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # cupy raises its own CUDA errors where there is no driver
        return f"no GPU: CUDA finds no device ({err})"
    return None if count else "no GPU: CUDA finds no device"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked `gpu` where there is no GPU (cupy is only imported when one is collected)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    reason = gpu_missing() if gpu_items else None
    if reason:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))
