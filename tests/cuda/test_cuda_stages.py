"""Each stage of the CUDA leaf compiler (compiler/cuda/stages.py) on a kernel before it, against
what it must produce."""

from __future__ import annotations

import novel_cases
import pytest
from cuda_cases import load_example

from compiler.cuda import stages
from compiler.cuda.layout import MmaGrid, ThreadGrid
from compiler.frontend import binding, ir, ir_print
from compiler.frontend.diagnostics import CompileError


def _leaf(name, dims, point=None, **options):
    kernel = load_example(name)
    return stages.Leaf(kernel, binding.bind(kernel, dims, None, point), stages.Options(**options))


def _through(leaf, last):
    for name, stage in stages.STAGES:
        leaf = stage(leaf)
        if name == last:
            return leaf
    raise AssertionError(last)


def test_stage_list_is_the_documented_order():
    assert [n for n, _ in stages.STAGES] == [
        "bind", "fp8", "hoist", "split", "fit", "epilogue", "analyse", "lay out", "emit", "nvrtc"
    ]


def test_bind_gives_constants_and_cta_counts():
    leaf = stages.bind(
        _leaf("matmul_bf16.phk", {"M": 1000, "N": 3000, "K": 64}, {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32})
    )
    assert leaf.env["TILE_N"] == 128 and leaf.env["M"] == 1000
    assert leaf.counts == (16, 24, 1)


def test_hoist_binds_inline_dot_operands_at_the_loop_top():
    before = _through(_leaf("causal_attention.phk", {"N": 4096}), "bind")
    after = stages.hoist(before)
    loop = next(s for s in after.kernel.body if isinstance(s, ir.For))
    first = [ir_print.format_stmt(s)[0].strip() for s in loop.body[:2]]
    assert first[0].startswith("let ") and "K[j :+ BC, :]" in first[0]
    assert first[1].startswith("let ") and "V[j :+ BC, :]" in first[1]


def test_split_gives_a_let_one_copy_per_way_its_dots_stage_it():
    """A let feeding a TF32 dot and an exact one is staged one way for each (tensor cores and
    CUDA cores): the copy reads the same slice right after the original, and the exact dot
    takes it."""
    kernel = novel_cases.load("tf32_and_exact")
    before = _through(stages.Leaf(kernel, binding.bind(kernel, {"M": 128, "N": 128, "K": 64})), "hoist")
    after = stages.split(before)

    def loop_lines(leaf):
        loop = next(s for s in leaf.kernel.body if isinstance(s, ir.For))
        return [ir_print.format_stmt(s)[0].strip().split("  //")[0] for s in loop.body]

    assert loop_lines(before) == [
        "let a = A[pm * TM :+ TM, kt :+ TK]",
        "let b = B[kt :+ TK, pn * TN :+ TN]",
        "acc += dot(a, b)",
        "exact += dot(a, b, precision = f32)",
    ]
    assert loop_lines(after) == [
        "let a = A[pm * TM :+ TM, kt :+ TK]",
        "let a_f32a = A[pm * TM :+ TM, kt :+ TK]",
        "let b = B[kt :+ TK, pn * TN :+ TN]",
        "let b_f32b = B[kt :+ TK, pn * TN :+ TN]",
        "acc += dot(a, b)",
        "exact += dot(a_f32a, b_f32b, precision = f32)",
    ]
    one_way = _through(_leaf("matmul_bf16.phk", {"M": 512, "N": 512, "K": 512}), "hoist")
    assert stages.split(one_way).kernel == one_way.kernel  # one way per let: nothing to split


def test_fit_sends_16_bit_dots_the_tensor_cores_cannot_take_to_cuda_cores_and_prunes_tf32_ones():
    fits = _through(_leaf("matmul_bf16.phk", {"M": 512, "N": 512, "K": 512}), "fit")
    assert len(stages.tensor_core_dots(fits.kernel, False)) == 1
    for name, dims in (("gemv", {"N": 512, "K": 512}), ("k8", {"M": 64, "N": 64, "K": 64})):
        kernel = novel_cases.load(name)  # one row of a; an inner extent of 8
        leaf = stages.Leaf(kernel, binding.bind(kernel, dims))
        assert len(stages.tensor_core_dots(leaf.kernel, False)) == 1
        assert stages.tensor_core_dots(_through(leaf, "fit").kernel, False) == []
    with pytest.raises(CompileError, match=r"is pruned: a TF32 dot .* this one is \[32, 4\] x \[4, 32\]"):
        _through(_leaf("matmul.phk", {"M": 512, "N": 512, "K": 512}, tf32=True), "fit")


@pytest.mark.parametrize(
    "name,dims,options,tc,longest",
    [
        ("matmul_bf16.phk", {"M": 512, "N": 512, "K": 512}, {}, 1, ()),
        ("matmul.phk", {"M": 512, "N": 512, "K": 512}, {}, 0, ()),
        # a TF32 dot takes k in 8s: not the default point's TILE_K = 4 (pruned at the fit stage)
        ("matmul.phk", {"M": 512, "N": 512, "K": 512}, {"tf32": True, "point": {"TILE_K": 32}}, 1, ()),
        ("causal_attention.phk", {"N": 4096}, {"tf32": True}, 2, ("x",)),
    ],
)
def test_analyse_finds_tensor_core_dots_and_their_operands(name, dims, options, tc, longest):
    leaf = _through(_leaf(name, dims, **options), "analyse")
    assert len(leaf.plan.tc_dots) == tc
    assert leaf.plan.longest_first == longest
    if name == "matmul_bf16.phk":
        assert leaf.plan.shared == {"a": "a", "b": "b"} and leaf.plan.tc_lets == {"a", "b"}


def test_lay_out_picks_the_accumulator_layout_for_tensor_cores():
    tc = _through(
        _leaf(
            "matmul_bf16.phk", {"M": 512, "N": 512, "K": 512}, {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}
        ),
        "lay out",
    )
    assert tc.grid == MmaGrid(256, 2, 4)
    fma = _through(_leaf("matmul.phk", {"M": 512, "N": 512, "K": 512}), "lay out")
    assert isinstance(fma.grid, ThreadGrid)
    rows = _through(
        _leaf("flash_attention.phk", {"Nq": 512, "Nk": 512}, {"BR": 128, "BC": 64}, tf32=True), "lay out"
    )
    assert isinstance(rows.grid, MmaGrid) and rows.grid.warps_n == 1  # softmax rows stay in a warp


def test_emit_and_nvrtc_produce_the_tensor_core_loop():
    leaf = _through(
        _leaf(
            "matmul_bf16.phk", {"M": 512, "N": 512, "K": 512}, {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}
        ),
        "emit",
    )
    src = leaf.generated.source
    assert src.count("mma_bf16(u_acc") == 32  # a 64x64 warp tile: 4 x 8 m16n8 tiles per k step
    assert "cp_async_wait<1>();" in src  # three stages: one group may stay in flight
    leaf = stages.to_ptx(leaf)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in leaf.ptx


def test_dump_switch_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CUDA_DUMP", str(tmp_path))
    kernel = load_example("add.phk")
    stages.run(kernel, binding.bind(kernel, {"N": 1000}))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "0-bind.txt",
        "1-fp8.txt",
        "2-hoist.txt",
        "3-split.txt",
        "4-fit.txt",
        "5-epilogue.txt",
        "6-analyse.txt",
        "7-lay-out.txt",
        "8-emit.txt",
        "9-nvrtc.txt",
    ]
