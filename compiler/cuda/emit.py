"""A line buffer for generated CUDA C++ that remembers, per line, the kernel source span it came
from: NVRTC errors and ptxas reports are mapped back to the user's line with it."""

from __future__ import annotations

from compiler.source import Span


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


CTYPE = {"f32": "float", "i32": "int", "bool": "bool"}
STORAGE_CTYPE = {"f32": "float", "i32": "int", "f16": "__half", "bf16": "__nv_bfloat16"}


def to_f32(dtype: str, expr: str) -> str:
    if dtype == "f16":
        return f"__half2float({expr})"
    if dtype == "bf16":
        return f"__bfloat162float({expr})"
    if dtype == "i32":
        return expr
    return expr


def from_f32(dtype: str, expr: str) -> str:
    if dtype == "f16":
        return f"__float2half_rn({expr})"
    if dtype == "bf16":
        return f"__float2bfloat16_rn({expr})"
    if dtype == "i32":
        return f"(int)({expr})"
    return expr
