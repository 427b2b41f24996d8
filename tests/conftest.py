"""Settings shared by every test folder, under Bazel and plain pytest alike."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest

_OWN_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Every test run gets its own, empty cache folder (common/cache.py), inherited by the programs
    the tests start: a run never reads or writes the user's ~/.cache/phobos (nor a PHOBOS_CACHE_DIR
    of theirs), and no test passes because an earlier run left its PTX behind. Within the run the
    folder is shared, so a leaf that several tests compile is compiled once; under `tools/bazel
    test` its PTX is shared by all the command's targets too."""
    base = os.environ.get("TEST_TMPDIR")  # under Bazel: the test's scratch folder
    folder = tempfile.mkdtemp(prefix="phobos-test-cache-", dir=base)
    _OWN_CACHE.append(folder)
    os.environ["PHOBOS_CACHE_DIR"] = folder
    shared_ptx = os.environ.get("PHOBOS_TEST_SHARED_PTX")
    if shared_ptx:
        # Under `tools/bazel test`: the PTX folder is that one command's, shared by its targets
        # and shards (tests/run_pytest.py), so a kernel several of them compile is compiled once.
        # Only PTX: an entry is NVRTC's output for exactly its source and options, checked by its
        # sha256, so a test sees the same text whoever compiled it. Tunings, calibrations and the
        # rest stay in this run's own folder.
        os.makedirs(shared_ptx, exist_ok=True)
        os.symlink(shared_ptx, os.path.join(folder, "ptx"))


def pytest_unconfigure(config: pytest.Config) -> None:
    while _OWN_CACHE:
        shutil.rmtree(_OWN_CACHE.pop(), ignore_errors=True)


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
