"""Every example kernel parses and checks into a fully typed module."""

from __future__ import annotations

import pytest

from common.paths import repo_file
from compiler.frontend import ir, walk
from compiler.frontend.load import load_file

EXAMPLES = sorted(repo_file("examples").glob("*.phk"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 9


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_checks(path):
    module = load_file(path)
    assert module.kernels
    for kernel in module.kernels:
        assert kernel.source.lstrip().startswith(("@", "kernel"))
        assert kernel.source.rstrip().endswith("}")
        for expr in walk.iter_body_exprs(kernel.body):
            assert expr.ty is not None, expr
            if isinstance(expr, ir.Name):
                assert expr.kind in ("let", "var", "loop", "scalar", "dim", "tile"), expr
        for stmt in walk.iter_stmts(kernel.body):
            if isinstance(stmt, ir.VarDecl):
                assert (
                    all(isinstance(s, ir.Size) for s in stmt.declared.shape)
                    if isinstance(stmt.declared, ir.TileType)
                    else True
                )
        used = walk.block_axes_used(kernel)
        assert tuple(g.axis for g in kernel.grid) == used


EXPECTED_GRIDS = {
    "add.phk": [("x", "N", "BLOCK")],
    "axpby.phk": [("x", "M", "BM"), ("y", "N", "BN")],
    "causal_attention.phk": [("x", "N", "BR")],
    "decode_gqa.phk": [("x", "G", "BG")],
    "flash_attention.phk": [("x", "Nq", "BR")],
    "layernorm.phk": [("x", "R", "BR")],
    "matmul.phk": [("x", "M", "TILE_M"), ("y", "N", "TILE_N")],
    "matmul_plain.phk": [("x", "M", "TILE_M"), ("y", "N", "TILE_N")],
    "softmax.phk": [("x", "R", "BR")],
    "transpose.phk": [("x", "M", "T"), ("y", "N", "T")],
    "row_cumsum.phk": [("x", "R", "BR")],
    "gelu_linear.phk": [("x", "M", "TILE_M"), ("y", "N", "TILE_N")],
    "paged_decode.phk": [("x", "H", None)],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_GRIDS))
def test_example_grid(name):
    (kernel,) = load_file(repo_file("examples") / name).kernels
    assert [(g.axis, g.dim, g.tile) for g in kernel.grid] == EXPECTED_GRIDS[name]


def test_flash_attention_types():
    path = repo_file("examples/flash_attention.phk")
    kernel = load_file(path).kernel("flash_attention")
    assert kernel.autotune.dims[0].values == (64,)
    assert kernel.autotune.dims[1].values == (32, 64, 128)
    assert kernel.cluster.dims[0].values == (1024, 2048, 4096)
    # D is a tensor dimension fixed by @autotune: a "dim" when used
    let_q = kernel.body[1]
    assert let_q.value.ty == ir.TileType("f32", (ir.Size.sym("BR"), ir.Size.sym("D")))
    stores = [s for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Store)]
    assert walk.stored_tensors(kernel) == ("O",)
    assert walk.loaded_tensors(kernel) == ("Q", "K", "V")
    assert stores[0].value.ty == ir.TileType("f32", (ir.Size.sym("BR"), ir.Size.sym("D")))
