"""bind(): dimension values, tile values, promises and the grid; every mistake one clear line."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from common.errors import UserError
from compiler.frontend.binding import bind
from compiler.frontend.load import load_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def kernel(name):
    return load_file(EXAMPLES / f"{name}.phk").kernel()


def error_of(*args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        bind(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_defaults_env_and_ragged_grid():
    b = bind(kernel("axpby"), {"M": 70, "N": 45})
    assert dict(b.tile_values) == {"BM": 8, "BN": 32}
    assert dict(b.dims) == {"M": 70, "N": 45}
    assert dict(b.env) == {"BM": 8, "BN": 32, "M": 70, "N": 45}
    assert b.grid == (9, 2)  # ceil(70 / 8), ceil(45 / 32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.grid = (1,)
    with pytest.raises(TypeError):
        b.dims["M"] = 3
    with pytest.raises(TypeError):
        b.env.update(M=3)
    assert pickle.loads(pickle.dumps(b)) == b and hash(pickle.loads(pickle.dumps(b))) == hash(b)


def test_tile_values_from_the_expanded_search_space():
    b = bind(kernel("axpby"), {"M": 70, "N": 45}, tile_values={"BM": 16, "BN": 256})
    assert b.tile_values["BM"] == 16 and b.grid == (5, 1)
    assert error_of(kernel("axpby"), {"M": 70, "N": 45}, tile_values={"BM": 12}) == (
        "BM = 12 is outside its @autotune search space (allowed: 8, 16, 32, 64)")
    assert "has no @autotune name BX" in error_of(kernel("axpby"), {"M": 1, "N": 1}, tile_values={"BX": 8})


def test_missing_unknown_and_bad_dimensions():
    assert error_of(kernel("axpby"), {"M": 70}) == (
        "missing dimension N of kernel axpby: give --dim N=... "
        "or an existing tensor file whose shape sets it")
    assert error_of(kernel("axpby"), {"M": 70, "N": 4, "Q": 3}) == (
        "kernel axpby has no dimension Q (it has: M, N)")
    assert "must be at least 1" in error_of(kernel("axpby"), {"M": 0, "N": 4})


def test_single_value_autotune_fixes_a_dimension():
    b = bind(kernel("flash_attention"), {"Nq": 100, "Nk": 50})
    assert b.dims["D"] == 64 and b.env["D"] == 64
    assert bind(kernel("flash_attention"), {"Nq": 100, "Nk": 50, "D": 64}).dims["D"] == 64
    assert error_of(kernel("flash_attention"), {"Nq": 100, "Nk": 50, "D": 32}) == (
        "dimension D = 32 conflicts with @autotune D in [64]")


def test_tensor_shapes_must_match_dims():
    k = kernel("matmul_plain")
    dims = {"M": 64, "N": 32, "K": 16}
    bind(k, dims, {"A": (64, 16), "B": (16, 32), "C": (64, 32)})
    assert error_of(k, dims, {"A": (64, 16), "B": (32, 16)}) == (
        "tensor B: expected shape (16, 32), got (32, 16)")
    assert "has no tensor Z" in error_of(k, dims, {"Z": (1,)})


def test_aligned_promise_is_checked_at_launch():
    assert error_of(kernel("matmul"), {"M": 1000, "N": 64, "K": 64}) == (
        "M = 1000 is not a multiple of TILE_M = 32 (@aligned)")
    b = bind(kernel("matmul"), {"M": 256, "N": 512, "K": 64}, tile_values={"TILE_M": 256, "TILE_K": 32})
    assert b.grid == (1, 16)
    assert error_of(kernel("matmul"), {"M": 256, "N": 256, "K": 48}, tile_values={"TILE_K": 32}) == (
        "K = 48 is not a multiple of TILE_K = 32 (@aligned)")
