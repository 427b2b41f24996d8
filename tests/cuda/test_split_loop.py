"""The split-loop over CTAs on the CPU: which loops split (and why the others do not), the cost
model's factor, and the partial + combine kernels on the reference interpreter against the
one-CTA kernel on it, for every G, odd S and split factors from 1 to more chunks than SMs; the
generated kernels compile to PTX (NVRTC) and assemble without spills (ptxas)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from split_cases import DTYPES, GS, SPLITK_SOURCE, decode_inputs, decode_source, load

from compiler.cuda.mainloops.split_loop import plan as split_plan
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError
from compiler.interp import interpreter as interp

REPO = Path(__file__).resolve().parents[2]


def _reference(kernel, dims, point, arrays, scalars):
    out = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, binding.bind(kernel, dims, None, point), out, scalars)
    return out


@pytest.mark.parametrize("g", GS)
@pytest.mark.parametrize("factor", [1, 2, 3, 7, 16])
def test_split_decode_equals_the_one_cta_loop(g, factor):
    rng = np.random.default_rng(g * 100 + factor)
    kernel = load(decode_source("f32", g))
    s = 64 * 16 + 37  # odd S: the last key block is ragged
    dims, point = {"G": g, "S": s}, {"BS": 64}
    arrays, scalars = decode_inputs("f32", g, s, rng)
    want = _reference(kernel, dims, point, arrays, scalars)["O"]
    plan = split_plan.plan_split(kernel, binding.bind(kernel, dims, None, point), factor=factor)
    assert plan.used == split_loop.chunking(17, factor)[1] <= factor
    assert plan.factor == split_loop.padded(plan.used)
    got = {k: v.copy() for k, v in arrays.items()}
    split_plan.run_split_reference(plan, got, scalars)
    np.testing.assert_allclose(got["O"], want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("g", [1, 16])
@pytest.mark.parametrize("factor", [64, 132])
def test_split_decode_at_up_to_the_sm_count_equals_the_one_cta_loop(g, factor):
    """Factors up to an H100's SM count (132) on a loop of 141 key blocks, the last one ragged."""
    rng = np.random.default_rng(g + factor)
    kernel = load(decode_source("f32", g))
    s = 64 * 140 + 37
    dims, point = {"G": g, "S": s}, {"BS": 64}
    arrays, scalars = decode_inputs("f32", g, s, rng)
    want = _reference(kernel, dims, point, arrays, scalars)["O"]
    plan = split_plan.plan_split(kernel, binding.bind(kernel, dims, None, point), factor=factor)
    assert plan.used == split_loop.chunking(141, factor)[1] and plan.used > factor // 2
    got = {k: v.copy() for k, v in arrays.items()}
    split_plan.run_split_reference(plan, got, scalars)
    np.testing.assert_allclose(got["O"], want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("factor", [1, 3, 5])
def test_split_k_matmul_with_beta_equals_the_one_cta_loop(factor):
    rng = np.random.default_rng(factor)
    kernel = load(SPLITK_SOURCE)
    dims = {"M": 70, "N": 64, "K": 32 * 9 + 5}
    arrays = {
        "A": rng.standard_normal((70, dims["K"])).astype(np.float32),
        "B": rng.standard_normal((dims["K"], 64)).astype(np.float32),
        "C": rng.standard_normal((70, 64)).astype(np.float32),
    }
    scalars = {"alpha": 0.5, "beta": 2.0}
    want = _reference(kernel, dims, {}, arrays, scalars)["C"]
    plan = split_plan.plan_split(kernel, binding.bind(kernel, dims), factor=factor)
    assert plan.used == factor and plan.factor == split_loop.padded(factor) and plan.axis == "z"
    got = {k: v.copy() for k, v in arrays.items()}
    split_plan.run_split_reference(plan, got, scalars)
    np.testing.assert_allclose(got["C"], want, rtol=1e-5, atol=1e-4)


def test_cost_model_splits_only_grids_that_do_not_fill_the_gpu():
    want = split_plan.CTAS_PER_SM * 132
    assert split_plan.choose_factor(want, 132, 4096) == 1
    assert split_plan.choose_factor(4, 132, 3) == 1
    assert split_plan.choose_factor(1, 132, 64) <= 32  # no chunk under two iterations
    for ctas, iterations in ((1, 1024), (1, 1 << 16), (4, 4096), (32, 4096)):
        for fan_in in (0, 8):
            f = split_plan.choose_factor(ctas, 132, iterations, fan_in)
            assert 1 < f <= -(-want // ctas), (ctas, iterations, f)
            best = min(split_plan.split_time(ctas, want, iterations, g, fan_in)
                       for g in range(1, -(-want // ctas) + 1))
            assert split_plan.split_time(ctas, want, iterations, f, fan_in) == best
    # without a tree, longer loops pay the combine's serial merge over more chunks; the tree's
    # merge is a few steps whatever the chunks, so a loop of 2^10 iterations already fills the SMs
    assert split_plan.choose_factor(1, 132, 256, 0) < split_plan.choose_factor(1, 132, 1 << 16, 0) == want
    assert split_plan.choose_factor(1, 132, 1024, 0) < split_plan.choose_factor(1, 132, 1024, 8) == 128
    assert split_plan.merge_steps(128, 0) == 32 and split_plan.merge_steps(128, 8) == 5
    kernel = load(decode_source("bf16", 16))
    b = binding.bind(kernel, {"G": 16, "S": 1 << 20}, None, {"BS": 256})
    plan = split_plan.plan_split(kernel, b, sm_count=132)
    want = split_plan.choose_factor(1, 132, 4096)
    assert (plan.chunk_iterations, plan.used) == split_loop.chunking(4096, want)
    assert plan.factor == split_loop.padded(plan.used)


NOT_ASSOCIATIVE = """
@autotune(T in [8])
kernel scan(X: tensor<f32>[N], Y: tensor<f32>[T]) {
  var a: tile<f32>[T] = 0.0
  for i in range(0, N, T) {
    a = a * 0.5 + X[i :+ T]
  }
  Y[0 :+ T] = a
}
"""


def test_a_loop_whose_state_is_not_associative_is_not_split_and_says_why():
    kernel = load(NOT_ASSOCIATIVE)
    err = split_loop.why_not_split(kernel)
    assert err is not None and "not split over CTAs" in err.message and "associative" in err.message
    with pytest.raises(CompileError, match="not split over CTAs"):
        split_plan.plan_split(kernel, binding.bind(kernel, {"N": 64}, None, {"T": 8}), factor=2)


def _ptx(kernel, b):
    from compiler.cuda.compiled import compile_kernel

    return compile_kernel(kernel, b).ptx


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", GS)
def test_split_decode_kernels_assemble_for_sm90_without_spills(dtype, g, tmp_path):
    """Points the generator prunes (CUDA-core dots of few rows need shared memory per key) are
    never run; every (dtype, G) has a point whose partial and combine kernels assemble cleanly."""
    kernel = load(decode_source(dtype, g, "64, 128, 256"))
    assembled = 0
    for bs in (64, 128, 256):
        b = binding.bind(kernel, {"G": g, "S": (1 << 20) + 3}, None, {"BS": bs})
        plan = split_plan.plan_split(kernel, b, sm_count=132)
        assert plan.factor > 1
        try:
            ptxs = [_ptx(plan.partial, plan.partial_binding), _ptx(plan.combine, plan.combine_binding)]
        except CompileError as e:
            assert "is pruned" in e.message, e.message
            continue
        for i, ptx in enumerate(ptxs):
            path = tmp_path / f"k{bs}_{i}.ptx"
            path.write_text(ptx)
            cmd = ["ptxas", "-arch=sm_90", "-v", str(path), "-o", str(tmp_path / "k.cubin")]
            report = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
            spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
            assert spills and all(x == "0" and y == "0" for x, y in spills), (dtype, g, bs, i, report)
        assembled += 1
    assert assembled, (dtype, g)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("g", GS)
def test_every_small_row_decode_point_compiles(dtype, g):
    """Issue 33 item 1: G query rows (fewer than a tensor-core tile's) always lay out: at BS = 64
    the one-CTA kernel compiles to PTX (NVRTC) for every G and KV dtype; a larger BS may only be
    pruned for its shared memory, never for its rows."""
    kernel = load(decode_source(dtype, g, "64, 128, 256"))
    for bs in (64, 128, 256):
        b = binding.bind(kernel, {"G": g, "S": (1 << 16) + 1}, None, {"BS": bs})
        try:
            ptx = _ptx(kernel, b)
        except CompileError as e:
            assert bs > 64 and "shared memory" in e.message, (bs, e.message)
            continue
        assert ".entry phobos_decode" in ptx


def test_run_and_check_refuse_a_forced_split_at_the_loop(tmp_path):
    """`check --split N` and `run --split N` on a loop whose state is not associative: exit 2 with
    file:line:col at the loop's state and no output written; `run --split 3` on the decode kernel
    runs both generated kernels on the interpreter and equals the one-CTA run."""
    import os
    import sys

    src = tmp_path / "scan.phk"
    src.write_text(NOT_ASSOCIATIVE.lstrip("\n"))
    np.save(tmp_path / "X.npy", np.arange(64, dtype=np.float32))
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def cli(*argv):
        return subprocess.run([sys.executable, "-m", "compiler.main", *argv], capture_output=True, text=True,
                              env=env, cwd=tmp_path)

    run = ["run", str(src), "--dim", "N=64", "--tensor", "X=X.npy", "--tensor", "Y=Y.npy", "--split", "3"]
    for argv in (["check", str(src), "--split", "4"], run):
        done = cli(*argv)
        assert done.returncode == 2, done.stderr
        assert f"{src}:3:3: error: this loop is not split over CTAs" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "Y.npy").exists()
    (tmp_path / "decode.phk").write_text(decode_source("f32", 4, "64"))
    rng = np.random.default_rng(5)
    arrays, _ = decode_inputs("f32", 4, 64 * 9 + 5, rng)
    for name in ("Q", "K", "V"):
        np.save(tmp_path / f"{name}.npy", arrays[name])
    outs = []
    for split in ("1", "3"):
        flags = [f"--tensor={n}={n}.npy" for n in ("Q", "K", "V")] + [f"--tensor=O=O{split}.npy"]
        done = cli("run", "decode.phk", *flags, "--scalar", "scale=0.1", "--split", split)
        assert done.returncode == 0, done.stderr
        outs.append(np.load(tmp_path / f"O{split}.npy"))
    np.testing.assert_allclose(outs[1], outs[0], rtol=2e-5, atol=2e-6)
    assert "split over 4 CTAs" in cli("check", "decode.phk", "--split", "4").stdout


def test_the_partials_schedule_takes_the_fields_of_phobos_split_schedule(monkeypatch):
    from common import options
    from compiler.cuda.mainloops.split_loop import launch as split_launch
    from compiler.cuda.schedule import DEFAULT

    got = split_launch.partial_schedule(DEFAULT, "stages=5, threads=128,double_buffer=1")
    assert (got.stages, got.threads, got.double_buffer, got.wgmma) == (5, 128, True, False)
    assert split_launch.partial_schedule(DEFAULT, "") == DEFAULT
    monkeypatch.setenv("PHOBOS_SPLIT_SCHEDULE", "stages=4")
    assert split_launch.partial_schedule(DEFAULT).stages == 4
    for bad in ("stagez=4", "stages=four", "stages"):
        with pytest.raises(options.OptionError, match="PHOBOS_SPLIT_SCHEDULE"):
            split_launch.partial_schedule(DEFAULT, bad)


def test_a_deeper_partial_ring_is_the_partial_kernels_alone(monkeypatch):
    kernel = load(decode_source("bf16", 16, "64"))
    b = binding.bind(kernel, {"G": 16, "S": 1 << 16}, None, {"BS": 64})
    from compiler.cuda.mainloops.split_loop import launch as split_launch

    base = split_launch.compile_sequence(kernel, b, cc=90, sm_count=132, one_launch=False)  # the tree
    monkeypatch.setenv("PHOBOS_SPLIT_SCHEDULE", "stages=4")
    deep = split_launch.compile_sequence(kernel, b, cc=90, sm_count=132, one_launch=False)
    assert deep.kernels[0].shared_bytes > base.kernels[0].shared_bytes  # one more K/V stage
    assert "% 4" in deep.kernels[0].cuda_source and "% 3" in base.kernels[0].cuda_source
    assert [k.cuda_source for k in deep.kernels[1:]] == [k.cuda_source for k in base.kernels[1:]]
