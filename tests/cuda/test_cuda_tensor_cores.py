"""CI checks of the tensor-core leaves that need no GPU: the accumulator layout and the CTA order
are permutations, every variant compiles through NVRTC, assembles with ptxas for sm_90 without
spills, and its SASS holds tensor-core instructions (HMMA, read by nvdisasm from the
nvidia-cuda-nvdisasm package of the lock); bad tile shapes are errors
at the user's line."""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sass
from cuda_cases import descriptor_reads, launch_order, load_example, ptxas

from compiler.cuda.compiled import compile_kernel
from compiler.cuda.layout import LayoutError, MmaGrid, choose_mma_grid
from compiler.cuda.mainloops.wgmma.mma import CoreTile
from compiler.cuda.schedule import WIDE_THREADS, Schedule
from compiler.cuda.tuning import autotune
from compiler.frontend import binding, walk
from compiler.frontend import load as frontend
from compiler.frontend.diagnostics import CompileError

REPO = Path(__file__).resolve().parents[2]


def _position(dist, thread: int, local: int) -> int:
    text = dist.position(str(local)).replace(dist.thread_var, str(thread))
    return eval(text.replace("/", "//"))  # noqa: S307 - our own integer expression


@pytest.mark.parametrize(
    "grid,shape",
    [(MmaGrid(256, 2, 4), (128, 128)), (MmaGrid(256, 8, 1), (128, 64)), (MmaGrid(128, 1, 4), (32, 256))],
)
def test_accumulator_layout_gives_every_element_to_one_thread(grid, shape):
    """The layout stage: thread (warp, lane) owns what mma.m16n8 leaves in its registers."""
    dr, dc = grid.dist2(shape)
    owners = {}
    for tid in range(grid.threads):
        warp, lane = divmod(tid, 32)
        th_r = (warp // grid.warps_n) * 8 + (lane >> 2)
        th_c = (warp % grid.warps_n) * 4 + (lane & 3)
        for i, j in itertools.product(range(dr.count), range(dc.count)):
            r, c = _position(dr, th_r, i), _position(dc, th_c, j)
            assert (r, c) not in owners, ((r, c), owners.get((r, c)), tid)
            owners[(r, c)] = tid
            # the m16n8 accumulator: lane 4g + t holds rows g, g + 8 and columns 2t, 2t + 1
            assert r % 8 == lane >> 2 and c % 8 // 2 == lane & 3
    assert len(owners) == shape[0] * shape[1]


def test_warp_layout_keeps_rows_in_one_warp_when_rows_are_reduced():
    assert choose_mma_grid(256, {(128, 64)}, row_reductions=True).warps_n == 1
    assert choose_mma_grid(256, {(128, 128)}, row_reductions=False).warps_n > 1
    # too few rows for every warp along them: the rows stay in a warp's M, the columns split over
    # warps (their row reductions meet in shared memory), as decode's 16 query rows on 8 warps
    assert choose_mma_grid(256, {(16, 64), (16, 128)}, row_reductions=True).warps_n == 8
    assert choose_mma_grid(256, {(64, 64)}, row_reductions=True).warps_n > 1
    with pytest.raises(LayoutError, match="16x8 tensor-core tiles"):  # 8 rows: no whole 16-row tile
        choose_mma_grid(256, {(8, 64)}, row_reductions=True)


def test_grouped_cta_order_visits_every_tile_once():
    """The CTA-order stage: group-major order is a permutation of the grid."""
    kernel = load_example("matmul_bf16.phk")
    b = binding.bind(
        kernel, {"M": 1000, "N": 3000, "K": 64}, None, {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32}
    )
    c = compile_kernel(kernel, b, schedule=Schedule(order="grouped", group=3))
    assert sum(ln.strip().startswith("const int cta_") for ln in c.cuda_source.splitlines()) == 5
    gx, gy, _ = c.grid
    order = launch_order(c.cuda_source, c.grid)
    assert sorted(order) == sorted(itertools.product(range(gx), range(gy)))


def _variants():
    mm = [
        (
            "matmul_bf16.phk",
            {"M": 4096, "N": 4096, "K": 4096},
            {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64},
            Schedule(),
        ),
        (
            "matmul_bf16.phk",
            {"M": 1000, "N": 999, "K": 1000},
            {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32},
            Schedule(warps_m=2, stages=4, order="grouped"),
        ),
        (
            "matmul_f16.phk",
            {"M": 4096, "N": 4096, "K": 4096},
            {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64},
            Schedule(warps_m=4, stages=2),
        ),
        (
            "matmul_f16.phk",
            {"M": 333, "N": 4096, "K": 512},
            {"TILE_M": 64, "TILE_N": 64, "TILE_K": 32},
            Schedule(threads=128),
        ),
        (
            "matmul_bf16.phk",
            {"M": 4096, "N": 4096, "K": 4096},
            {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64},
            Schedule(wgmma=True),
        ),
        (
            "matmul_f16.phk",
            {"M": 1000, "N": 999, "K": 1000},
            {"TILE_M": 64, "TILE_N": 128, "TILE_K": 32},
            Schedule(wgmma=True),
        ),
        (
            "matmul_bf16.phk",
            {"M": 8192, "N": 8192, "K": 8192},
            {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64},
            Schedule(wgmma=True, stages=5, order="grouped"),
        ),
        (
            "matmul_bf16.phk",
            {"M": 8192, "N": 8192, "K": 8192},
            {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64},
            Schedule(wgmma=True, stages=4, order="grouped", late_copies=True),
        ),
        (
            "matmul_bf16.phk",
            {"M": 8192, "N": 8192, "K": 8192},
            {"TILE_M": 128, "TILE_N": 256, "TILE_K": 32},
            Schedule(wgmma=True, stages=8, order="grouped"),
        ),
        # a producer warpgroup's bulk tensor copies (mainloops/tma_ws/ring.py): two and one consumer
        # warpgroups
        (
            "matmul_bf16.phk",
            {"M": 8192, "N": 8192, "K": 8192},
            {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64},
            Schedule(wgmma=True, stages=4, order="grouped", tma=True),
        ),
        (
            "matmul_f16.phk",
            {"M": 300, "N": 520, "K": 200},
            {"TILE_M": 64, "TILE_N": 128, "TILE_K": 64},
            Schedule(wgmma=True, stages=5, tma=True),
        ),
    ]
    wg = Schedule(wgmma=True)
    mm += [  # MN-major A (transpose bit), and a 32-wide B transposed into K-major
        ("matmul_tn_bf16", {"M": 1000, "N": 1000, "K": 1000}, {"TM": 128, "TN": 128, "TK": 64}, wg),
        ("matmul_tn_bf16", {"M": 512, "N": 512, "K": 512}, {"TM": 64, "TN": 64, "TK": 32}, wg),
        ("matmul_narrow_f16", {"M": 300, "N": 200, "K": 96}, {"TM": 64, "TN": 32, "TK": 64}, wg),
    ]
    big, tk = {"M": 8192, "N": 8192, "K": 8192}, {"TILE_K": 32}
    mm += [  # TF32 warpgroup MMA: both operands K-major, rounded and transposed through registers
        ("matmul_tf32.phk", big, {"TILE_M": 128, "TILE_N": 256, **tk}, Schedule(wgmma=True, order="grouped")),
        ("matmul_tf32.phk", big, {"TILE_M": 128, "TILE_N": 128, **tk}, Schedule(wgmma=True, stages=3)),
        ("matmul_tf32.phk", {"M": 1000, "N": 996, "K": 1000}, {"TILE_M": 64, "TILE_N": 64, **tk}, wg),
        ("matmul_tf32.phk", big, {"TILE_M": 128, "TILE_N": 128, "TILE_K": 16}, Schedule(warps_m=2)),
    ]
    tma = Schedule(wgmma=True, stages=4, order="grouped", tma=True)
    # TF32 on the TMA ring by role swap, C^T = B^T A^T (mainloops/tma_ws/tf32.py): TFLOAT32 maps, B^T in
    # registers
    mm += [
        ("matmul_tf32.phk", big, {"TILE_M": 256, "TILE_N": 128, **tk}, tma),
        ("matmul_tf32.phk", big, {"TILE_M": 128, "TILE_N": 128, **tk}, dataclasses.replace(tma, stages=6)),
        ("matmul_tf32.phk", {"M": 1000, "N": 996, "K": 1000}, {"TILE_M": 64, "TILE_N": 64, **tk}, tma),
        ("matmul_tf32.phk", {"M": 1000, "N": 996, "K": 1000}, {"TILE_M": 256, "TILE_N": 64, **tk}, tma),
        ("matmul_tf32.phk", {"M": 1000, "N": 996, "K": 1000}, {"TILE_M": 128, "TILE_N": 128, **tk}, tma),
    ]
    rotated = [
        Schedule(wgmma=True, stages=4, rotate=True),
        Schedule(wgmma=True, stages=3, late_copies=True, rotate=True),
    ]
    for name in ("mha_bf16.phk", "causal_mha_bf16.phk", "mha_f16.phk", "mha_tf32.phk"):
        for d in (64, 128):
            for point in ({"BR": 128, "BC": 64}, {"BR": 64, "BC": 128}, {"BR": 128, "BC": 128}):
                dims = {"H": 8, "N": 4096, "D": d}
                mm.append((name, dims, point, Schedule()))
                if name != "mha_tf32.phk":  # S = Q K^T from shared memory, P V with P in registers
                    mm += [(name, dims, point, s) for s in [Schedule(wgmma=True, stages=4), *rotated]]
    return mm + _wide_attention_variants() + _pingpong_variants() + _tma_attention_variants()


def _tma_attention_variants():
    """Attention fed by a producer warpgroup's 3-D bulk tensor copies (mainloops/tma_ws/ring.py), with and
    without ping-pong turns, at BR = 128 (and BR = 64, one consumer warpgroup, without turns), and with
    the softmax's row maximum as one chain."""
    tma = Schedule(wgmma=True, stages=4, order="grouped", rotate=True, tma=True)
    out = []
    for name in ("mha_bf16.phk", "causal_mha_bf16.phk", "mha_f16.phk"):
        for d, bc in ((64, 64), (64, 128), (128, 32), (128, 64), (128, 128)):
            dims = {"H": 8, "N": 4096, "D": d}
            for s in (tma, dataclasses.replace(tma, stages=3, pingpong=True)):
                out.append((name, dims, {"BR": 128, "BC": bc}, s))
        out.append((name, {"H": 8, "N": 4096, "D": 128}, {"BR": 64, "BC": 64}, tma))
    # the row maximum as one chain (Schedule.fold_chains) at the tile the tuner picks at D = 128
    d128 = {"H": 8, "N": 4096, "D": 128}
    out += [(name, d128, {"BR": 128, "BC": 128}, dataclasses.replace(s, fold_chains=1))
            for name in ("mha_bf16.phk", "causal_mha_bf16.phk")
            for s in (tma, dataclasses.replace(tma, stages=3, pingpong=True))]
    return out


def _pingpong_variants():
    """Schedule.pingpong (mbarrier handover, turns on named barriers) at BR = 128."""
    pp = [
        Schedule(wgmma=True, stages=5, rotate=True, pingpong=True),
        Schedule(wgmma=True, stages=6, order="grouped", late_copies=True, rotate=True, pingpong=True),
    ]
    out = []
    for name in ("mha_bf16.phk", "causal_mha_bf16.phk", "mha_f16.phk"):
        for d, bc in ((64, 64), (64, 128), (128, 32), (128, 64)):
            out += [(name, {"H": 8, "N": 4096, "D": d}, {"BR": 128, "BC": bc}, s) for s in pp]
    return out


def _wide_attention_variants():
    """BR = 256 on four warpgroups (Schedule.threads = WIDE_THREADS) at the points that fit
    (BC = 128 at D = 64 and BC = 64 at D = 128 are pruned: they spilled), plain, rotated and
    with late copies; and BR = 256 on mma.sync, which fits at D = 64, BC = 32 only."""
    wide = [
        Schedule(wgmma=True, stages=4, order="grouped", threads=WIDE_THREADS),
        Schedule(wgmma=True, stages=4, order="grouped", threads=WIDE_THREADS, rotate=True),
        Schedule(wgmma=True, stages=3, late_copies=True, threads=WIDE_THREADS, rotate=True),
        Schedule(wgmma=True, stages=5, threads=WIDE_THREADS),
    ]
    out = []
    for name in ("mha_bf16.phk", "causal_mha_bf16.phk", "mha_f16.phk"):
        for d, bc in ((64, 32), (64, 64), (64, 128), (128, 32), (128, 64)):
            dims = {"H": 8, "N": 4096, "D": d}
            out += [(name, dims, {"BR": 256, "BC": bc}, s) for s in wide]
        out.append((name, {"H": 8, "N": 4096, "D": 64}, {"BR": 256, "BC": 32}, Schedule()))
    return out


@dataclasses.dataclass(frozen=True)
class Assembled:
    """One variant through NVRTC and ptxas: its PTX, ptxas's -v report and cubin; or the prune
    (or any other error) that stopped it, raised again by the variant's own test."""

    ptx: str = ""
    tensor_maps: tuple = ()
    report: str = ""
    cubin: bytes = b""
    arch: str = ""
    error: BaseException | None = None


def _assemble(name, dims, point, schedule, folder: Path) -> Assembled:
    kernel = load_example(name)
    dims = {k: v for k, v in dims.items() if k in binding.kernel_dims(kernel)}
    try:
        c = compile_kernel(kernel, binding.bind(kernel, dims, None, point), schedule=schedule)
        arch = "sm_90a" if ".target sm_90a" in c.ptx else "sm_90"
        report = ptxas(c.ptx, arch, folder)
    except Exception as e:  # noqa: BLE001 - the variant's test raises it again, alone
        return Assembled(error=e)
    return Assembled(c.ptx, tuple(c.tensor_maps), report, (folder / f"{arch}.cubin").read_bytes(), arch)


VARIANT_TEST = "test_tensor_core_variant_assembles_without_spills_and_holds_hmma"


@pytest.fixture(scope="module")
def assembled_variants(request, tmp_path_factory) -> dict[str, tuple[Assembled, str]]:
    """Every variant this run (this shard) tests, assembled, with its SASS: all the cubins go
    through one nvdisasm run (sass.py), not one run each."""
    items = [item for item in request.session.items if item.originalname == VARIANT_TEST]
    done = {}
    for item in items:
        folder = tmp_path_factory.mktemp("variant")
        done[item.callspec.id] = _assemble(**item.callspec.params, folder=folder)
    ready = [key for key, a in done.items() if a.error is None]
    listings = sass.disassemble_many([(done[key].cubin, done[key].arch) for key in ready])
    listing_of = dict(zip(ready, listings, strict=True))
    return {key: (a, listing_of.get(key, "")) for key, a in done.items()}


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
def test_one_nvdisasm_run_lists_the_instructions_of_each_cubin_as_its_own_run_does(tmp_path):
    """The batch (raw code, one run) against nvdisasm's own ELF listing of each cubin: the same
    instructions in the same order, branch targets aside (offsets in one, labels in the other)."""
    picks = [v for v in _variants() if v[3].tma][:2] + [v for v in _variants() if not v[3].wgmma][:1]
    cubins = []
    for i, variant in enumerate(picks):
        folder = tmp_path / str(i)
        folder.mkdir()
        a = _assemble(*variant, folder=folder)
        assert a.error is None, a.error
        cubins.append((folder / f"{a.arch}.cubin", a.arch))
    batch = sass.disassemble_many([(path.read_bytes(), arch) for path, arch in cubins])
    nvdisasm = sass.tool("nvdisasm")
    assert nvdisasm, "nvdisasm missing: tools/bazel installs it from the lock (nvidia-cuda-nvdisasm)"
    for (path, _), listing in zip(cubins, batch, strict=True):
        own = subprocess.run([nvdisasm, "-c", "-ndf", str(path)], capture_output=True, text=True,
                             check=True).stdout
        own_lines = [text for _, text in sass.instructions(own)]
        assert len(own_lines) > 100
        raw_lines = listing.splitlines()
        assert len(raw_lines) == len(own_lines)
        for raw, labelled in zip(raw_lines, own_lines, strict=True):
            assert _same_instruction(raw, labelled), (raw, labelled)


def _same_instruction(raw: str, labelled: str) -> bool:
    """One instruction as the raw listing and the ELF listing write it: token for token the same,
    but where the ELF listing names a branch target (`(.L_x_3)) the raw one gives its offset."""
    a, b = raw.split(), labelled.split()

    def target(token: str, pattern: str) -> str | None:  # the token's trailing , or ; when a target
        m = re.fullmatch(pattern + r"([,;]?)", token)
        return m and m[1]

    return len(a) == len(b) and all(
        x == y or target(x, r"0x[0-9a-f]+") == target(y, r"`\(\.L_x_\d+\)") is not None
        for x, y in zip(a, b, strict=True))


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize("name,dims,point,schedule", _variants(), ids=lambda v: str(v)[:40])
def test_tensor_core_variant_assembles_without_spills_and_holds_hmma(name, dims, point, schedule, request,
                                                                     assembled_variants):
    del dims, point  # assembled by the fixture, with the other variants of this run
    c, sass_text = assembled_variants[request.node.callspec.id]
    tf32_wgmma = "tf32" in name and schedule.wgmma and "mha" not in name
    if isinstance(c.error, CompileError):  # a point the generator prunes (registers, shared memory) is fine
        assert "is pruned" in c.error.message, c.error.message
        assert not tf32_wgmma, c.error.message  # these points are the ones the TF32 benchmark runs
        return
    if c.error is not None:
        raise c.error
    assert ("wgmma.mma_async" if schedule.wgmma else "mma.sync.aligned.m16n8k") in c.ptx, name
    # TF32 warpgroup MMA stages through registers (rounded with cvt.rn), the others by cp.async;
    # on the TMA ring the copies round (TFLOAT32 maps) and nothing in the kernel does
    if tf32_wgmma and schedule.tma:
        assert "cp.async.bulk.tensor" in c.ptx and "cvt.rn.tf32" not in c.ptx, name
        assert all(m.dtype == "tf32" for m in c.tensor_maps), name
    else:
        assert ("cvt.rn.tf32.f32" if tf32_wgmma else "cp.async") in c.ptx, name
    assert "cvt.rna" not in c.ptx, name  # TF32 rounds ties to even (docs/language.md §4.1)
    report = c.report
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report
    assert "0 bytes stack frame" in report, report
    # C7510-C7515: ptxas serializes the warpgroup MMAs (an accumulator touched while in flight)
    assert "are serialized" not in report, report
    want = r"\bHGMMA\.64x\d+x(16|8)\.F32" if schedule.wgmma else r"\bHMMA\.(16816|1688)\.F32"
    assert re.search(want, sass_text), f"{name}: no tensor-core instruction in the SASS"
    if "tf32" in name:
        assert re.search(r"\bH(G)?MMA\.\S+\.F32\.TF32", sass_text), f"{name}: no TF32 tensor-core instruction"
    if schedule.tma:  # the copy engine's loads (attention's [H, N, D] by 3-D maps), the mbarrier waits
        assert ("UTMALDG.3D" if "mha" in name else "UTMALDG.2D") in sass_text, name
        assert "SYNCS.PHASECHK" in sass_text, name
    if schedule.pingpong:  # the turns' arrivals; cp.async copies arriving on mbarriers, their waits
        assert "BAR.ARV" in sass_text, name
        if not schedule.tma:
            assert all(op in sass_text for op in ("ARRIVES.LDGSTSBAR", "SYNCS.PHASECHK")), name
            assert "used 4 barriers" in report, report  # immediate ids: 0, 2, 3 (1 unused)


@pytest.mark.parametrize("k,x,mn_major", [(64, 128, False), (32, 64, False), (64, 256, True), (32, 64, True)])
def test_core_tile_copies_fill_every_element_once(k, x, mn_major):
    """The lay-out of warpgroup MMA operands: the cp.async chunks of a tile land on distinct
    16-byte slots covering the tile, each chunk's 8 elements contiguous, and the 8 chunks of
    consecutive threads in one 128-byte row (no bank conflict)."""
    tile = CoreTile("", "b", k, x, "bf16", mn_major)
    per_row = tile.cols // 8
    slots = []
    for e in range(tile.rows * per_row):
        row, col = (eval(c.replace("/", "//"), {"e": e}) for c in tile.chunk("e", per_row))  # noqa: S307
        at = [eval(tile.offset(str(row), str(col + i)).replace("/", "//")) for i in range(8)]  # noqa: S307
        assert at == list(range(at[0], at[0] + 8)) and at[0] % 8 == 0
        slots.append(at[0] // 8)
    assert sorted(slots) == list(range(tile.elements // 8))
    for first in range(0, len(slots), 8):
        assert len({s // 8 for s in slots[first : first + 8]}) == 1


@pytest.mark.parametrize(
    "k,x,mn_major,dtype",
    [
        (64, 128, False, "bf16"),
        (32, 128, False, "bf16"),
        (128, 64, False, "bf16"),
        (64, 256, True, "bf16"),
        (32, 64, True, "bf16"),
        (128, 128, True, "bf16"),
        (32, 128, False, "f32"),
        (32, 256, False, "f32"),
    ],
)
def test_wgmma_descriptors_read_what_the_copies_wrote(k, x, mn_major, dtype):
    """For every k step (and, for a, every warpgroup's 64 rows), the element the descriptor
    addresses is the one the copies (or TF32's register stores) put there (CoreTile.offset)."""
    tile = CoreTile("", "a", k, x, dtype, mn_major)
    eb, mk = tile.elem_bytes, tile.mma_k
    for step in range(k // mk):
        for group in range(x // 64):
            base = eb * (group * tile.x_block + step * tile.k_step)
            for xx in range(64):
                for kk in range(mk):
                    xk = (group * 64 + xx, step * mk + kk)  # stored [k][x] when MN-major, else [x][k]
                    row, col = xk[::-1] if mn_major else xk
                    at = eval(tile.offset(str(row), str(col)).replace("/", "//"))  # noqa: S307
                    assert descriptor_reads(tile, base, xx, kk) == eb * at, (step, group, xx, kk)


@pytest.mark.parametrize(
    "x,direct,threads", [(128, True, 256), (64, True, 128), (256, False, 256), (64, False, 128)]
)
def test_tf32_register_stores_fill_the_tile_once_without_bank_conflicts(x, direct, threads):
    """TF32 warpgroup MMA operands (mainloops/wgmma/tf32.py): the units of all threads store every element of
    a k = 32 tile exactly once, at the source element the unit loaded (a float4 along k, or the
    transposed 4x4 block), and each store instruction's 8-thread phases hit 8 distinct 16-byte
    bank groups (one wavefront per 8 threads)."""
    from compiler.cuda.mainloops.wgmma import tf32 as wgmma_tf32

    tile = CoreTile("", "b", 32, x, "f32")
    units = x * 32 // (4 if direct else 16)
    x_of, k_of = (c.replace("/", "//") for c in wgmma_tf32.unit_origin(direct, "e"))
    seen = {}
    for it in range(-(-units // threads)):
        for q in range(1 if direct else 4):  # one store instruction per (it, q)
            banks = []
            for t in range(threads):
                e = it * threads + t
                if e >= units:
                    continue
                x0, k0 = eval(x_of, {"e": e}), eval(k_of, {"e": e})  # noqa: S307
                row = x0 + q
                at = eval(tile.offset(str(row), str(k0)).replace("/", "//"))  # noqa: S307
                for i in range(4):  # the chunk holds source elements (row, k0 + i)
                    assert (at + i) not in seen, (e, q, i)
                    seen[at + i] = (row, k0 + i)
                banks.append(at * 4 // 16 % 8)
            for phase in range(0, len(banks), 8):
                assert len(set(banks[phase : phase + 8])) == len(banks[phase : phase + 8]), (it, q, phase)
    assert len(seen) == x * 32
    for at, (row, k) in seen.items():
        assert eval(tile.offset(str(row), str(k)).replace("/", "//")) == at  # noqa: S307


def test_f32_dot_stays_exact_on_cuda_cores():
    kernel = load_example("matmul.phk")
    c = compile_kernel(kernel, binding.bind(kernel, {"M": 512, "N": 512, "K": 512}))
    assert "mma.sync" not in c.ptx and "fma.rn" in c.ptx


BAD_K = """\
@autotune(TM in [64], TN in [64], TK in [8])
kernel mm(A: tensor<bf16>[M, K], B: tensor<bf16>[K, N], C: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ TK], B[kt :+ TK, ctx.block.y * TN :+ TN])
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc
}
"""


def test_a_16_bit_dot_no_mma_shape_fits_runs_on_cuda_cores_and_a_tf32_one_is_an_error_at_it(tmp_path):
    """k = 8 is half an m16n8k16 step: bf16 products are exact in f32, so the dot runs on CUDA
    cores; TF32 has no such fallback (CUDA cores do not round), so that point is pruned at the dot."""
    path = tmp_path / "bad.phk"
    path.write_text(BAD_K)
    kernel = frontend.load_file(path).kernel()
    c = compile_kernel(kernel, binding.bind(kernel, {"M": 128, "N": 128, "K": 64}))
    assert "mma.sync" not in c.ptx and "fma.rn" in c.ptx
    path.write_text("@precision(tf32)\n" + BAD_K.replace("bf16", "f32").replace("TK in [8]", "TK in [4]"))
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "compiler" / "main.py"),
            "ptx",
            str(path),
            "--dim",
            "M=128",
            "--dim",
            "N=128",
            "--dim",
            "K=64",
            "-o",
            str(tmp_path / "k.ptx"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 2, run.stderr
    error = r"bad\.phk:6:\d+: error: .*pruned: a TF32 dot .* \[64, 4\] x \[4, 64\]"
    assert re.search(error, run.stderr), run.stderr
    assert "Traceback" not in run.stderr


def test_rows_that_fit_no_warp_layout_are_pruned_at_the_search_space(tmp_path):
    path = tmp_path / "bad.phk"
    pinned = "@launch(256)\n" + BAD_K.replace("TN in [64]", "TN in [8]").replace("TK in [8]", "TK in [16]")
    path.write_text(pinned.replace("TM in [64]", "TM in [16]"))  # 8 warps, one 16x8 tile
    kernel = frontend.load_file(path).kernel()
    with pytest.raises(CompileError) as e:
        compile_kernel(kernel, binding.bind(kernel, {"M": 128, "N": 128, "K": 64}))
    assert "tensor-core tiles" in e.value.message and e.value.span.line == 2


def test_tf32_on_a_gpu_without_tensor_cores_is_an_error_at_the_dot():
    from compiler.cuda import target

    kernel = load_example("matmul.phk")
    b = binding.bind(
        kernel, {"M": 256, "N": 256, "K": 256}, None, {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}
    )
    exact = compile_kernel(kernel, b, cc=75)  # exact f32 runs on the CUDA cores of any GPU
    assert ".target sm_75" in exact.ptx
    target.check(exact, 75)
    tf32 = compile_kernel(kernel, b, tf32=True)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in tf32.ptx and "cvt.rn.tf32.f32" in tf32.ptx
    target.check(tf32, 90)
    for refused in (lambda: compile_kernel(kernel, b, tf32=True, cc=75), lambda: target.check(tf32, 75)):
        with pytest.raises(CompileError) as e:
            refused()
        assert "compute capability 8.0 or later for tensor cores" in e.value.message, e.value.message
        assert "this GPU has compute capability 7.5" in e.value.message
        assert e.value.span.line == 11  # acc += dot(a, b)


CAST = """@autotune(B in [64])
kernel k(a: tensor<f32>[N], o: tensor<f32>[N], h: tensor<f16>[N]) {
  let i = ctx.block.x * B
  o[i :+ B] = f32(bf16(a[i :+ B]))
  h[i :+ B] = f16(a[i :+ B])
}
"""


def test_narrow_casts_round_to_nearest_even():
    kernel = frontend.load_text(CAST, "cast.phk").kernel()
    c = compile_kernel(kernel, binding.bind(kernel, {"N": 100}))
    assert "cvt.rn.bf16.f32" in c.ptx and "cvt.rn.f16.f32" in c.ptx


def test_tf32_precision_in_the_source_lowers_to_tf32_tensor_cores():
    for name, dims in (
        ("matmul_tf32.phk", {"M": 512, "N": 512, "K": 512}),
        ("mha_tf32.phk", {"H": 2, "N": 512, "D": 64}),
    ):
        kernel = load_example(name)
        c = compile_kernel(kernel, binding.bind(kernel, dims))
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in c.ptx, name


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


def test_schedule_search_tries_each_family_at_its_best_tile(monkeypatch, tmp_path):
    """The tuner's search order (no GPU: timings made up): every point with the default
    schedule and with warpgroup MMA, then each family's whole schedule space at its own best
    point; the winner and its schedule are what the cache keeps."""
    from compiler.cuda import schedule as sched

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    monkeypatch.setattr(autotune, "tuning_inputs", lambda kernel, env: (None, None))
    asked, modelled = [], []

    def fake_measure(kernel, dims, candidates, tf32, inputs, log, model=False):
        asked.append(list(candidates))
        modelled.append(model)
        timed = []
        for point, s in candidates:
            ms = point["TILE_M"] / 64 + (0.5 if s.wgmma else 0.7) - 0.01 * s.stages  # mma.sync: 1.18x
            timed.append(((tuple(sorted(point.items())), s), ms))
        return timed, []

    monkeypatch.setattr(autotune, "_measure", fake_measure)
    kernel = load_example("matmul_bf16.phk")
    res = autotune.tune(kernel, {"M": 1024, "N": 1024, "K": 1024})
    points = autotune.search_points(kernel)
    # a single dot: the deep probe (as many stages as fit), and the deep rings in the family
    assert asked[0] == [(p, s) for p in points for s in (sched.DEFAULT, sched.WGMMA_DEEP_PROBE)]
    for family in asked[1:]:  # the two best points of the family, each with the family's space
        assert len({str(p) for p, _ in family}) == autotune.FINALISTS
        assert all(p["TILE_M"] == 64 for p, _ in family)
    assert len(asked) == 3 and all(s.wgmma for _, s in asked[2]) and not any(s.wgmma for _, s in asked[1])
    assert modelled == [True, False, False]  # the model ranks the probes; finalists are timed whole
    assert any(s.late_copies for _, s in asked[2]) and not any(s.rotate for f in asked for _, s in f)
    assert {s.stages for _, s in asked[2]} == {3, 4, 5, *sched.DEEP_STAGES}
    assert res.best["TILE_M"] == 64 and res.schedule.wgmma and res.schedule.stages == max(sched.DEEP_STAGES)
    again = autotune.tune(kernel, {"M": 1024, "N": 1024, "K": 1024})
    assert again.cached and again.schedule == res.schedule


def _fake_timings(monkeypatch, tmp_path, ms) -> list:
    """The tuner with no GPU: each candidate's time is ms(point, schedule); returns the list of
    each _measure call's candidates."""
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    monkeypatch.setattr(autotune, "tuning_inputs", lambda kernel, env: (None, None))
    asked = []

    def fake_measure(kernel, dims, candidates, tf32, inputs, log, model=False):
        asked.append(list(candidates))
        return [((tuple(sorted(p.items())), s), ms(p, s)) for p, s in candidates], []

    monkeypatch.setattr(autotune, "_measure", fake_measure)
    return asked


def test_a_family_far_behind_at_its_probes_is_not_searched(monkeypatch, tmp_path):
    """mma.sync's best probe at 1.3x warpgroup MMA's (over FAMILY_MARGIN): only the warpgroup
    family's space is searched, and the skipped family is named in the pruned rows."""
    from compiler.cuda import schedule as sched

    asked = _fake_timings(monkeypatch, tmp_path, lambda p, s: (1.0 if s.wgmma else 1.3) + p["TILE_K"] / 1000)
    res = autotune.tune(load_example("matmul_bf16.phk"), {"M": 1024, "N": 1024, "K": 1024})
    assert len(asked) == 2 and all(s.wgmma for _, s in asked[1]) and res.schedule.wgmma
    (row,) = [(dict(items), why) for items, why in res.pruned if "family behind" in why]
    assert row[0]["schedule"] == sched.DEFAULT.key() and row[0]["TILE_K"] == 32
    assert "over 1.25 x the best probe 1.032 ms" in row[1]
    monkeypatch.setenv("PHOBOS_TUNE_EXHAUSTIVE", "1")  # no measured cuts: both families searched
    asked.clear()
    autotune.tune(load_example("matmul_bf16.phk"), {"M": 1024, "N": 1024, "K": 1024}, use_cache=False)
    assert len(asked) == 3 and not any(s.wgmma for _, s in asked[1])


def test_tma_ring_adds_a_producer_warpgroup_and_a_tensor_map_per_operand():
    """The warp-specialized ring: 128 more threads, one tensor map per operand (A: 128-row
    boxes of 64 k; B: TILE_K-row boxes of 64 n, four per stage), passed after the kernel's own
    parameters; what it cannot take is pruned, not compiled as something else."""
    from compiler.cuda.compiled import generate_source
    from compiler.cuda.mainloops.tma_ws.maps import MapSpec

    kernel = load_example("matmul_bf16.phk")
    tma = Schedule(wgmma=True, stages=4, order="grouped", tma=True)
    dims = {"M": 1000, "N": 1024, "K": 776}
    b = binding.bind(kernel, dims, None, {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64})
    g = generate_source(kernel, b, schedule=tma)
    assert g.block == (384, 1, 1) and g.params == ("A", "B", "C", "tm_a", "tm_b")
    # A [M, K]: 128-row boxes of 64 k; B [K, N]: TILE_K-row boxes of 64 n
    maps = (MapSpec("tm_a", "A", 128, 64, 1000, 776), MapSpec("tm_b", "B", 64, 64, 776, 1024))
    assert g.tensor_maps == maps
    assert g.source.count("tma_load_2d(ring") == 5 and "setmaxnreg.dec.sync.aligned.u32 40" in g.source
    narrow = {"TILE_M": 128, "TILE_N": 256, "TILE_K": 32}  # k = 32: 64-byte rows
    for point, name in ((narrow, "matmul_bf16.phk"), ({}, "mha_bf16.phk")):
        k = load_example(name)
        dims = {"M": 1000, "N": 1000, "K": 1000} if "matmul" in name else {"H": 2, "N": 512, "D": 64}
        with pytest.raises(CompileError, match="is pruned: bulk tensor copies take"):
            generate_source(k, binding.bind(k, dims, None, point), schedule=tma)


@pytest.mark.parametrize("tma_tuned", [True, False])
def test_attention_search_probes_and_searches_the_rotated_loop(monkeypatch, tmp_path, tma_tuned):
    """A loop of two dots (attention): the warpgroup probe rotates it, and the family's space
    holds both orders; the TMA-fed loop is a family of its own, or none while it is withheld
    (schedule.TMA_ATTENTION_TUNED)."""
    from compiler.cuda import schedule as sched

    monkeypatch.setattr(sched, "TMA_ATTENTION_TUNED", tma_tuned)
    asked = _fake_timings(monkeypatch, tmp_path, lambda p, s: 1.0 + (0.0 if s.rotate else 0.2))
    res = autotune.tune(load_example("mha_bf16.phk"), {"H": 8, "N": 4096, "D": 64})
    probe = Schedule(stages=4, order="grouped", wgmma=True, rotate=True)
    wide = dataclasses.replace(probe, threads=WIDE_THREADS)  # four warpgroups: BR = 256
    tma = dataclasses.replace(probe, tma=True, pingpong=True)  # a producer warpgroup's TMA
    assert {s for _, s in asked[0]} == {Schedule(), probe, wide} | ({tma} if tma_tuned else set())
    assert {p["BR"] for p, _ in asked[0]} == {64, 128, 256}
    assert {s.rotate for _, s in asked[2]} == {False, True} and res.schedule.rotate
    assert len(asked) == 4 + tma_tuned and all(s.wgmma and s.threads == WIDE_THREADS for _, s in asked[3])
    assert any(s.pingpong for _, s in asked[2]) and not any(s.pingpong for _, s in asked[3])
    assert not any(s.threads for f in asked[1:3] for _, s in f)
    assert not any(s.tma for f in asked[1:4] for _, s in f)
    assert {(s.late_copies, s.rotate) for _, s in asked[3]} == set(itertools.product((False, True), repeat=2))
    if not tma_tuned:
        return
    # the TMA family: both ring depths, both orders, with and without turns, rotated, no late copies
    assert all(s.tma and s.rotate and not s.late_copies and not s.threads for _, s in asked[4])
    assert {(s.stages, s.order, s.pingpong) for _, s in asked[4]} | {(4, "grouped", True)} == set(
        itertools.product((3, 4), ("row", "grouped"), (False, True))
    )


def test_wide_attention_keeps_the_points_that_fit_four_warpgroups():
    """BR = 256 on 512 threads (128 registers each): the points that assembled without spills
    compile, the ones that spilled are pruned by the register budget, and a 128-row tile cannot
    be spread over four warpgroups of 64 rows."""
    wide = Schedule(wgmma=True, stages=4, threads=WIDE_THREADS, rotate=True)
    kernel = load_example("mha_bf16.phk")

    def compiles(d, point):
        b = binding.bind(kernel, {"H": 8, "N": 4096, "D": d}, None, point)
        try:
            return compile_kernel(kernel, b, schedule=wide).block == (WIDE_THREADS, 1, 1)
        except CompileError as e:
            assert "is pruned" in e.message, e.message
            return False

    assert compiles(128, {"BR": 256, "BC": 32}) and compiles(64, {"BR": 256, "BC": 64})
    assert not compiles(128, {"BR": 256, "BC": 64}) and not compiles(64, {"BR": 256, "BC": 128})
    assert not compiles(128, {"BR": 128, "BC": 32})


def test_every_point_of_the_tf32_gpu_examples_compiles():
    """The TF32 GPU test (test_cuda_tc_gpu.py, TF32_CASES) launches its points without a pruning
    check: a change of budgets that prunes one must fail here, on the CPU, not there."""
    from test_cuda_tc_gpu import TF32_CASES

    for name, dims, points in TF32_CASES:
        kernel = load_example(name)
        for point in points:
            compile_kernel(kernel, binding.bind(kernel, dims, None, point), tf32=True)
