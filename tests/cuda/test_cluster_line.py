"""An @cluster kernel compiles on one GPU exactly as it does without the line: the generated CUDA
C++ of every example with @cluster equals that of the same file with the line blanked out."""

from __future__ import annotations

import re

import pytest

from common.paths import repo_file
from compiler.cuda.compiled import generate_source
from compiler.frontend.binding import bind, kernel_dims
from compiler.frontend.load import load_text

ROOT = repo_file("examples").parent
EXAMPLES = sorted(
    str(p.relative_to(ROOT))
    for p in (*ROOT.glob("examples/*.phk"), *ROOT.glob("examples/jobs/*.phk"))
    if "@cluster" in p.read_text()
)

# A single-valued @autotune name that is also an @cluster name: the checker once stopped
# substituting it, so `tile<f32>[64]` and `a[base :+ BLOCK]` no longer had the same shape.
FIXED_TILE = """@cluster(BLOCK in [1024, 4096])
@autotune(BLOCK in [64])
kernel copy(a: tensor<f32>[N], c: tensor<f32>[N]) {
  let base = ctx.block.x * BLOCK
  var t: tile<f32>[64] = a[base :+ BLOCK]
  c[base :+ BLOCK] = t
}
"""


def without_cluster_line(text: str, filename: str) -> str:
    """The same file with the @cluster attribute blanked (spaces; line numbers kept)."""
    kernels = load_text(text, filename).kernels
    lines = text.split("\n")
    for kernel in kernels:
        span = kernel.cluster.span if kernel.cluster else None
        if span is None:
            continue
        for line in range(span.line, span.end_line + 1):
            row = lines[line - 1]
            start = span.col - 1 if line == span.line else 0
            end = span.end_col - 1 if line == span.end_line else len(row)
            lines[line - 1] = row[:start] + " " * (end - start) + row[end:]
    return "\n".join(lines)


def cuda_sources(text: str, filename: str) -> list[str]:
    out = []
    for kernel in load_text(text, filename).kernels:
        fixed = {d.name: d.values[0] for d in kernel.autotune.dims} if kernel.autotune else {}
        dims = {d: fixed.get(d, 512) for d in kernel_dims(kernel)}
        out.append(generate_source(kernel, bind(kernel, dims)).source)
    return out


@pytest.mark.parametrize("example", [*EXAMPLES, "fixed_tile"])
def test_generated_cuda_is_the_same_with_and_without_the_cluster_line(example):
    text = FIXED_TILE if example == "fixed_tile" else repo_file(example).read_text()
    plain = without_cluster_line(text, example + " (no @cluster)")
    assert re.search(r"^\s*@cluster\b", plain, re.M) is None  # comments may still mention it
    assert cuda_sources(text, example) == cuda_sources(plain, example + " (no @cluster)")


def test_every_cluster_example_is_compared():
    assert len(EXAMPLES) >= 9 and "examples/matmul.phk" in EXAMPLES and "examples/jobs/add.phk" in EXAMPLES
