"""Pieces of the CUDA leaf compiler that need neither a GPU nor NVRTC: thread layouts, range
analysis, 1-D layout roles, shared-memory lets and the autotune cache."""

from __future__ import annotations

import json
import re

import novel_cases
import pytest
from cuda_cases import load_example

from compiler.cuda import analysis, compiled
from compiler.cuda.layout import LayoutError, choose_thread_grid, make_dist
from compiler.cuda.tuning import autotune
from compiler.cuda.tuning import pool as compile_pool
from compiler.frontend import ir


def test_dist_positions_cover_the_extent_once():
    d = make_dist(128, 16, "t")
    seen = []
    for t in range(16):
        for i in range(d.count):
            expr = d.position(str(i)).replace("t", str(t))
            seen.append(eval(expr.replace("/", "//")))
    assert sorted(seen) == list(range(128)) and d.vector == 4


def test_small_extent_is_replicated_and_owned_once():
    d = make_dist(4, 16, "t")
    assert d.replicated and d.count == 1 and d.primary() == "(t < 4)"
    with pytest.raises(LayoutError):
        make_dist(48, 32, "t")


def test_thread_grid_prefers_square_dot_blocks():
    g = choose_thread_grid(256, {(128, 128)}, {(128, 128)}, set(), set())
    assert (g.rows, g.cols) == (16, 16)
    g = choose_thread_grid(256, {(1, 1024)}, set(), set(), set())
    assert g.rows == 1 and g.cols == 256  # no idle row replicas for a single-row tile


def test_loop_range_of_a_causal_bound_is_tight():
    start = analysis.IntRange.exact(0)
    stop = analysis.IntRange(64, 4096, 64)
    r = analysis.loop_range(start, stop, 64)
    assert (r.lo, r.hi, r.divisor) == (0, 4032, 64)


def test_flash_attention_roles():
    k = load_example("flash_attention.phk")
    hints = analysis.layout_hints(k.body)
    assert hints["m"] == hints["l"] == hints["m_new"] == hints["correction"] == "row"
    shared = analysis.shared_lets(k.body)
    assert shared == {"q": "a", "k": "b", "v": "b"}
    assert analysis.shared_let_transposed(k.body, "k") and not analysis.shared_let_transposed(k.body, "v")


def test_autotune_cache_key_and_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    k = load_example("matmul.phk")
    key = autotune.cache_key(k, {"M": 1, "N": 2, "K": 3}, "GPU X")
    assert key == autotune.cache_key(k, {"K": 3, "N": 2, "M": 1}, "GPU X")
    assert key != autotune.cache_key(k, {"M": 1, "N": 2, "K": 4}, "GPU X")
    assert key != autotune.cache_key(k, {"M": 1, "N": 2, "K": 3}, "GPU Y")
    other = ir.Kernel(k.name, k.params, k.attributes, k.body, k.span, k.grid, k.source + " ")
    assert key != autotune.cache_key(other, {"M": 1, "N": 2, "K": 3}, "GPU X")
    autotune._write_cache({key: {"best": {"TILE_M": 64}, "ms": 1.0}})
    assert json.loads(autotune.cache_path().read_text())[key]["best"] == {"TILE_M": 64}
    assert len(autotune.search_points(k)) == 64


ROWS_BF16 = """
@autotune(TM in [1, 64], TN in [64])
kernel rows(x: tensor<bf16>[M, K], W: tensor<bf16>[K, N], y: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, 32) {
    acc += dot(x[ctx.block.x * TM :+ TM, kt :+ 32], W[kt :+ 32, ctx.block.y * TN :+ TN])
  }
  y[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc
}
"""


def test_the_tuner_searches_schedules_only_where_a_dot_runs_on_tensor_cores():
    """A 16-bit dot of one row runs on CUDA cores (the fit stage), where every schedule would
    time the same code: a space made only of such points is tuned over its tile values alone."""
    from compiler.frontend import load as frontend

    k = frontend.select_kernel(frontend.load_text(ROWS_BF16), None)
    dims = {"M": 128, "N": 128, "K": 64}
    one_row, sixty_four = {"TM": 1, "TN": 64}, {"TM": 64, "TN": 64}
    assert not autotune.runs_on_tensor_cores(k, dims, [one_row], False)
    assert autotune.runs_on_tensor_cores(k, dims, [sixty_four], False)
    assert autotune.runs_on_tensor_cores(k, dims, autotune.search_points(k), False)
    assert not autotune.runs_on_tensor_cores(load_example("matmul.phk"), {"M": 64, "N": 64, "K": 64},
                                             [{"TILE_M": 32, "TILE_N": 32, "TILE_K": 4}], False)


def test_a_cached_winner_is_returned_before_any_point_is_compiled(tmp_path, monkeypatch):
    """A tuned binding (every later call of a Kernel on new shapes asks tune first) reads the
    cache and compiles nothing: neither the fit check of runs_on_tensor_cores nor a candidate."""
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    k, dims = load_example("matmul_bf16.phk"), {"M": 512, "N": 512, "K": 512}
    key = autotune.cache_key(k, dims, "GPU X", cc=90)
    autotune._write_cache({key: {"best": {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}, "ms": 1.0}})

    def compiles(*args, **kwargs):
        raise AssertionError("a cached binding compiled")

    monkeypatch.setattr(autotune.stages, "run", compiles)
    monkeypatch.setattr(compile_pool, "build", compiles)
    monkeypatch.setattr(compiled, "generate_source", compiles)
    res = autotune.tune(k, dims, cc=90)
    assert res.cached and res.best == {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}


def test_launch_scalar_and_prepared_launch_convert_scalars_one_way():
    """scalars.launch_scalar, which launch, prepared_launch (the pods) and phobos.Kernel's GPU
    calls all use: f32 to np.float32, i32 to np.int32 of a whole number that fits, anything else
    refused with one line naming it; checked here through launch_scalar and prepared_launch,
    before the GPU is touched (launch and phobos.Kernel's GPU call need a device to get there;
    tests/api/test_kernel_numpy.py checks phobos.Kernel's refusal on numpy arrays)."""
    import numpy as np

    from common.errors import UserError
    from compiler.cuda.compiled import compile_generated, generate_source
    from compiler.cuda.launch import prepared_launch
    from compiler.cuda.scalars import launch_scalar
    from compiler.frontend import binding

    f32, i32 = launch_scalar("s", 0.1, "f32"), launch_scalar("n", 3.0, "i32")
    assert (type(f32), f32, type(i32), i32) == (np.float32, np.float32(0.1), np.int32, 3)
    assert launch_scalar("n", -(2**31), "i32") == -(2**31)
    kernel = novel_cases.load("imm")
    b = binding.bind(kernel, novel_cases.CASES["imm"].dims)
    compiled = compile_generated(kernel, generate_source(kernel, b), ptx="")
    whole = "must be an integer (it is i32)"
    refused = [(2.5, whole), (True, whole), (float("nan"), whole), (2**31, "does not fit in i32")]
    for value, why in refused:
        with pytest.raises(UserError, match=re.escape(f"scalar off = {value} {why}")):
            prepared_launch(compiled, {"off": value})
    with pytest.raises(UserError, match="^scalar off is missing$"):
        prepared_launch(compiled, {})
