"""fp8 dots through the CUDA leaf compiler, with no GPU (real NVRTC and ptxas): on sm_90a the
example's k loop is fp8 warpgroup MMA (wgmma ... k32 .e4m3 / .e5m2) without spills; for sm_80 it
still compiles (operands converted to f16) and says so once; the fp8 operand layout is the one
the wgmma descriptor reads (the PTX ISA's 128-byte-swizzled K-major rule, written apart in
cuda_cases.descriptor_reads); the scales leave the k loop."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cuda_cases import descriptor_reads, ptxas

from compiler.cuda import fp8 as fp8_stage
from compiler.cuda import stages
from compiler.cuda.schedule import Schedule
from compiler.cuda.wgmma import CoreTile
from compiler.frontend import binding, ir
from compiler.frontend.load import load_text

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "matmul_fp8.phk"
WGMMA = Schedule(stages=4, order="grouped", wgmma=True)
DIMS = {"M": 4096, "N": 4096, "K": 4096}
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")


def _kernel(fmt: str = "e4m3"):
    return load_text(EXAMPLE.read_text().replace("e4m3", fmt), "matmul_fp8.phk").kernels[0]


def _leaf(kernel, tiles, schedule, cc, until="nvrtc"):
    b = binding.bind(kernel, DIMS, None, tiles)
    return stages.run(kernel, b, stages.Options(False, schedule, cc), until)


@needs_ptxas
@pytest.mark.parametrize(("fmt", "tiles"), [("e4m3", {"TILE_M": 128, "TILE_N": 256}),
                                            ("e5m2", {"TILE_M": 128, "TILE_N": 128})])
def test_sm90a_runs_the_k_loop_on_fp8_warpgroup_mma(fmt, tiles, tmp_path):
    leaf = _leaf(_kernel(fmt), tiles, WGMMA, 90)
    n = tiles["TILE_N"]
    assert f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{fmt}.{fmt}" in leaf.ptx
    assert ".target sm_90a" in leaf.ptx
    assert leaf.ptx.count("wgmma.mma_async") == 128 // 32  # one k tile: 4 steps of k = 32
    report = ptxas(leaf.ptx, "sm_90a", tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report


@needs_ptxas
def test_sm80_converts_to_f16_and_says_so_once(tmp_path, capsys):
    fp8_stage._NOTED.clear()
    kernel = _kernel()
    leaf = _leaf(kernel, None, Schedule(), 80)
    assert "wgmma" not in leaf.ptx and "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in leaf.ptx
    _leaf(kernel, {"TILE_M": 128, "TILE_N": 128}, Schedule(), 80)  # a second point: no second note
    err = capsys.readouterr().err
    assert err.count("note: kernel 'matmul_fp8': compute capability 8.0 has no fp8 warpgroup MMA") == 1, err
    report = ptxas(leaf.ptx, "sm_80", tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report


def test_hopper_without_a_wgmma_schedule_converts_silently(capsys):
    fp8_stage._NOTED.clear()
    leaf = _leaf(_kernel(), None, Schedule(), 90, until="emit")
    assert "e4m3_to_f32" in leaf.generated.source and "wgmma" not in leaf.generated.source
    assert capsys.readouterr().err == ""


def test_the_fp8_operand_layout_is_what_the_descriptor_reads():
    """K-major, 128 fp8 values (128 bytes) a row, 128-byte swizzle: CoreTile.offset of element
    (x, k) equals the address wgmma reads it from, for every element of a 128-row tile."""
    for role, x_extent in (("a", 128), ("b", 256)):
        tile = CoreTile("", role, 128, x_extent, "e4m3")
        assert tile.swizzled and tile.mma_k == 32 and tile.elem_bytes == 1 and tile.sbo == 1024
        for x in range(x_extent):
            for k in range(128):
                off = eval(tile.offset(str(x), str(k)).replace("/", "//"))
                assert off == descriptor_reads(tile, 0, x, k), (role, x, k)


def test_the_scales_leave_the_k_loop():
    """acc += dot(a, b, scales) with acc zeroed before the loop: the loop keeps the plain dot and
    one acc *= expand(sa) * expand(sb) follows it; the scale lets are read there, not held."""
    kernel = _kernel()
    lowered = fp8_stage.lower_scales(kernel)
    loop = next(i for i, s in enumerate(lowered.body) if isinstance(s, ir.For))
    inner = [e for s in lowered.body[loop].body for e in _exprs(s)
             if isinstance(e, ir.Call) and e.func == "dot"]
    assert len(inner) == 1 and inner[0].kwargs == ()
    after = lowered.body[loop + 1]
    assert isinstance(after, ir.Assign) and after.op == "*=" and after.name == "acc"
    assert not any(isinstance(s, ir.Let) and s.name in ("sa", "sb") for s in lowered.body)


def test_a_scaled_dot_outside_the_gemm_form_is_scaled_where_it_stands():
    text = EXAMPLE.read_text().replace("var acc: tile<f32>[TILE_M, TILE_N] = 0.0",
                                       "var acc: tile<f32>[TILE_M, TILE_N] = 1.0")
    lowered = fp8_stage.lower_scales(load_text(text, "m.phk").kernels[0])
    loop = next(s for s in lowered.body if isinstance(s, ir.For))
    (assign,) = [s for s in loop.body if isinstance(s, ir.Assign)]
    assert isinstance(assign.value, ir.BinOp) and assign.value.op == "*"
    assert assign.value.lhs.func == "dot" and assign.value.lhs.kwargs == ()


def _exprs(s):
    from compiler.frontend import walk

    return walk.iter_exprs(s)
