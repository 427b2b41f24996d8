"""The one grouped-query decode kernel of the decode benchmark and the split-loop tests,
examples/decode/gqa_decode.phk (bf16 KV), at another KV dtype and search space.

    decode_text(dtype, g, bs, cluster=None)   the kernel's source with KV in `dtype` (bf16, f16,
                                f32), BG = g, BS over `bs` (an @autotune list as written: "64, 256"
                                is the doubling range 64..256), and with `cluster` the key loop a
                                cluster loop over super-chunks of those sizes

The language has no dtype parameter, so the other dtypes are the example's checked IR rewritten
(its narrow tensors and the `bf16(p)` rounding of the softmax weights take the new dtype; f32 needs
no rounding) and printed by the IR printer, whose text parses back to that IR.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

from compiler.frontend import ir, rewrite
from compiler.frontend.ir_print import format_kernel
from compiler.frontend.load import load_file, load_text

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "decode" / "gqa_decode.phk"
WRITTEN = "bf16"  # the KV dtype the example is written in
KV_DTYPES = ("bf16", "f16", "f32")


@cache
def _example() -> ir.Kernel:
    return load_file(EXAMPLE).kernels[0]


def _retyped(kernel: ir.Kernel, dtype: str) -> ir.Kernel:
    params = tuple(dataclasses.replace(p, dtype=dtype) if isinstance(p, ir.TensorParam) and p.dtype == WRITTEN
                   else p for p in kernel.params)

    def cast(e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Call) and e.func == WRITTEN:
            return e.args[0] if dtype == "f32" else dataclasses.replace(e, func=dtype)
        return e

    return dataclasses.replace(kernel, params=params, body=rewrite.map_exprs(kernel.body, cast))


def _searched(kernel: ir.Kernel, written: dict[str, tuple[int, ...]]) -> ir.Kernel:
    def attribute(a: ir.Attribute) -> ir.Attribute:
        if not isinstance(a, ir.Autotune):
            return a
        dims = tuple(dataclasses.replace(d, written=written.get(d.name, d.written)) for d in a.dims)
        return dataclasses.replace(a, dims=dims)

    return dataclasses.replace(kernel, attributes=tuple(map(attribute, kernel.attributes)))


def _clustered(kernel: ir.Kernel, written: tuple[int, ...] | None) -> ir.Kernel:
    """With `@cluster(BS in [written])`: the key loop is a cluster loop (as in
    examples/decode_gqa.phk), each node reducing its share of S (docs/cluster.md)."""
    if written is None:
        return kernel
    span = kernel.autotune.span
    cluster = ir.Cluster((ir.SearchDim("BS", written, written, span),), span)
    return dataclasses.replace(kernel, attributes=(cluster, *kernel.attributes))


@cache
def decode_text(dtype: str, g: int, bs: str = "64, 256", cluster: tuple[int, ...] | None = None) -> str:
    """`g`: the rows a CTA takes (BG; the kernel's G is a dimension, any extent)."""
    if dtype not in KV_DTYPES:
        raise ValueError(f"KV dtype {dtype!r}: one of {', '.join(KV_DTYPES)}")
    written = {"BG": (g,), "BS": tuple(int(x) for x in bs.split(","))}
    rewritten = format_kernel(_clustered(_searched(_retyped(_example(), dtype), written), cluster))
    # checked once more, so the printer's type and search-space notes are the new kernel's
    return format_kernel(load_text(rewritten, f"<decode {dtype} G={g}>").kernels[0]) + "\n"
