"""On the GPU: the novel-kernel corpus (novel_cases.py) equals the reference interpreter at ragged
sizes, at every @autotune point under the tuner's first schedule and at the sample of every
schedule family that the PTX test compiles. Outputs are poisoned (NaN, or a sentinel for i32)
before the run so that an unwritten element fails; a point counts as run only once it compiled,
launched and matched, and every kernel must run the points that compile for this GPU."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from novel_cases import CASES, RUNS_SM90, gpu_pairs, inputs, load, rel_err, seed

from compiler.cuda import target
from compiler.cuda.compiled import compile_kernel
from compiler.frontend import binding, walk
from compiler.frontend.diagnostics import CompileError
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu


def _compiled(kernel, pairs, cc):
    """Whether each pair compiles for this GPU (NVRTC in parallel; the runs reuse the PTX)."""
    dims = CASES[kernel.name].dims

    def build(pair):
        try:
            compile_kernel(kernel, binding.bind(kernel, dims, None, pair[0]), schedule=pair[1], cc=cc)
            return True
        except CompileError as e:
            assert "is pruned" in e.message, e.message
            return False

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(build, pairs))


def _poisoned(kernel, arrays):
    out = {n: a.copy() for n, a in arrays.items()}
    for n in walk.stored_tensors(kernel):
        if n in ("C",) and "beta" in CASES[kernel.name].scalars:
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
    ran = 0
    for (point, schedule), ok in zip(pairs, fits, strict=True):
        if not ok:
            continue
        b = binding.bind(kernel, case.dims, None, point)
        arrays = inputs(kernel, dict(b.env), rng)
        want = {n: a.copy() for n, a in arrays.items()}
        interp.run_kernel(kernel, b, want, dict(case.scalars))
        got = run_kernel_gpu(kernel, b, _poisoned(kernel, arrays), dict(case.scalars), schedule=schedule)
        for out in walk.stored_tensors(kernel):
            err = rel_err(got[out], want[out])
            assert err <= case.gpu_tol, (name, point, schedule.key(), out, err)
        ran += 1
    assert ran == sum(fits) >= 1, (ran, len(pairs))
    if cc == target.HOPPER:  # what the CPU test counts (test_novel_ptx.py)
        assert ran == RUNS_SM90[name], (ran, RUNS_SM90[name])
