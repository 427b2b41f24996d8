"""The generated code rounds TF32 operands to nearest even (docs/language.md §4.1) on every target:
the same CUDA source compiled for sm_90 holds `cvt.rn.tf32.f32` and, for sm_80, where ptxas refuses
that instruction, the integer sequence of compiler/cuda/tf32.py (its arithmetic is checked against
the interpreter in tests/compiler/test_tf32_rounding.py); never `cvt.rna` (ties away from zero).
Both assemble with ptxas, as the tensor-core variants do for sm_90 in test_cuda_tensor_cores.py.
"""

from __future__ import annotations

import shutil

import pytest
from cuda_cases import load_example, ptxas

from compiler.cuda import nvrtc, target
from compiler.cuda.compiled import generate_source
from compiler.cuda.schedule import Schedule
from compiler.frontend import binding

# (example, dims, tile point, kernel-wide TF32, schedule): the dot-level opt-in on mma.sync
# (operand A by ldmatrix then tf32_of, B by scalar loads) and on warpgroup MMA (registers), the
# kernel-wide opt-in, and attention's two TF32 dots (P from registers).
CASES = [
    ("matmul_tf32.phk", {"M": 300, "N": 260, "K": 200}, {"TILE_M": 64, "TILE_N": 64, "TILE_K": 16}, False,
     Schedule()),
    ("matmul_tf32.phk", {"M": 300, "N": 260, "K": 192}, {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, False,
     Schedule(wgmma=True)),
    ("matmul.phk", {"M": 256, "N": 256, "K": 256}, {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, True,
     Schedule()),
    ("mha_tf32.phk", {"H": 2, "N": 300, "D": 64}, {"BR": 64, "BC": 32}, False, Schedule()),
]
# RNE_STEPS's constants as immediates: the bias 0xfff (half of the dropped bits less one: ties to
# even; ties away would add 0x1000, truncation nothing), the mask 0xffffe000 that clears the
# dropped bits, and the one TF32 NaN 0x7fffe000
INTEGER_SEQUENCE_MARKS = (", 4095;", ", -8192;", ", 2147475456;")


def _source(name, dims, point, tf32, schedule):
    kernel = load_example(name)
    dims = {k: v for k, v in dims.items() if k in binding.kernel_dims(kernel)}
    return generate_source(kernel, binding.bind(kernel, dims, None, point), tf32=tf32, schedule=schedule)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'wgmma' if c[4].wgmma else 'mma'}")
def test_tf32_rounding_is_cvt_rn_from_sm90_and_integers_before(case, tmp_path):
    gen = _source(*case)
    assert "tf32_of(" in gen.source and "cvt.rna" not in gen.source
    arch = target.ptx_arch(gen.need, target.HOPPER)
    sm90 = nvrtc.compile_to_ptx(gen.source, arch=arch)
    assert "cvt.rn.tf32.f32" in sm90 and "cvt.rna" not in sm90
    targets = [(sm90, "sm_90a" if arch == "compute_90a" else "sm_90")]
    if not case[4].wgmma:  # warpgroup MMA exists from sm_90 only; mma.sync from sm_80
        sm80 = nvrtc.compile_to_ptx(gen.source, arch="compute_80")
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in sm80
        assert "cvt.rn.tf32" not in sm80 and "cvt.rna" not in sm80  # ptxas refuses the one below sm_90
        assert all(mark in sm80 for mark in INTEGER_SEQUENCE_MARKS)
        targets.append((sm80, "sm_80"))
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas is not installed: compiled by NVRTC only")
    for ptx, sm in targets:
        report = ptxas(ptx, sm, tmp_path)
        assert "0 bytes spill stores, 0 bytes spill loads" in report, (sm, report)
