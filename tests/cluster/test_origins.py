"""Absolute positions: `ctx.origin.<axis>` is 0 in a kernel launched on its own and the start of
the super-tile in a leaf; causal attention with @cluster equals the plain kernel; causal units are
placed longest first; every misuse of an origin is rejected at its span."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.cluster.build import compile_cluster
from compiler.cluster.sequential import run_program
from compiler.frontend.binding import bind
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.load import load_text
from compiler.interp.interpreter import run_kernel
from scheduler.planning.planner import NodeFigure, plan
from schemas.instructions import Compute
from tests.cluster.helpers import small
from tests.cluster.test_reject import expect

RNG = np.random.default_rng(17)


@pytest.mark.parametrize("br,n", [(32, 128), (64, 256), (128, 256), (32, 96)])
def test_causal_attention_clustered_equals_plain(br, n):
    kernel = small("causal_small")
    dims = {"Nq": n, "Nk": n}
    inputs = {t: RNG.standard_normal((n, 16)).astype(np.float32) for t in "QKVO"}
    plain = {t: a.copy() for t, a in inputs.items()}
    run_kernel(kernel, bind(kernel, dims), plain, {"scale": 0.25})
    program = compile_cluster(kernel, dims, cluster_values={"BR": br})
    clustered = {t: a.copy() for t, a in inputs.items()}
    run_program(program, clustered, {"scale": 0.25})
    # Each leaf runs the plain kernel's CTAs on the same rows with the same key blocks: bit for bit.
    np.testing.assert_array_equal(clustered["O"], plain["O"])
    # One leaf per super-tile origin, each launched by exactly the unit at that origin.
    assert sorted(leaf.name for leaf in program.leaves) == sorted(
        f"main@ctx.origin.x={i * br}" for i in range(n // br)
    )
    for unit in program.units:
        assert [la.leaf for la in unit.launches] == [f"main@ctx.origin.x={unit.coord[0] * br}"]


def test_a_later_super_tile_is_estimated_longer():
    program = compile_cluster(small("causal_small"), {"Nq": 256, "Nk": 256}, cluster_values={"BR": 32})
    flops = [program.leaf(u.launches[0].leaf).flops for u in program.units]
    assert flops == sorted(flops) and flops[0] < flops[-1]
    # Two leaf CTAs of 16 rows per super-tile, key blocks of 16: the first super-tile's CTAs run
    # 1 and 2 key blocks, the last one's 15 and 16, so about (15 + 16) / (1 + 2) = 10.3 times the
    # work (the loop is nearly all of it).
    assert 9.5 < flops[-1] / flops[0] < 10.5


def test_causal_units_are_placed_longest_first():
    program = compile_cluster(small("causal_small"), {"Nq": 256, "Nk": 256}, cluster_values={"BR": 32})
    uris = {t.name: f"file:///tmp/{t.name}.npy" for t in program.tensors}
    result = plan(program, [NodeFigure(0), NodeFigure(1)], uris)
    first_leaf = {}
    for node, node_plan in result.node_plans.items():
        computes = [ins for ins in node_plan.instructions if isinstance(ins, Compute)]
        first_leaf[node] = computes[0].leaf
    # 8 super-tiles on 2 nodes: the two longest (the last rows) start first, one on each node.
    assert sorted(first_leaf.values()) == ["main@ctx.origin.x=192", "main@ctx.origin.x=224"]
    assert sorted(result.placement) == list(range(8))


def test_origin_is_zero_in_a_kernel_launched_on_its_own():
    text = """@autotune(B in [16])
kernel f(c: tensor<f32>[N]) {
  let base = ctx.block.x * B
  c[base :+ B] = f32(ctx.origin.x + base + arange(B))
}
"""
    kernel = load_text(text, "f.phk").kernels[0]
    out = {"c": np.zeros(40, np.float32)}
    run_kernel(kernel, bind(kernel, {"N": 40}), out, {})
    np.testing.assert_array_equal(out["c"], np.arange(40, dtype=np.float32))


def test_unknown_ctx_field_lists_origin():
    with pytest.raises(CompileError) as info:
        load_text("kernel f(c: tensor<f32>[N]) {\n  c[:] = f32(ctx.place.x)\n}\n", "f.phk")
    assert "known: block, origin" in info.value.message


ABS = """@cluster(BR in [64, 128])
@autotune(BR in [16, 32])
kernel f(x: tensor<f32>[N], y: tensor<f32>[N], w: tensor<f32>[M]) {
  let row = ctx.block.x * BR
  y[row :+ BR] = BODY
}
"""


def _abs(body: str) -> str:
    return ABS.replace("BODY", body)


def test_absolute_position_as_a_value_is_accepted():
    text = _abs("x[row :+ BR] + f32(ctx.origin.x + row + arange(BR))")
    kernel = load_text(text, "f.phk").kernels[0]
    inputs = {"x": RNG.standard_normal(256).astype(np.float32), "y": np.zeros(256, np.float32),
              "w": np.zeros(4, np.float32)}
    plain = {t: a.copy() for t, a in inputs.items()}
    run_kernel(kernel, bind(kernel, {"N": 256, "M": 4}), plain, {})
    clustered = {t: a.copy() for t, a in inputs.items()}
    run_program(compile_cluster(kernel, {"N": 256, "M": 4}), clustered, {})
    np.testing.assert_array_equal(clustered["y"], plain["y"])
    np.testing.assert_array_equal(plain["y"], inputs["x"] + np.arange(256, dtype=np.float32))


def test_lone_origin_used_as_a_value():
    text = _abs("x[row :+ BR] + f32(ctx.origin.x)")
    expect(text, {"N": 256, "M": 4}, 5, "ctx.origin.x)", "ctx.origin.x is the start of the super-tile")


def test_origin_paired_with_the_wrong_tile():
    text = _abs("x[row :+ BR] + f32(ctx.origin.x + 2 * row)")
    expect(text, {"N": 256, "M": 4}, 5, "ctx.origin.x +", "use it only in an absolute position")


def test_origin_starting_a_slice_of_a_split_tensor():
    text = _abs("x[ctx.origin.x + row :+ BR]")
    expect(text, {"N": 256, "M": 4}, 5, "ctx.origin.x + row", "an absolute position (`ctx.origin...`) starts")


def test_loop_starting_at_the_origin():
    text = """@cluster(BR in [64, 128])
@autotune(BR in [16, 32], BC in [16])
kernel f(x: tensor<f32>[N], y: tensor<f32>[N], w: tensor<f32>[M]) {
  let row = ctx.block.x * BR
  var t: tile<f32>[BR] = 0.0
  for j in range(ctx.origin.x, M, BC) {
    t += x[row :+ BR] * 2.0
  }
  y[row :+ BR] = t
}
"""
    expect(text, {"N": 256, "M": 64}, 6, "ctx.origin.x,", "a loop inside a leaf must start at 0")


def test_causal_bound_without_the_origin_names_it():
    text = small("causal_small").source.replace("min(first + BR, Nk)", "min(row + BR, Nk)")
    text = "\n" * 5 + text  # the kernel starts at line 6 of the file
    line = text.splitlines().index(next(x for x in text.splitlines() if "min(row" in x)) + 1
    rendered = expect(text, {"Nq": 128, "Nk": 128}, line, "row + BR", "'row' is a super-tile position")
    assert "ctx.origin" in rendered


def test_causal_bound_on_a_split_dimension():
    text = small("causal_small").source.replace("min(first + BR, Nk)", "min(first + BR, Nq)")
    text = "\n" * 5 + text
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "min(first" in x)
    expect(text, {"Nq": 128, "Nk": 128}, line, "Nq)", "dimension 'Nq' is split into super-tiles")
