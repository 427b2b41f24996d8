"""A line buffer for generated CUDA C++ that remembers, per line, the kernel source span it came
from: NVRTC errors and ptxas reports are mapped back to the user's line with it."""

from __future__ import annotations

from common import dtypes
from compiler.frontend.source import Span


class Emitter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.spans: list[Span | None] = []
        self.depth = 1
        self.span: Span | None = None

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)
        self.spans.append(self.span)

    def open(self, text: str) -> None:
        self.line(text + " {")
        self.depth += 1

    def close(self, suffix: str = "") -> None:
        self.depth -= 1
        self.line("}" + suffix)

    def block(self, lines: list[str]) -> None:
        for t in lines:
            self.line(t)


def c_float(value: float) -> str:
    if value != value:
        return "__int_as_float(0x7fffffff)"
    if value == float("inf"):
        return "__int_as_float(0x7f800000)"
    if value == float("-inf"):
        return "__int_as_float(0xff800000)"
    text = repr(float(value))
    return f"{text}f"


FLOATS = ("f32", "bf16", "f16", "e4m3", "e5m2")  # value types held in float registers
# registers hold bf16 / f16 / fp8 values as floats (already rounded to the type)
CTYPE = {"f32": "float", "i32": "int", "bool": "bool", "bf16": "float", "f16": "float", "e4m3": "float",
         "e5m2": "float"}
# f16 / bf16 travel as their 16-bit patterns and convert with PTX cvt (see HALF_PRELUDE): the
# generated code then needs no header, not even cuda_fp16.h, which NVRTC cannot find on its own.
STORAGE_CTYPE = {n: d.cuda_storage for n, d in dtypes.TABLE.items()}  # common/dtypes.py

HALF_PRELUDE = r"""
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
  float f; asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short f32_to_f16(float f) {
  unsigned short h;
  asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float bf16_to_f32(unsigned short h) {
  return __uint_as_float(((unsigned)h) << 16);
}
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned short h;
  asm("{ .reg .b16 t; cvt.rn.bf16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
  return h;
}
""".strip("\n")


# fp8 bytes to f32 on any GPU (exact): e5m2 is the top byte of an f16; e4m3 (bias 7, no inf,
# S.1111.111 its NaN) moved into an f16's bits is its value times 2^-8. f32 to fp8 (exact for the
# values fp8 tiles hold) only where fp8 tensor cores exist (cvt ... e4m3x2, sm_89 and later).
FP8_PRELUDE = r"""
__device__ __forceinline__ float e5m2_to_f32(unsigned char b) {
  return f16_to_f32((unsigned short)(((unsigned)b) << 8));
}
__device__ __forceinline__ float e4m3_to_f32(unsigned char b) {
  if ((b & 0x7f) == 0x7f) return __int_as_float(0x7fffffff);
  return f16_to_f32((unsigned short)(((b & 0x80u) << 8) | ((b & 0x7fu) << 7))) * 256.0f;
}
""".strip("\n")
FP8_STORE_PRELUDE = r"""
__device__ __forceinline__ unsigned char f32_to_e4m3(float f) {
  unsigned short h;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %1;" : "=h"(h) : "f"(f));
  return (unsigned char)h;
}
__device__ __forceinline__ unsigned char f32_to_e5m2(float f) {
  unsigned short h;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %1;" : "=h"(h) : "f"(f));
  return (unsigned char)h;
}
""".strip("\n")


def to_f32(dtype: str, expr: str) -> str:
    if dtype in ("e4m3", "e5m2"):
        return f"{dtype}_to_f32({expr})"
    if dtype == "f16":
        return f"f16_to_f32({expr})"
    if dtype == "bf16":
        return f"bf16_to_f32({expr})"
    if dtype == "i32":
        return expr
    return expr


def from_f32(dtype: str, expr: str) -> str:
    if dtype in ("e4m3", "e5m2"):
        return f"f32_to_{dtype}({expr})"
    if dtype == "f16":
        return f"f32_to_f16({expr})"
    if dtype == "bf16":
        return f"f32_to_bf16({expr})"
    if dtype == "i32":
        return f"(int)({expr})"
    return expr
