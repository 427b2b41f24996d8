"""The split-loop's merge tree (compiler/cuda/mainloops/split_loop/tree.py) on the CPU: its level sizes, the
partial + merge levels + combine on the reference interpreter against the one-CTA kernel (decode's
online softmax and split-K's linear accumulator, odd shapes, identity-padded groups), and the
merge kernels compile to PTX that assembles for sm_90 without spills."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from split_cases import decode_inputs, decode_source, load, splitk_case

from compiler.cuda import compiled
from compiler.cuda.mainloops.split_loop import launch as split_launch
from compiler.cuda.mainloops.split_loop import plan as split_plan
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.cuda.mainloops.split_loop import tree as split_tree
from compiler.frontend import binding
from compiler.interp import interpreter as interp


@pytest.mark.parametrize(("n", "fan_in", "sizes"), [
    (256, 8, [256, 32, 4]), (256, 16, [256, 16, 4]), (256, 4, [256, 64, 16, 4, 4]),
    (8, 8, [8]), (24, 8, [24]), (28, 8, [28, 4, 4]), (80, 0, [80]), (264, 6, [264, 36, 8]),
])
def test_tree_levels_end_with_few_partials_in_set_a(n, fan_in, sizes):
    got = split_tree.tree_sizes(n, fan_in)
    assert got == sizes
    assert (len(got) - 1) % 2 == 0 and all(s % split_loop.UNROLL == 0 for s in got)


def _reference(kernel, dims, point, arrays, scalars):
    out = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, binding.bind(kernel, dims, None, point), out, scalars)
    return out


@pytest.mark.parametrize("g", [1, 8, 16])
@pytest.mark.parametrize(("factor", "fan_in"), [(16, 4), (40, 8), (61, 8), (71, 16)])
def test_tree_merged_decode_equals_the_one_cta_loop(g, factor, fan_in):
    rng = np.random.default_rng(g * 100 + factor)
    kernel = load(decode_source("f32", g))
    s = 64 * 70 + 37  # odd S: the last key block is ragged
    dims, point = {"G": g, "S": s}, {"BS": 64}
    arrays, scalars = decode_inputs("f32", g, s, rng)
    want = _reference(kernel, dims, point, arrays, scalars)["O"]
    plan = split_plan.plan_split(kernel, binding.bind(kernel, dims, None, point), factor=factor)
    tree = split_tree.plan_tree(kernel, plan, fan_in)
    assert len(tree.merges) >= 2 and tree.combine_binding.dims["NSPLIT"] == tree.sizes[-1] <= fan_in
    got = {k: v.copy() for k, v in arrays.items()}
    split_tree.run_reference(plan, tree, got, scalars)
    np.testing.assert_allclose(got["O"], want, rtol=2e-5, atol=2e-6)


def test_tree_merged_split_k_equals_the_one_cta_loop():
    kernel, dims, arrays, scalars, want = splitk_case(64, 96, 32 * 30 + 5, seed=5)
    plan = split_plan.plan_split(kernel, binding.bind(kernel, dims), factor=29)
    tree = split_tree.plan_tree(kernel, plan, 4)
    assert tree.sizes == (16, 4, 4)  # 31 iterations in 16 chunks of 2
    got = {k: v.copy() for k, v in arrays.items()}
    split_tree.run_reference(plan, tree, got, scalars)
    np.testing.assert_allclose(got["C"], want, rtol=1e-5, atol=1e-4)


def test_the_launch_sequence_has_the_tree_and_its_scratch(monkeypatch):
    kernel = load(decode_source("bf16", 16, "64"))
    b = binding.bind(kernel, {"G": 16, "S": 1 << 20}, None, {"BS": 64})
    # the tree's form (the cost model takes the one launch for this leaf: test_split_fused.py)
    flat = split_launch.compile_sequence(kernel, b, split=256, cc=90, fan_in=0, one_launch=False)
    assert [k.entry.split("__split_")[1] for k in flat.kernels] == ["partial", "combine"]
    monkeypatch.setenv("PHOBOS_SPLIT_FAN_IN", "8")
    seq = split_launch.compile_sequence(kernel, b, split=256, cc=90, one_launch=False)
    assert [k.entry.split("__split_")[1] for k in seq.kernels] == ["partial", "merge0", "merge1", "combine"]
    assert [k.grid for k in seq.kernels[1:3]] == [(1, 32, 4), (1, 4, 4)]  # [16, 32] tiles
    assert {s.name: s.shape for s in seq.scratch}["acc_part_tree"] == (32, 16, 128)
    assert "c_NSPLIT = 4;" in seq.kernels[-1].cuda_source
    assert seq.kernels[0].ptx == flat.kernels[0].ptx  # the partial does not change


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize(("g", "dtype"), [(1, "bf16"), (16, "bf16"), (32, "f32")])
def test_merge_kernels_assemble_for_sm90_without_spills(g, dtype, tmp_path):
    kernel = load(decode_source(dtype, g, "64"))
    b = binding.bind(kernel, {"G": g, "S": (1 << 20) + 3}, None, {"BS": 64})
    seq = split_launch.compile_sequence(kernel, b, split=264, cc=90, fan_in=8, one_launch=False)
    assert len(seq.kernels) == 4
    path = tmp_path / "module.ptx"
    path.write_text(compiled.module_ptx(seq.kernels, 90))
    cmd = ["ptxas", "-arch=sm_90", "-v", str(path), "-o", str(tmp_path / "k.cubin")]
    report = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert len(spills) == 4 and all(x == "0" and y == "0" for x, y in spills), report


COLSUM = """
@autotune(BN in [64], BK in [32])
kernel colsum(A: tensor<f32>[K, N], C: tensor<f32>[N]) {
  let c = ctx.block.x * BN
  var acc: tile<f32>[BN] = 0.0
  for k in range(0, K, BK) {
    acc += sum(A[k :+ BK, c :+ BN], axis = 0)
  }
  C[c :+ BN] = acc
}
"""


def test_a_rank_one_accumulator_merges_over_its_one_row():
    kernel = load(COLSUM)
    dims = {"K": 32 * 50 + 3, "N": 128}
    rng = np.random.default_rng(0)
    arrays = {"A": rng.standard_normal((dims["K"], 128)).astype(np.float32), "C": np.zeros(128, np.float32)}
    want = _reference(kernel, dims, {}, arrays, {})["C"]
    plan = split_plan.plan_split(kernel, binding.bind(kernel, dims), factor=40)
    tree = split_tree.plan_tree(kernel, plan, 4)
    assert tree.sizes == (28, 8, 4)
    got = {k: v.copy() for k, v in arrays.items()}
    split_tree.run_reference(plan, tree, got, {})
    np.testing.assert_allclose(got["C"], want, rtol=1e-5, atol=1e-4)
    seq = split_launch.compile_sequence(kernel, binding.bind(kernel, dims), split=40, cc=90, fan_in=4)
    assert [k.grid for k in seq.kernels] == [(2, 28, 1), (1, 8, 1), (1, 4, 1), (2, 1, 1)]  # [1, 128]
