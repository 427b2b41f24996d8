"""A cluster loop split over nodes and, inside each node's leaf, over CTAs (issue 33): the
cluster's step leaves (an online softmax resumed from its partial, a sum kept in the output) are
loops the split over CTAs recognises, split into partial and combine kernels with the same merge
as the nodes' (partial_leaves.softmax_merge / sum_merge). Run on the reference interpreter over the
whole cluster program, each step launch as its partial + combine kernels, they equal the plain
kernel and a float64 numpy reference, for odd S and several factors."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.decode_kernel import decode_text
from compiler.cluster.build import compile_cluster
from compiler.cluster.leaves import load_leaf
from compiler.cluster.sequential import run_program
from compiler.cluster.tree import SplitRequest
from compiler.cuda.mainloops.split_loop import plan as split_plan
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.frontend.binding import bind
from compiler.frontend.ir_print import format_kernel
from compiler.frontend.load import load_text
from compiler.interp.interpreter import run_kernel
from tests.cluster.helpers import small


def _split_runner(factor: int, split_launches: list[str]):
    """Each launch of a leaf whose loop splits runs as its partial + combine kernels."""

    def run(kernel, binding, arrays, scalars):
        if split_loop.why_not_split(kernel) is not None:
            run_kernel(kernel, binding, arrays, scalars)
            return
        plan = split_plan.plan_split(kernel, binding, factor=factor)
        split_launches.append(kernel.name)
        split_plan.run_split_reference(plan, arrays, scalars)

    return run


def _decode_reference(q, k, v, scale):
    s = q.astype(np.float64) @ k.astype(np.float64).T * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v.astype(np.float64)) / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("s", [1000, 64 * 9 + 7])
@pytest.mark.parametrize("factor", [2, 3, 7])
def test_a_bf16_cluster_decode_splits_over_nodes_and_ctas(s, factor):
    """examples/decode/gqa_decode.phk with @cluster over super-chunks of 256 keys, two nodes."""
    import ml_dtypes

    kernel = load_text(decode_text("bf16", 16, "64", cluster=(256, 512)), "<cluster decode>").kernels[0]
    rng = np.random.default_rng(s + factor)
    arrays = {"Q": rng.standard_normal((16, 128)).astype(ml_dtypes.bfloat16),
              "K": rng.standard_normal((s, 128)).astype(ml_dtypes.bfloat16),
              "V": rng.standard_normal((s, 128)).astype(ml_dtypes.bfloat16),
              "O": np.full((16, 128), np.nan, np.float32)}
    scalars = {"scale": 1 / np.sqrt(128)}
    dims = {"G": 16, "S": s}
    plain = {n: a.copy() for n, a in arrays.items()}
    run_kernel(kernel, bind(kernel, dims, None, {"BS": 64}), plain, scalars)
    program = compile_cluster(kernel, dims, cluster_values={"BS": 256}, split=SplitRequest(2, "binary"),
                              tile_values={"BS": 64})
    got = {n: a.copy() for n, a in arrays.items()}
    launched: list[str] = []
    run_program(program, got, scalars, runner=_split_runner(factor, launched))
    steps = sum(len([x for x in u.launches if x.leaf.startswith("step")]) for u in program.units)
    assert len(launched) == steps == -(-s // 256)  # every node's step launch split over CTAs
    # the split rounds p to bf16 against each chunk's own maximum, the plain loop against its
    # running one: the two differ by bf16 roundings of p (as tests/cuda/test_split_loop_gpu.py)
    err = np.linalg.norm(got["O"] - plain["O"]) / np.linalg.norm(plain["O"])
    assert err < 2e-2, err
    want = _decode_reference(arrays["Q"], arrays["K"], arrays["V"], scalars["scale"])
    assert np.linalg.norm(got["O"] - want) / np.linalg.norm(want) < 2e-2


@pytest.mark.parametrize("factor", [2, 5])
def test_a_cluster_split_k_splits_over_nodes_and_ctas(factor):
    kernel = small("matmul_small")
    dims = {"M": 64, "N": 64, "K": 448}  # 7 chunks of TILE_K = 64
    rng = np.random.default_rng(factor)
    arrays = {"A": rng.standard_normal((64, 448)).astype(np.float32),
              "B": rng.standard_normal((448, 64)).astype(np.float32),
              "C": rng.standard_normal((64, 64)).astype(np.float32)}
    scalars = {"alpha": 0.5, "beta": 2.0}
    program = compile_cluster(kernel, dims, split=SplitRequest(2, "binary"))
    got = {n: a.copy() for n, a in arrays.items()}
    launched: list[str] = []
    run_program(program, got, scalars, runner=_split_runner(factor, launched))
    assert launched and all(name == "matmul" for name in launched)
    want = 0.5 * arrays["A"].astype(np.float64) @ arrays["B"] + 2.0 * arrays["C"]
    np.testing.assert_allclose(got["C"], want, rtol=1e-4, atol=1e-4)


def test_the_step_leaves_split_with_the_nodes_merge():
    """The combine kernel of a node's step leaf merges with softmax_merge's statements: its
    vars start from the partial the node resumes, and the partial's stores end it."""
    kernel = small("decode_gqa_small")
    program = compile_cluster(kernel, {"G": 8, "S": 1000}, cluster_values={"BS": 128},
                              split=SplitRequest(2, "binary"))
    step = next(leaf for leaf in program.leaves if leaf.name == "step")
    leaf_kernel, b = load_leaf(step)
    plan = split_plan.plan_split(leaf_kernel, b, factor=3)
    combine = format_kernel(plan.combine)
    assert "var m: tile<f32>[BG] = m_partial[row :+ BG]" in combine
    assert "where(m_a_chunk0 == -inf, 0.0, exp(m_a_chunk0 - m_ab_chunk0))" in combine
    assert combine.rstrip().endswith("acc_partial[row :+ BG, :] = acc  // tile<f32>[BG, D]\n}")
    partial = format_kernel(plan.partial)
    assert "var m: tile<f32>[BG] = -inf" in partial and "m_part[ctx.block.y, row :+ BG] = m" in partial
