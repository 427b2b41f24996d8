"""Every operand form in every operand type (operand_forms.py) on the CPU: the interpreter equals
numpy at every tile point, and each schedule family's probe (mma.sync or CUDA cores, warpgroup MMA,
the TMA rings) gives CUDA C++ for sm_90 and sm_80 at some point, which the GPU test runs, but for
the families operand_forms.dropped_sm90 names."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_cases import rel_err
from novel_cases import EXACT, families, inputs
from operand_forms import DIMS, TYPES, cases, consistent, dropped_sm90, kernel_text, probe_pairs, reference

from compiler.cuda import target
from compiler.cuda.tuning import autotune
from compiler.frontend import binding
from compiler.frontend import load as frontend
from compiler.interp import interpreter as interp


@pytest.mark.parametrize("dtype", TYPES)
def test_every_operand_form_generates_and_interprets_as_numpy(dtype):
    rng = np.random.default_rng(7)
    for turn, (dt, form_a, form_b) in enumerate(x for x in cases() if x[0] == dtype):
        kernel = frontend.load_text(kernel_text(dt, form_a, form_b), f"{form_a}-{form_b}.phk").kernel()
        points = autotune.search_points(kernel)
        for point in points:
            b = binding.bind(kernel, DIMS, None, point)
            arrays = inputs(kernel, dict(b.env), rng)
            consistent(arrays)
            want = reference(arrays, dt, form_a, form_b)
            interp.run_kernel(kernel, b, arrays, {})
            assert rel_err(arrays["C"], want) <= EXACT, (form_a, form_b, point)
        for cc in (target.HOPPER, 80):  # the pairs the GPU test runs, and those it leaves out
            pairs = probe_pairs(kernel, turn, cc)
            dropped = dropped_sm90(dt, form_a, form_b) if cc == target.HOPPER else 0
            assert len(pairs) == len(families(kernel, cc)) - dropped, (form_a, form_b, cc, pairs)
            assert pairs[0][1] == families(kernel, cc)[0][0], (form_a, form_b, cc)  # mma.sync or CUDA cores
