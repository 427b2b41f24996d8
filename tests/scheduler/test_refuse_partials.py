"""Programs whose cluster loop keeps partials apart from the output (an online softmax, a split)
run in the sequential reference only: the scheduler's compile and the planner refuse them in one
line rather than plan their scratch tensors as storage."""

from __future__ import annotations

import pytest

from common.errors import UserError
from compiler.cluster.build import compile_cluster
from compiler.cluster.tree import SplitRequest
from scheduler.planner import NodeFigure, plan
from scheduler.prepare import compile_program
from tests.cluster.helpers import small


def test_the_scheduler_refuses_an_online_softmax_cluster_loop():
    with pytest.raises(UserError, match="m_partial, l_partial, acc_partial.*does not run yet"):
        compile_program(small("decode_gqa_small"), {"G": 8, "S": 512}, {"BS": 64})


def test_the_planner_refuses_a_split_sum():
    program = compile_cluster(small("matmul_small"), {"M": 64, "N": 64, "K": 128},
                              cluster_values={"TILE_K": 64}, split=SplitRequest(2))
    uris = {t.name: f"file:///tmp/{t.name}.npy" for t in program.tensors}
    with pytest.raises(UserError, match=r"C~partial\), which the cluster runtime does not run yet"):
        plan(program, [NodeFigure(0), NodeFigure(1)], uris)
