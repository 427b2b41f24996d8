"""The split loop in one launch (compiler/cuda/mainloops/split_loop/fused.py), on the CPU: its steps
(partial, each group's merge by its last CTA, the combine over the groups) on the reference
interpreter equal the one-CTA loop, for decode at every G of split_cases.GS (f32 KV, odd S) and a
split-K matmul of one CTA (the accumulator's merge); the composed kernel compiles to one PTX entry
that takes its tickets by atomics, reads the partials through the L2 and assembles without spills."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from split_cases import DTYPES, GS, SPLITK_SOURCE, decode_inputs, decode_source, load, splitk_case

from compiler.cuda.mainloops.split_loop import fused as split_fused
from compiler.cuda.mainloops.split_loop import launch as split_launch
from compiler.cuda.mainloops.split_loop import plan as split_plan
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.frontend import binding
from compiler.interp import interpreter as interp


def _reference(kernel, dims, point, arrays, scalars):
    out = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, binding.bind(kernel, dims, None, point), out, scalars)
    return out


def _fused_plan(kernel, b, factor: int, fan_in: int):
    group = split_fused.group_size(fan_in)
    plan = split_plan.plan_split(kernel, b, factor=factor, multiple=group * split_loop.UNROLL)
    return plan, split_fused.plan_fused(kernel, plan, group)


def test_the_group_size_is_the_one_of_fewest_merge_steps_after_the_last_chunk():
    assert (split_fused.choose_group(128), split_fused.merge_steps(128, 8)) == (8, 6)  # 2 + 4
    assert (split_fused.choose_group(132), split_fused.merge_steps(132, 12)) == (12, 6)  # 144 chunks
    assert split_fused.merge_steps(132, 8) == 7 and split_fused.choose_group(16) == 4


def test_the_cost_model_takes_one_launch_only_once_measured_and_where_it_saves_launches(monkeypatch):
    kernel = load(decode_source("bf16", 16, "64"))
    b = binding.bind(kernel, {"G": 16, "S": 1 << 16}, None, {"BS": 64})
    assert split_fused.ONE_LAUNCH_MEASURED  # run on an H100 (benchmarks/results/h100-2026-12-07-s3)
    monkeypatch.setattr(split_fused, "ONE_LAUNCH_MEASURED", False)
    assert not split_fused.one_launch_pays(kernel, b, 128, 8)  # never before a GPU has run it
    monkeypatch.setattr(split_fused, "ONE_LAUNCH_MEASURED", True)
    # 128 chunks: 6 steps in one launch against the tree's 5 steps and 3 launches after the partial
    assert split_fused.one_launch_pays(kernel, b, 128, 8)
    assert split_fused.one_launch_pays(kernel, b, 128, 0)  # no tree: the combine's 32 steps
    monkeypatch.setattr(split_fused, "LAUNCH_GAP_STEPS", 0.0)  # were launches free, the tree's 5 steps win
    assert not split_fused.one_launch_pays(kernel, b, 128, 8)
    splitk = load(SPLITK_SOURCE)  # a grid of 16 CTAs: the tree's
    many = binding.bind(splitk, {"M": 256, "N": 256, "K": 4096})
    assert not split_fused.one_launch_pays(splitk, many, 8, 8)


def test_chunks_are_whole_groups_and_a_multiple_of_unroll_groups():
    assert split_fused.chunks_for(128, 8) == 128  # 16 groups
    assert split_fused.chunks_for(132, 8) == 160  # 17 groups of work, 20 launched
    assert split_fused.chunks_for(5, 8) == 32 and split_fused.chunks_for(7, 3) == 16  # fan-in 3 -> 4
    assert split_fused.group_size(0) == 4


@pytest.mark.parametrize("g", GS)
@pytest.mark.parametrize(("factor", "fan_in"), [(1, 4), (7, 4), (20, 8), (64, 8), (132, 16)])
def test_one_launch_decode_equals_the_one_cta_loop(g, factor, fan_in):
    rng = np.random.default_rng(g * 1000 + factor)
    kernel = load(decode_source("f32", g))
    s = 64 * 140 + 37  # 141 key blocks, the last one ragged
    dims, point = {"G": g, "S": s}, {"BS": 64}
    arrays, scalars = decode_inputs("f32", g, s, rng)
    want = _reference(kernel, dims, point, arrays, scalars)["O"]
    plan, fused = _fused_plan(kernel, binding.bind(kernel, dims, None, point), factor, fan_in)
    assert plan.used == split_loop.chunking(141, factor)[1]
    assert plan.factor == split_fused.chunks_for(plan.used, fan_in) == fused.groups * fused.fan_in
    assert fused.groups % split_loop.UNROLL == 0
    got = {k: v.copy() for k, v in arrays.items()}
    split_fused.run_reference(plan, fused, got, scalars)
    np.testing.assert_allclose(got["O"], want, rtol=2e-5, atol=2e-6)


def test_one_launch_split_k_of_one_cta_equals_the_one_cta_loop():
    kernel, dims, arrays, scalars, want = splitk_case(64, 64, 32 * 41 + 5, seed=5)
    b = binding.bind(kernel, dims)
    assert split_fused.fits(kernel, b)
    plan, fused = _fused_plan(kernel, b, 21, 4)
    assert (plan.used, fused.groups) == (21, 8)
    got = {k: v.copy() for k, v in arrays.items()}
    split_fused.run_reference(plan, fused, got, scalars)
    np.testing.assert_allclose(got["C"], want, rtol=1e-5, atol=1e-4)


def _sequence(dtype: str, g: int, s: int, **kw):
    kernel = load(decode_source(dtype, g, "64"))
    b = binding.bind(kernel, {"G": g, "S": s}, None, {"BS": 64})
    return split_launch.compile_sequence(kernel, b, cc=90, sm_count=132, **kw)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize(("dtype", "g"), [(d, 16) for d in DTYPES] + [("bf16", 1), ("bf16", 32)])
def test_one_launch_is_one_entry_with_tickets_and_coherent_reads_of_the_partials(dtype, g, tmp_path):
    seq = _sequence(dtype, g, (1 << 16) + 37, one_launch=True)
    assert len(seq.kernels) == 1
    one = seq.kernels[0]
    assert one.entry.endswith("__split_fused") and one.grid[1] == seq.chunks
    tickets = seq.scratch[-1]
    assert tickets.zeroed and not any(s.zeroed for s in seq.scratch[:-1])
    groups = tickets.shape[0] - 1
    assert seq.chunks % groups == 0 and seq.chunks // groups in split_fused.GROUP_SIZES
    assert set(one.params) >= {s.name for s in seq.scratch}
    assert re.findall(r"^\.visible \.entry (\w+)", one.ptx, re.M) == [one.entry]
    assert len(re.findall(r"atom\.global\.add\.u32", one.ptx)) == 2  # the group's ticket, the launch's
    # the merge and the combine read what other CTAs wrote in this launch: through the L2, never
    # the read-only path (the partial's __ldg of the user's inputs, read-only all launch, stays)
    merges = one.cuda_source[one.cuda_source.index("namespace fused_merge"):]
    assert "__ldg(" not in merges and "__ldcg(" in merges and "ld.global.cg" in one.ptx
    assert one.cuda_source.count("__threadfence()") == 4
    path = tmp_path / "one.ptx"
    path.write_text(one.ptx)
    out = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(path), "-o", str(tmp_path / "one.cubin")],
                         capture_output=True, text=True, check=True).stderr
    assert " 0 bytes spill stores" in out, out


def test_one_launch_follows_phobos_split_one_launch_and_leaves_grids_of_many_ctas_to_the_tree(monkeypatch):
    from common import options

    monkeypatch.setenv("PHOBOS_SPLIT_ONE_LAUNCH", "2")
    with pytest.raises(options.OptionError, match="PHOBOS_SPLIT_ONE_LAUNCH"):
        options.current()
    monkeypatch.setenv("PHOBOS_SPLIT_ONE_LAUNCH", "1")
    assert len(_sequence("bf16", 16, 1 << 16).kernels) == 1
    kernel = load(SPLITK_SOURCE)
    b = binding.bind(kernel, {"M": 256, "N": 256, "K": 1 << 14})
    assert not split_fused.fits(kernel, b)
    assert len(split_launch.compile_sequence(kernel, b, cc=90, sm_count=132).kernels) >= 2
    monkeypatch.setenv("PHOBOS_SPLIT_ONE_LAUNCH", "0")
    assert len(_sequence("bf16", 16, 1 << 16).kernels) == 4  # partial, two tree levels, combine


def test_the_factor_is_the_cost_models_for_the_merge_tree_the_sequence_is_given():
    """fan_in=0 (no tree: a serial combine) is modelled as such: at S = 2^16 the model takes 79
    chunks (80 padded) without the tree and 128 with a fan-in of 8; the factor was once chosen for
    PHOBOS_SPLIT_FAN_IN whatever fan_in the caller passed."""
    assert _sequence("bf16", 16, 1 << 16, fan_in=0, one_launch=False).chunks == 80
    assert _sequence("bf16", 16, 1 << 16, fan_in=8, one_launch=False).chunks == 128
