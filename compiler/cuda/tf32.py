"""The generated code's one rounding of f32 to TF32: `tf32_of(float)`, in mma.PRELUDE.

The language's TF32 is round to nearest, ties to even (docs/language.md §4.1; the interpreter's
values.round_tf32_bits is the meaning). From sm_90 that is one PTX instruction,
`cvt.rn.tf32.f32`, which ptxas refuses below sm_90. Before it (sm_80, 86, 89) the only TF32
conversion is `cvt.rna` (ties away from zero), so the same rounding is done on the bits by
RNE_STEPS, an integer sequence without branches. `__CUDA_ARCH__` picks one at compile time:
the generator targets the GPU it runs on (target.py), so an A100, an RTX 3090 or an L4 gets the
integer sequence and an H200 (or a Blackwell, through compute_90) the instruction.

RNE_STEPS are (name, expression) pairs written in the subset of C that Python also reads
(hex literals, + - * & | >> <<, parentheses), over the f32 bits `u` (unsigned): the C helper
declares one `const unsigned` per step, and tests evaluate the same text on numpy uint32
arrays against the interpreter. None of the sums wraps around: a finite value plus at most
0x1000 stays below the sign bit of its own sign (the largest, 0x7f7fffff, carries into the
exponent and becomes inf, as IEEE's rounding wants), and inf and NaN get no bias at all, so
0x7fffffff cannot become inf or flip its sign; a NaN's result is then 0x7fffe000, whatever its
sign and payload, as cvt.rn.tf32.f32 and the copy engine give it on the H200.
"""

from __future__ import annotations

RNE_STEPS: tuple[tuple[str, str], ...] = (
    # 1 for inf and NaN (exponent all ones): only then does adding 2^23 reach the sign bit
    ("is_special", "((u & 0x7f800000) + 0x00800000) >> 31"),
    # 1 for a NaN: a special value with a nonzero fraction (fraction + 0x7fffff reaches 2^23)
    ("is_nan", "is_special & (((u & 0x007fffff) + 0x007fffff) >> 23)"),
    # half of the 13 dropped bits, less one unless the kept part is odd (ties go to even);
    # none for inf and NaN
    ("bias", "(0x00000fff + ((u >> 13) & 1)) * (1 - is_special)"),
    # rounded, low 13 bits cleared; a NaN becomes the one TF32 NaN, as cvt.rn and TMA give it
    ("rounded", "((u + bias) & 0xffffe000) * (1 - is_nan) + 0x7fffe000 * is_nan"),
)


def _integer_sequence() -> str:
    steps = "\n".join(f"  const unsigned {name} = {expr};" for name, expr in RNE_STEPS)
    return f"  const unsigned u = __float_as_uint(f);\n{steps}\n  return {RNE_STEPS[-1][0]};"


# The bits of the rounded f32 (low 13 bits zero), as mma.sync's and wgmma's TF32 operands take them.
PRELUDE = f"""
__device__ __forceinline__ unsigned tf32_of(float f) {{  // round to nearest, ties to even
#if __CUDA_ARCH__ >= 900
  unsigned r; asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(f)); return r;
#else
{_integer_sequence()}
#endif
}}
""".strip("\n")
