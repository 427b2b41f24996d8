"""The novel-kernel corpus (novel_cases.py) through the reference interpreter, against an
independent numpy formula of each kernel, at ragged sizes and every @autotune point."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_cases import rel_err
from novel_cases import CASES, inputs, load, names, seed

from compiler.cuda.tuning import autotune
from compiler.frontend import binding, walk
from compiler.interp import interpreter as interp


def test_every_corpus_kernel_has_a_case():
    assert names() == sorted(CASES)
    assert all(load(n).name == n for n in names())  # the file names the kernel


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_equals_numpy(name):
    kernel, case = load(name), CASES[name]
    rng = np.random.default_rng(seed(name))
    for point in autotune.search_points(kernel):
        b = binding.bind(kernel, case.dims, None, point)
        arrays = inputs(kernel, dict(b.env), rng, case.ints)
        wide = {n: a.astype(np.float64) for n, a in arrays.items()}
        want = case.ref(wide, case.scalars, dict(b.env))
        assert sorted(want) == sorted(walk.stored_tensors(kernel))
        interp.run_kernel(kernel, b, arrays, dict(case.scalars))
        for out, expected in want.items():
            err = rel_err(arrays[out], expected)
            assert err <= case.tol, (name, point, out, err)
