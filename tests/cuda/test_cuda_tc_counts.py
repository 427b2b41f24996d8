"""On the CPU: the counts that test_cuda_tc_gpu.py (and test_causal_order_gpu.py) asserts (how
many of its points run, which are pruned: "N = 317 is pruned", "18 of 22", "6 on four
warpgroups, 2 on mma.sync", "each shape runs a point") hold. Its tests that go through `_check`
run here as written, with `_check` replaced by the CUDA C++ generator's verdict (a point runs on
the GPU exactly when it is not pruned; the numbers compared there are not checked here, only
which points run)."""

from __future__ import annotations

import pytest
import test_causal_order_gpu as causal_gpu
import test_cuda_tc_gpu as gpu

from compiler.cuda.compiled import generate_source
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError

COUNTED = [  # the GPU tests whose every run goes through _check
    gpu.test_matmul_on_tensor_cores_equals_interpreter,
    gpu.test_warpgroup_mma_operand_layouts_equal_interpreter,
    gpu.test_tma_ring_equals_interpreter,
    gpu.test_attention_on_tensor_cores_equals_interpreter,
    gpu.test_attention_at_256_rows_equals_interpreter,
    gpu.test_tma_attention_equals_interpreter,
    gpu.test_tf32_examples_in_source_equal_interpreter,
    gpu.test_tf32_tma_ring_equals_interpreter,
    causal_gpu.test_causal_gqa_equals_interpreter_in_both_orders,
]


def _calls(test) -> list[dict]:
    """The keyword arguments of each case of `test`, from its parametrize marks."""
    calls = [{}]
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = [n.strip() for n in mark.args[0].split(",")]
        rows = [row if len(names) > 1 else (row,) for row in mark.args[1]]
        calls = [{**c, **dict(zip(names, row, strict=True))} for c in calls for row in rows]
    return calls


def _generates(kernel, dims, point, schedule, tol, rng, scalars_override=None) -> bool:
    try:
        generate_source(kernel, binding.bind(kernel, dims, None, point), schedule=schedule)
    except CompileError as e:
        assert "is pruned" in e.message, e.message
        return False
    return True


CASES = [(t, kwargs) for t in COUNTED for kwargs in _calls(t)]


@pytest.mark.parametrize("test,kwargs", CASES, ids=[f"{t.__name__}-{i}" for i, (t, _) in enumerate(CASES)])
def test_the_gpu_tests_counts_hold_on_the_cpu(test, kwargs, monkeypatch):
    monkeypatch.setattr(gpu, "_check", _generates)
    test(**kwargs)
