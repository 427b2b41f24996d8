"""NVRTC compiles the kernels of the integer and bool dtypes, wide take indices and the atomics
(one tile point each: tests/cuda runs on two cores), and the CUDA text uses the types and atomic
instructions it should. The GPU agrees with the interpreter in test_ints_atomics_gpu.py."""

from __future__ import annotations

import int_cases as ic
import pytest

from compiler.cuda.compiled import compile_kernel
from compiler.frontend import binding

KERNELS = {
    "ints": (ic.INTS, {"N": 1000}, {"B": 128}),
    "convert": (ic.CONVERT, {"N": 700}, {"B": 128}),
    "gather_wide": (ic.GATHER_WIDE, {"V": 50, "D": 64, "M": 40}, {"BM": 16, "BD": 32}),
    "hist": (ic.HIST, {"N": 3000, "NB": 7}, {"B": 256}),
    "row_sums": (ic.ROW_SUMS, {"R": 70, "C": 300}, {"BR": 8, "BC": 64}),
}

EXPECTED = {  # what each kernel's CUDA must contain
    "ints": ("const long long* __restrict__ t_a", "const unsigned char* __restrict__ t_c",
             "bool* __restrict__ t_g", "long long s_s", "unsigned s_t", "floordiv_l(", "floormod_l(",
             "shl_l(", "shr_u(", "(4000000000u)"),
    "convert": ("((unsigned)(", "((long long)(", "nan_to_i64(", "x != x ? 0LL"),
    "gather_wide": ("(unsigned long long)(", "(unsigned)("),
    "hist": ("atomicAdd(&t_counts", "atomicAdd(&t_mass", "atomicMax(&t_top", "atomic_fmin(&t_low",
             "atomicAdd(&t_total"),
    "row_sums": ("atomicAdd(&t_s", "atomicAdd(reinterpret_cast<unsigned long long*>(&t_t", "atomicMax(&t_m"),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_nvrtc_compiles(name):
    text, dims, point = KERNELS[name]
    k = ic.kernel(text, name)
    compiled = compile_kernel(k, binding.bind(k, dims, None, point))
    assert compiled.entry in compiled.ptx
    for needle in EXPECTED[name]:
        assert needle in compiled.cuda_source, (name, needle)
