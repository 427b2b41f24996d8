"""The longest-first CTA order of causal attention over the whole grid (render_plan.cta_order,
Schedule.order = "grouped" where the query blocks are launched longest first), checked without a
GPU: the order's C lines, evaluated for every launched CTA, visit each (query block, head) once,
in an order whose work never grows; the row order keeps its per-head reversal; the kernels that
take it compile for sm_90a. On the GPU, test_causal_order_gpu.py runs it against the interpreter."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from cuda_cases import launch_order, load_example

from benchmarks.issue36_rows import CAUSAL_GQA
from compiler.cuda.compiled import compile_kernel, generate_source
from compiler.cuda.schedule import TMA_ATTENTION_PROBE, Schedule
from compiler.frontend import binding
from compiler.frontend import load as frontend

GQA = frontend.select_kernel(frontend.load_text(CAUSAL_GQA), None)


def _compiled(kernel, dims, point, schedule):
    return compile_kernel(kernel, binding.bind(kernel, dims, None, point), schedule=schedule)


@pytest.mark.parametrize(
    "kernel,dims,point",
    [
        (GQA, {"H": 32, "HKV": 8, "N": 4096, "D": 128}, {"BR": 128, "BC": 128}),
        (GQA, {"H": 6, "HKV": 2, "N": 1001, "D": 64}, {"BR": 64, "BC": 64}),
        (load_example("causal_mha_bf16.phk"), {"H": 5, "N": 777, "D": 64}, {"BR": 128, "BC": 64}),
    ],
)
def test_grouped_causal_grid_runs_every_heads_longest_blocks_first(kernel, dims, point):
    # ping-pong turns take two consumer warpgroups (BR = 128): BR = 64 takes the ring alone
    schedule = dataclasses.replace(TMA_ATTENTION_PROBE, order="grouped", pingpong=point["BR"] == 128)
    c = _compiled(kernel, dims, point, schedule)
    gx, gy, _ = c.grid
    order = launch_order(c.cuda_source, c.grid)
    assert sorted(order) == sorted(itertools.product(range(gx), range(gy)))  # a permutation
    # the query block (the trip count of the key loop) never grows along the launch order, and
    # each of a block's heads come one after another
    assert [x for x, _ in order] == sorted((x for x, _ in order), reverse=True)
    assert order[:gy] == [(gx - 1, y) for y in range(gy)]


def test_row_order_keeps_the_per_head_reversal():
    dims, point = {"H": 4, "HKV": 2, "N": 1000, "D": 64}, {"BR": 64, "BC": 64}
    c = _compiled(GQA, dims, point, dataclasses.replace(TMA_ATTENTION_PROBE, order="row", pingpong=False))
    gx, gy, _ = c.grid
    assert launch_order(c.cuda_source, c.grid)[:gx] == [(gx - 1 - i, 0) for i in range(gx)]


def test_the_longest_first_order_needs_x_alone_reversed():
    """A kernel not launched longest first (full attention) keeps the group-major order, and a
    causal one on one head (one CTA along y) has no order lines: reversal alone is longest first."""
    full = load_example("mha_bf16.phk")
    src = generate_source(full, binding.bind(full, {"H": 4, "N": 1024, "D": 64}, None, {"BR": 128, "BC": 64}),
                          schedule=Schedule(wgmma=True, order="grouped")).source
    assert "cta_first" in src
    one_head = _compiled(GQA, {"H": 1, "HKV": 1, "N": 1024, "D": 64}, {"BR": 64, "BC": 64},
                         Schedule(wgmma=True, order="grouped"))
    assert "cta_id" not in one_head.cuda_source and "(15 - (int)blockIdx.x)" in one_head.cuda_source
