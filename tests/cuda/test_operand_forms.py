"""Every operand form in every operand type (operand_forms.py) on the CPU: the interpreter equals
numpy at every tile point, and each schedule family's probe (mma.sync or CUDA cores, warpgroup MMA,
the TMA rings) gives CUDA C++ for sm_90 and sm_80 or prunes the point with its reason."""

from __future__ import annotations

import numpy as np
import pytest
from novel_cases import EXACT, families, inputs, rel_err
from operand_forms import DIMS, TYPES, cases, consistent, kernel_text, reference

from compiler.cuda import autotune, target
from compiler.cuda.compiled import generate_source
from compiler.frontend import binding
from compiler.frontend import load as frontend
from compiler.frontend.diagnostics import CompileError
from compiler.interp import interpreter as interp


@pytest.mark.parametrize("dtype", TYPES)
def test_every_operand_form_generates_and_interprets_as_numpy(dtype):
    rng = np.random.default_rng(7)
    for dt, form_a, form_b in cases():
        if dt != dtype:
            continue
        kernel = frontend.load_text(kernel_text(dt, form_a, form_b), f"{form_a}-{form_b}.phk").kernel()
        points = autotune.search_points(kernel)
        for point in points:
            b = binding.bind(kernel, DIMS, None, point)
            arrays = inputs(kernel, dict(b.env), rng)
            consistent(arrays)
            want = reference(arrays, dt, form_a, form_b)
            interp.run_kernel(kernel, b, arrays, {})
            assert rel_err(arrays["C"], want) <= EXACT, (form_a, form_b, point)
        for cc in (target.HOPPER, 80):
            generated = 0
            for i, fam in enumerate(families(kernel, cc)):
                point = points[i % len(points)]
                try:
                    generate_source(kernel, binding.bind(kernel, DIMS, None, point), schedule=fam[0], cc=cc)
                    generated += 1
                except CompileError as e:
                    assert "is pruned" in e.message, (form_a, form_b, fam[0].key(), e.message)
            assert generated, (form_a, form_b, cc)
