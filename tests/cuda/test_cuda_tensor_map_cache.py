"""The launch path keeps tensor maps and packed argument blocks (compiler/cuda/mainloops/tma_ws/maps.py):
checked on the CPU against a driver that records its calls and reads the launch's parameters
back from the addresses it is given, as cuLaunchKernel does."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from compiler.cuda.mainloops.tma_ws import maps as tensor_maps
from compiler.cuda.mainloops.tma_ws.maps import MapSpec, TensorMap

SPEC = MapSpec("tm_k", "K", 128, 64, 4096, 128, outer=(8,))


class Driver:
    """Encodes a map as its address argument (so a test can tell maps apart) and reads every
    launch's parameter block as the kernel would."""

    def __init__(self) -> None:
        self.encoded: list[int] = []
        self.launched: list[list] = []

    def cuTensorMapEncodeTiled(self, out, kind, rank, ptr, *rest):  # noqa: N802 (the driver's name)
        if ptr == 0:
            return 1  # CUDA_ERROR_INVALID_VALUE
        self.encoded.append(ptr)
        ctypes.c_uint64.from_address(out).value = ptr
        return 0

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, slots, extra):  # noqa: N802
        read = [ctypes.c_uint64.from_address(slots[0]).value, ctypes.c_uint64.from_address(slots[1]).value,
                ctypes.c_float.from_address(slots[2]).value, ctypes.c_int32.from_address(slots[3]).value]
        self.launched.append([ctypes.addressof(slots), *read])
        return 0


@pytest.fixture
def driver(monkeypatch):
    d = Driver()
    monkeypatch.setattr(tensor_maps, "_driver", lambda: d)
    tensor_maps._MAPS.clear()
    tensor_maps._PACKED.clear()
    yield d
    tensor_maps._MAPS.clear()
    tensor_maps._PACKED.clear()


def _go(ptr_k: int, ptr_o: int, scale: float, n: int) -> None:
    args = [(SPEC, ptr_k), ptr_o, np.float32(scale), np.int32(n)]
    tensor_maps.launch(7, (32, 8, 1), (384, 1, 1), 1024, 0, args)


def test_a_map_is_made_once_per_spec_and_address(driver):
    a = tensor_maps.encode(SPEC, 0x1000)
    assert tensor_maps.encode(SPEC, 0x1000) is a and driver.encoded == [0x1000]
    b = tensor_maps.encode(SPEC, 0x2000)
    other = tensor_maps.encode(MapSpec("tm_v", "V", 128, 64, 4096, 128, outer=(8,)), 0x1000)
    assert b is not a and other is not a and driver.encoded == [0x1000, 0x2000, 0x1000]
    assert ctypes.c_uint64.from_address(b.address()).value == 0x2000


def test_a_failed_encode_is_an_error_and_is_not_kept(driver):
    for _ in range(2):
        with pytest.raises(RuntimeError, match="cuTensorMapEncodeTiled"):
            tensor_maps.encode(SPEC, 0)


def test_a_launch_reads_its_own_arguments_from_a_kept_block(driver):
    _go(0x1000, 0x5000, 0.5, 3)
    _go(0x1000, 0x5000, 0.5, 3)
    (block1, *args1), (block2, *args2) = driver.launched
    assert block1 == block2 and args1 == args2 == [0x1000, 0x5000, 0.5, 3]
    # any argument that changes gives a block with the new values, never the old one's
    _go(0x1000, 0x5000, 0.25, 3)
    _go(0x1000, 0x6000, 0.25, 3)
    _go(0x2000, 0x6000, 0.25, 4)
    assert [r[1:] for r in driver.launched[2:]] == [
        [0x1000, 0x5000, 0.25, 3], [0x1000, 0x6000, 0.25, 3], [0x2000, 0x6000, 0.25, 4]]
    assert driver.encoded == [0x1000, 0x2000]  # a map is made once, whatever else changes


def test_scalars_that_compare_equal_but_differ_get_their_own_block(driver):
    _go(0x1000, 0x5000, 0.0, 3)
    _go(0x1000, 0x5000, -0.0, 3)
    assert str(driver.launched[-1][3]) == "-0.0" and driver.launched[0][0] != driver.launched[1][0]
    _go(0x1000, 0x5000, float("nan"), 3)
    assert driver.launched[-1][3] != driver.launched[-1][3]  # NaN, not a kept 0.0


def test_the_kept_tables_are_bounded(driver, monkeypatch):
    monkeypatch.setattr(tensor_maps, "KEPT", 4)
    for i in range(10):
        _go(0x1000 * (i + 1), 0x5000, 0.5, i)
    assert len(tensor_maps._MAPS._items) == 4 and len(tensor_maps._PACKED._items) == 4
    _go(0x1000, 0x5000, 0.5, 0)  # evicted: made again, and still right
    assert driver.encoded[-1] == 0x1000 and driver.launched[-1][1:] == [0x1000, 0x5000, 0.5, 0]
    made = len(driver.encoded)
    assert isinstance(tensor_maps.encode(SPEC, 0x1000), TensorMap)
    assert len(driver.encoded) == made  # the launch just made it: kept
    tensor_maps.encode(SPEC, 0x2000)  # the oldest, evicted by the later ones: made anew
    assert driver.encoded[made:] == [0x2000]
