"""fp8 dots through the CUDA leaf compiler, with no GPU (real NVRTC and ptxas): on sm_90a the
example's k loop is fp8 warpgroup MMA (wgmma ... k32 .e4m3 / .e5m2) without spills; for sm_80 it
still compiles (operands converted to f16) and says so once; the fp8 operand layout is the one
the wgmma descriptor reads (the PTX ISA's 128-byte-swizzled K-major rule, written apart in
cuda_cases.descriptor_reads); the scales leave the k loop; every k tile's wgmma chain starts
from zero and is added into the f32 accumulator (mainloops/wgmma/fp8_promote.py), at every fp8 point of the
tuner's space, without spills."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
from cuda_cases import descriptor_reads, ptxas
from fp8_cases import per_tensor_text

from compiler.cuda import fp8 as fp8_stage
from compiler.cuda import stages
from compiler.cuda.mainloops.wgmma import fp8_promote
from compiler.cuda.mainloops.wgmma.mma import CoreTile
from compiler.cuda.schedule import Schedule
from compiler.frontend import binding, ir
from compiler.frontend.diagnostics import CompileError
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


# every fp8 point the tuner and benchmarks/fp8_bench.py measure: the example's four tile points
# on each warpgroup-MMA schedule that keeps fp8 (cp.async rings of 3-6 stages, both CTA orders,
# early or late copies; the TMA warp-specialized ring)
FP8_SCHEDULES = [Schedule(None, s, order, wgmma=True, late_copies=late)
                 for s in (3, 4, 5, 6) for order in ("row", "grouped") for late in (False, True)]
FP8_SCHEDULES += [Schedule(None, s, order, wgmma=True, tma=True)
                  for s in (4, 6) for order in ("row", "grouped")]
FP8_SCHEDULES += [dataclasses.replace(s, fp8_overlap=True) for s in FP8_SCHEDULES]
TILE_POINTS = [{"TILE_M": m, "TILE_N": n} for m in (64, 128) for n in (128, 256)]


def _promoted_chains(ptx: str, n: int, warps: int, overlap: bool = False) -> None:
    """Every k tile's wgmma chain starts from zero (scale-d 0 on its first k step) into a
    temporary, in pieces of fp8_promote.pieces (fp8_overlap: of OVERLAP_N, each waited for with
    the next in flight, wait_group 1), each waited for before its add: no chain continues the
    accumulator."""
    if overlap:
        parts = [(f, fp8_promote.OVERLAP_N) for f in range(0, n, fp8_promote.OVERLAP_N)]
        assert ptx.count("wgmma.wait_group.sync.aligned 1;") >= len(parts) - 1
    else:
        parts = fp8_promote.pieces(n, warps // 4)
    width = parts[0][1]
    issued = re.findall(r"setp\.ne\.b32 p, ([01]), 0; wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32", ptx)
    assert issued == [("0" if s == 0 else "1", str(width)) for _ in parts for s in range(4)], issued
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") >= (1 if overlap else len(parts))


@needs_ptxas
@pytest.mark.parametrize("schedule", FP8_SCHEDULES, ids=lambda s: s.key())
@pytest.mark.parametrize("tiles", TILE_POINTS, ids=lambda t: f"{t['TILE_M']}x{t['TILE_N']}")
def test_every_fp8_point_promotes_each_k_tile_without_spills(tiles, schedule, tmp_path):
    warps = 8 if tiles["TILE_M"] == 128 else 4
    if schedule.fp8_overlap and warps == 4 and tiles["TILE_N"] == 256 and not schedule.tma:
        with pytest.raises(CompileError, match="fp8_overlap at N = 256 takes two warpgroups"):
            _leaf(_kernel(), tiles, schedule, 90)
        return  # pruned: the tuner never measures it (it spilled)
    leaf = _leaf(_kernel(), tiles, schedule, 90)
    assert ".target sm_90a" in leaf.ptx and "e4m3.e4m3" in leaf.ptx
    _promoted_chains(leaf.ptx, tiles["TILE_N"], warps, schedule.fp8_overlap)
    if schedule.tma:
        assert "cp.async.bulk.tensor.2d" in leaf.ptx
        assert [m.dtype for m in leaf.generated.tensor_maps] == ["u8", "u8"]
    report = ptxas(leaf.ptx, "sm_90a", tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report


@needs_ptxas
@pytest.mark.parametrize(("fmt", "tiles", "schedule"), [
    ("e5m2", {"TILE_M": 128, "TILE_N": 256}, WGMMA),
    ("e5m2", {"TILE_M": 64, "TILE_N": 256}, Schedule(None, 6, "grouped", wgmma=True, tma=True)),
])
def test_per_tensor_scales_and_e5m2_promote_without_spills(fmt, tiles, schedule, tmp_path):
    kernel = load_text(per_tensor_text(EXAMPLE.read_text()).replace("e4m3", fmt), "m.phk").kernels[0]
    leaf = _leaf(kernel, tiles, schedule, 90)
    assert "wgmma.mma_async.sync.aligned.m64n" in leaf.ptx and f".f32.{fmt}.{fmt}" in leaf.ptx
    _promoted_chains(leaf.ptx, tiles["TILE_N"], 8 if tiles["TILE_M"] == 128 else 4)
    report = ptxas(leaf.ptx, "sm_90a", tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report


TMA_SCHEDULES = [s for s in FP8_SCHEDULES if s.tma and not s.fp8_overlap]


@needs_ptxas
@pytest.mark.parametrize("schedule", TMA_SCHEDULES, ids=lambda s: s.key())
@pytest.mark.parametrize("rows", [128, 64])
def test_a_k_tile_of_256_runs_two_chains_in_turn_without_spills(rows, schedule, tmp_path):
    """TILE_K = 256 on the TMA ring: per k tile two 4-step chains from zero (the promotion interval
    of TILE_K = 128), one per 128-byte block of the operands' rows, the second issued before the
    first is waited for (wait_group 1) and added; each box a 128-byte-wide block."""
    leaf = _leaf(_kernel(), {"TILE_M": rows, "TILE_N": 128, "TILE_K": 256}, schedule, 90)
    chain = r"setp\.ne\.b32 p, ([01]), 0; wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k32"
    issued = re.findall(chain, leaf.ptx)
    assert issued == [("0" if s == 0 else "1", "128") for _ in range(2) for s in range(4)], issued
    assert "wgmma.wait_group.sync.aligned 1;" in leaf.ptx
    source = leaf.generated.source
    assert len(re.findall(r"tma_load_2d\([^;]* \+ 128, ", source)) == 2, source  # a's and b's second block
    report = ptxas(leaf.ptx, "sm_90a", tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report
    assert "C7514" not in report, report  # no wgmma serialized


def test_an_fp8_k_loop_on_the_tma_ring_releases_its_own_stage():
    """The promoted k tile ends with wait_group 0, so the iteration frees the stage it read (not
    the one before, as a loop whose last group stays in flight does): copies run stages - 1 ahead."""
    for tile_k in (128, 256):
        leaf = _leaf(_kernel(), {"TILE_M": 128, "TILE_N": 128, "TILE_K": tile_k},
                     Schedule(stages=3, wgmma=True, tma=True), 90, until="emit")
        src = leaf.generated.source
        loop = src[src.index("for (int u_kt_"):]
        own = r"if \(th_lane == 0\) mbar_arrive\(bar_\d+ \+ 8 \* \(3 \+ (it_\d+) % 3\)\);"
        release = re.search(own, loop)
        assert release and f"const int {release.group(1)} =" in loop, loop
        before = loop[: release.start()]
        assert before.rindex("wg_wait_all();") > before.rindex("wg_commit();")
        assert "- 1) % 3" not in loop[: loop.index("wg_wait_all();", release.end())]


@pytest.mark.parametrize(("schedule", "why"), [
    (WGMMA, "an fp8 k tile of 256 takes the TMA ring"),
    (Schedule(stages=4, wgmma=True, tma=True, fp8_overlap=True), "always overlaps its promotion"),
])
def test_a_k_tile_of_256_elsewhere_is_pruned(schedule, why):
    with pytest.raises(CompileError, match=why):
        _leaf(_kernel(), {"TILE_M": 128, "TILE_N": 128, "TILE_K": 256}, schedule, 90, until="emit")


def test_the_blocked_fp8_layout_is_what_the_descriptor_reads():
    """A k tile of 256 lies as two [x][128] blocks, each the 128-byte-swizzled tile of k = 128:
    CoreTile.offset of (x, k) is block k // 128's start plus that tile's offset of (x, k % 128),
    and the descriptor's k steps walk the blocks in order."""
    wide = CoreTile("", "a", 256, 128, "e4m3", blocked=True)
    one = CoreTile("", "a", 128, 128, "e4m3")
    assert wide.swizzled and wide.x_block == one.x_block == 64 * 128
    for x in range(0, 128, 7):
        for k in range(256):
            off = eval(wide.offset(str(x), str(k)).replace("/", "//"))
            assert off == (k // 128) * 128 * 128 + descriptor_reads(one, 0, x, k % 128), (x, k)
    assert [wide.k_offset(s) for s in range(8)] == [0, 32, 64, 96, 16384, 16416, 16448, 16480]


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


def test_an_fp8_operand_whose_rows_are_not_16_bytes_is_not_given_a_tensor_map():
    """cuTensorMapEncodeTiled takes row pitches of a multiple of 16 bytes only: 16 fp8 elements
    (8 of 16 bits). K = 1000 fp8 rows are refused the TMA ring at compile time, with a reason
    (the H100 run refused them at the launch, CUresult 1); K = 1008 gets it."""
    kernel = load_text(EXAMPLE.read_text(), "matmul_fp8.phk").kernels[0]
    tma = Schedule(stages=4, wgmma=True, tma=True)
    point = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 128}
    options = stages.Options(False, tma, 90)

    def emit(k: int):
        return stages.run(kernel, binding.bind(kernel, {"M": 300, "N": 520, "K": k}, None, point), options,
                          until="emit")

    with pytest.raises(CompileError, match="bulk tensor copies"):
        emit(1000)
    leaf = emit(1008)
    assert "cp.async.bulk.tensor" in leaf.generated.source
