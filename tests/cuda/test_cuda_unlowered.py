"""The generator's gate for the tensor-core constructs it does not lower yet: each is refused
with a CompileError at its source (never a crash, never a silent f32 result), and bf16/f16
values, which it computes exactly as before, still compile (NVRTC, no GPU needed)."""

from __future__ import annotations

import dataclasses

import pytest
from cuda_cases import EXAMPLES, load_example

from compiler.cuda import autotune, compile_kernel, generate_source
from compiler.frontend import binding, walk
from compiler.frontend import load as frontend
from compiler.frontend.diagnostics import CompileError


def _refusal(name: str, dims: dict[str, int]) -> str:
    kernel = load_example(name)
    with pytest.raises(CompileError) as info:
        generate_source(kernel, binding.bind(kernel, dims))
    text = info.value.render()
    assert ".py" not in text and "Traceback" not in text, text
    return text.splitlines()[0]


def test_tf32_dot_is_refused_at_its_precision():
    first = _refusal("matmul_tf32.phk", {"M": 64, "N": 64, "K": 64})
    line = (EXAMPLES / "matmul_tf32.phk").read_text().splitlines().index(
        "    acc += dot(a, b, precision = tf32)") + 1
    assert f"matmul_tf32.phk:{line}:34: error: " in first and "TF32" in first, first


def test_kernel_level_tf32_is_refused_at_the_attribute():
    source = (EXAMPLES / "matmul.phk").read_text().replace("@aligned", "@precision(tf32)\n@aligned")
    kernel = frontend.load_text(source, "m.phk").kernel()
    with pytest.raises(CompileError, match="TF32") as info:
        generate_source(kernel, binding.bind(kernel, {"M": 256, "N": 256, "K": 256}))
    assert (info.value.span.line, info.value.span.col) == (3, 1)


def test_grid_index_axis_is_refused():
    first = _refusal("mha_bf16.phk", {"H": 2, "N": 64, "D": 64})
    assert "grid axis y tied by a grid index" in first, first


def test_narrow_cast_is_refused_at_the_call():
    source = """@autotune(B in [64])
kernel k(a: tensor<f32>[N], o: tensor<f32>[N]) {
  let i = ctx.block.x * B
  o[i :+ B] = f32(bf16(a[i :+ B]))
}
"""
    kernel = frontend.load_text(source, "cast.phk").kernel()
    with pytest.raises(CompileError, match=r"bf16\(\) cast") as info:
        generate_source(kernel, binding.bind(kernel, {"N": 100}))
    assert (info.value.span.line, info.value.span.col) == (4, 19)


def test_bf16_dot_compiles_as_before():
    kernel = load_example("matmul_bf16.phk")
    assert walk.dot_modes(kernel) == ("bf16",)
    compiled = compile_kernel(kernel, binding.bind(kernel, {"M": 256, "N": 256, "K": 256}))
    assert ".entry phobos_" in compiled.ptx


def test_autotune_cache_key_names_the_precision():
    kernel = load_example("matmul.phk")
    (dot,) = [e for e in walk.iter_body_exprs(kernel.body) if getattr(e, "func", None) == "dot"]
    as_tf32 = dataclasses.replace(dot, precision=dataclasses.replace(dot.precision, mode="tf32"))
    body = tuple(_replace_expr(s, dot, as_tf32) for s in kernel.body)
    other = dataclasses.replace(kernel, body=body)  # same source text, another precision
    assert walk.dot_modes(other) == ("tf32",)
    dims = {"M": 1, "N": 2, "K": 3}
    assert autotune.cache_key(kernel, dims, "GPU X") != autotune.cache_key(other, dims, "GPU X")


def _replace_expr(node, old, new):
    if node is old:
        return new
    if isinstance(node, tuple):
        return tuple(_replace_expr(x, old, new) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return dataclasses.replace(
            node, **{f.name: _replace_expr(getattr(node, f.name), old, new) for f in dataclasses.fields(node)}
        )
    return node
