"""On the GPU: the novel-kernel corpus (novel_cases.py) equals the reference interpreter at ragged
sizes, at every @autotune point under the tuner's first schedule and at the sample of every
schedule family that the PTX test compiles. Outputs are poisoned (NaN, or a sentinel for i32)
before the run so that an unwritten element fails; every point that compiles for this GPU runs
and must match, and on sm_90 their number is the one the CPU test counts (RUNS_SM90)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from cuda_cases import rel_err
from novel_cases import CASES, EXACT, RUNS_SM90, families, gpu_pairs, inputs, load, seed
from operand_forms import DIMS, TYPES, cases, consistent, kernel_text, probe_pairs

from compiler.cuda import target
from compiler.cuda.compiled import compile_kernel
from compiler.frontend import binding, walk
from compiler.frontend import load as frontend
from compiler.frontend.diagnostics import CompileError
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu


def _compiled(kernel, pairs, cc, dims=None):
    """Whether each pair compiles for this GPU (NVRTC in parallel; the runs reuse the PTX)."""
    dims = dims or CASES[kernel.name].dims

    def build(pair):
        try:
            compile_kernel(kernel, binding.bind(kernel, dims, None, pair[0]), schedule=pair[1], cc=cc)
            return True
        except CompileError as e:
            assert "is pruned" in e.message, e.message
            return False

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(build, pairs))


def _poisoned(kernel, arrays, scalars):
    out = {n: a.copy() for n, a in arrays.items()}
    for n in walk.stored_tensors(kernel):
        if n == "C" and "beta" in scalars:
            continue  # C is read (beta * C)
        out[n][...] = -(2**30) if out[n].dtype == np.int32 else np.nan
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_on_the_gpu_equals_interpreter(name):
    from compiler.cuda.launch import run_kernel_gpu

    kernel, case = load(name), CASES[name]
    cc = target.device_capability()
    pairs = gpu_pairs(kernel, cc)
    fits = _compiled(kernel, pairs, cc)
    rng = np.random.default_rng(seed(name) + 1)
    for (point, schedule), ok in zip(pairs, fits, strict=True):
        if not ok:
            continue
        b = binding.bind(kernel, case.dims, None, point)
        arrays = inputs(kernel, dict(b.env), rng, case.ints)
        want = {n: a.copy() for n, a in arrays.items()}
        interp.run_kernel(kernel, b, want, dict(case.scalars))
        poisoned = _poisoned(kernel, arrays, case.scalars)
        got = run_kernel_gpu(kernel, b, poisoned, dict(case.scalars), schedule=schedule)
        for out in walk.stored_tensors(kernel):
            err = rel_err(got[out], want[out])
            assert err <= case.gpu_tol, (name, point, schedule.key(), out, err)
    assert sum(fits) >= 1, len(pairs)
    if cc == target.HOPPER:  # what the CPU test counts (test_novel_ptx.py)
        assert sum(fits) == RUNS_SM90[name], (sum(fits), RUNS_SM90[name])


@pytest.mark.parametrize("dtype", TYPES)
def test_every_operand_form_on_the_gpu_equals_interpreter(dtype):
    """operand_forms.py: each of the 36 pairs of forms under the probe of every schedule family
    this GPU runs, at the first tile point (in turn) that the probe takes (probe_pairs; the CPU
    test checks which families it leaves out)."""
    from compiler.cuda.launch import run_kernel_gpu

    cc = target.device_capability()
    rng = np.random.default_rng(11)
    for turn, (dt, form_a, form_b) in enumerate(x for x in cases() if x[0] == dtype):
        kernel = frontend.load_text(kernel_text(dt, form_a, form_b), f"{form_a}-{form_b}.phk").kernel()
        pairs = probe_pairs(kernel, turn, cc)
        assert pairs[0][1] == families(kernel, cc)[0][0], (form_a, form_b)  # mma.sync or CUDA cores
        assert all(_compiled(kernel, pairs, cc, DIMS)), (form_a, form_b)
        for point, schedule in pairs:
            b = binding.bind(kernel, DIMS, None, point)
            arrays = inputs(kernel, dict(b.env), rng)
            consistent(arrays)
            want = {n: a.copy() for n, a in arrays.items()}
            interp.run_kernel(kernel, b, want, {})
            got = run_kernel_gpu(kernel, b, _poisoned(kernel, arrays, {}), {}, schedule=schedule)
            err = rel_err(got["C"], want["C"])
            assert err <= EXACT, (form_a, form_b, point, schedule.key(), err)
