"""On the GPU: causal attention with grouped query heads (the GQA kernel of issue 36's table,
benchmarks/issue36_rows.py) equals the reference interpreter in both CTA orders, the row order
(each head's query blocks longest first) and the grouped one (every head's longest blocks first,
render_plan.longest_first_order), at odd N (a ragged last block on and off the diagonal), on the
schedules the tuner searches for it. Tolerance as tests/cuda/test_cuda_tc_gpu.py's attention:
a fast-math exp a few ulp off can round p or an output element to its neighbouring bf16 value."""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest
import test_cuda_tc_gpu as tc

from benchmarks.issue36_rows import CAUSAL_GQA
from compiler.cuda.schedule import Schedule
from compiler.frontend import load as frontend

pytestmark = pytest.mark.gpu

GQA = frontend.select_kernel(frontend.load_text(CAUSAL_GQA), None)
TOL = 2**-8
SCHEDULES = [
    Schedule(wgmma=True, stages=4, rotate=True, tma=True, pingpong=True),
    Schedule(wgmma=True, stages=3, rotate=True, tma=True),
    Schedule(wgmma=True, stages=5, rotate=True, pingpong=True),
    Schedule(wgmma=True, stages=3, rotate=True),
]
# of the 6 (dims, point) pairs: ping-pong prunes BR = 64 (one warpgroup), the cp.async ping-pong
# ring BR = BC = 128 at D = 128 (shared memory), one consumer warpgroup BR = 64, BC = 128 at D = 128
# (registers); test_cuda_tc_counts.py checks these counts on the CPU
RUNS = [4, 5, 3, 5]
POINTS = [{"BR": 128, "BC": 128}, {"BR": 128, "BC": 64}, {"BR": 64, "BC": 128}]
DIMS = [{"H": 8, "HKV": 2, "N": 333, "D": 64}, {"H": 4, "HKV": 1, "N": 517, "D": 128}]


@pytest.mark.parametrize("order", ["row", "grouped"])
@pytest.mark.parametrize("schedule", range(len(SCHEDULES)))
def test_causal_gqa_equals_interpreter_in_both_orders(schedule, order):
    sched = dataclasses.replace(SCHEDULES[schedule], order=order)
    rng = np.random.default_rng(zlib.crc32(f"gqa-{order}".encode()) + schedule)
    ran = 0
    for dims in DIMS:
        for point in POINTS:
            ran += tc._check(GQA, dims, point, sched, TOL, rng, {"scale": dims["D"] ** -0.5})
    assert ran == RUNS[schedule], ran
