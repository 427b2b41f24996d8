"""TF32 warpgroup MMA fed by bulk tensor copies (compiler/cuda/tma_tf32.py), without a GPU: a
model of the copies, the rounding pass and the descriptors over the generator's own offset
expressions, and the generated loop's order of waits, fences and barriers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cuda_cases import descriptor_reads, load_example

from compiler.cuda import tma_tf32
from compiler.cuda.compiled import generate_source
from compiler.cuda.schedule import Schedule
from compiler.cuda.tensor_maps import MapSpec
from compiler.cuda.wgmma import CoreTile
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError
from compiler.interp.values import round_to

TMA = Schedule(wgmma=True, stages=4, order="grouped", tma=True)


def _at(expr: str, **env) -> int:
    return eval(expr.replace("/", "//"), env)  # noqa: S307  (the generator's C index arithmetic)


def _box(smem, word: int, src, r0: int, c0: int, rows: int) -> None:
    """A bulk tensor copy of a box of `rows` x 32 f32 with the 128-byte swizzle, written out from
    the PTX ISA independently of the generator: byte a of the box lands at a ^ (((a >> 7) & 7) << 4)
    from a 1024-byte-aligned `word`; elements outside `src` arrive as zeros."""
    assert word % 256 == 0
    for r in range(rows):
        for c in range(tma_tf32.BOX):
            inside = r0 + r < src.shape[0] and c0 + c < src.shape[1]
            a = r * 128 + c * 4
            smem[word + (a ^ (((a >> 7) & 7) << 4)) // 4] = src[r0 + r, c0 + c] if inside else 0.0


def _turn(smem, raw: int, kmajor: int, tile: CoreTile, threads: int) -> list[list[int]]:
    """The pass over a turned operand as the generated code runs it (tma_tf32.turn_origin's units,
    raw_offset for the loads, CoreTile.offset for the stores); returns, per load and store
    instruction, the first word each thread reads or writes, in thread order."""
    units = tile.x * tile.k // 16
    x_of, k_of = tma_tf32.turn_origin("e")
    loads, stores = [], []
    for it in range(-(-units // threads)):
        regs, firsts, rows = {}, [[] for _ in range(4)], [[] for _ in range(4)]
        for t in range(threads):
            e = it * threads + t
            if e >= units:
                continue
            x0, k0 = _at(x_of, e=e), _at(k_of, e=e)
            for i in range(4):
                w = raw + _at(tma_tf32.raw_offset(f"{k0 + i}", f"{x0}", tile.k))
                regs[t, i] = smem[w : w + 4].copy()
                firsts[i].append(w)
            for q in range(4):
                at = kmajor + _at(tile.offset(f"{x0 + q}", f"{k0}"))
                smem[at : at + 4] = round_to("tf32", np.array([regs[t, i][q] for i in range(4)], np.float32))
                rows[q].append(at)
        loads += firsts
        stores += rows
    return loads + stores


@pytest.mark.parametrize(
    "m,n,kdim,tm,tn,at",
    [
        (1000, 996, 1000, 128, 256, (7, 3, 31)),
        (8192, 8192, 8192, 128, 128, (5, 9, 40)),
        (300, 260, 200, 64, 64, (4, 4, 6)),
    ],
)
def test_descriptors_read_the_rounded_operands_of_the_tma_copies(m, n, kdim, tm, tn, at):
    """For one k tile (a CTA and k tile at or past the edges), every element that each wgmma k
    step's descriptor reads, for each warpgroup's rows of A and all of B, is the TF32-rounded
    (interpreter's rounding) A[m, k] or B[k, n] that belongs there, or zero past the edge; and
    each load and store instruction of the pass meets 8 distinct 16-byte bank groups per 8
    threads (one wavefront per quarter warp)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, kdim)).astype(np.float32)
    b = rng.standard_normal((kdim, n)).astype(np.float32)
    pm, pn, kt = at[0] % -(-m // tm), at[1] % -(-n // tn), at[2] % -(-kdim // 32)
    m0, n0, k0 = pm * tm, pn * tn, kt * 32
    ta, tb = CoreTile("", "a", 32, tm, "f32"), CoreTile("", "b", 32, tn, "f32")
    smem = np.full(4 * (ta.elements + 2 * tb.elements), np.nan, np.float32)
    a_stage, b_raw, b_kmajor = 0, ta.elements, ta.elements + tb.elements
    _box(smem, a_stage, a, m0, k0, tm)  # A: one box of tm rows
    for j in range(tn // tma_tf32.BOX):  # B: 32-wide boxes of 32 k rows, as the producer issues them
        _box(smem, b_raw + j * tma_tf32.BOX * 32, b, k0, n0 + j * tma_tf32.BOX, 32)
    smem[: ta.elements] = round_to("tf32", smem[: ta.elements])  # A rounded in place
    for words in _turn(smem, b_raw, b_kmajor, tb, 256):
        for phase in range(0, len(words), 8):
            groups = [w * 4 // 16 % 8 for w in words[phase : phase + 8]]
            assert len(set(groups)) == len(groups), phase

    def want(src, r, c):
        inside = r < src.shape[0] and c < src.shape[1]
        return round_to("tf32", np.float32(src[r, c] if inside else 0.0))

    for step in range(32 // ta.mma_k):
        for group in range(tm // 64):
            base = 4 * (group * ta.x_block + step * ta.k_step)
            for x in range(64):
                for k in range(ta.mma_k):
                    got = smem[a_stage + descriptor_reads(ta, base, x, k) // 4]
                    assert got == want(a, m0 + group * 64 + x, k0 + step * 8 + k), (step, group, x, k)
        base = 4 * step * tb.k_step
        for x in range(tn):
            for k in range(tb.mma_k):
                got = smem[b_kmajor + descriptor_reads(tb, base, x, k) // 4]
                assert got == want(b, k0 + step * 8 + k, n0 + x), (step, x, k)


def _source(point, dims, schedule=TMA):
    kernel = load_example("matmul_tf32.phk")
    return generate_source(kernel, binding.bind(kernel, dims, None, point), schedule=schedule)


def test_tma_tf32_loop_waits_rounds_fences_then_multiplies():
    """The consumer loop: wait for the stage, round A in place, turn B, proxy fence, the
    consumers' barrier, the wgmma group, wait for group i - 1, release its stage, barrier; no
    CTA-wide barrier; the maps are f32 boxes of 32 (A: TILE_M rows; B: 32 k rows, one copy per
    32 columns); the ring is cut to the 3 stages that fit at 128 x 256."""
    g = _source({"TILE_M": 128, "TILE_N": 256, "TILE_K": 32}, {"M": 1000, "N": 996, "K": 1000})
    assert g.block == (384, 1, 1)
    assert g.tensor_maps == (
        MapSpec("tm_a", "A", 128, 32, 1000, 1000, elem_bytes=4),
        MapSpec("tm_b", "B", 32, 32, 1000, 996, elem_bytes=4),
    )
    assert g.source.count("tma_load_2d(") == 1 + 1 + 256 // 32  # the prelude's definition, A, B
    assert "mbar_expect_bytes(" in g.source and ", 49152);" in g.source  # 3 stages: j_ % 3
    assert "const int s_ = j_ % 3;" in g.source
    body = g.source[g.source.index("setmaxnreg.inc") : g.source.index("wg_wait_all();")]
    assert "__syncthreads" not in body and "cp.async" not in body
    order = [
        r"mbar_wait\(bar_\w+ \+ 8 \* \(it_\w+ % 3\)",
        r"make_uint4\(tf32_of\(v_\.x\)",  # A in place
        r"\*reinterpret_cast<const float4\*>\(raw_\w+ \+",  # B's raw loads
        r"\(kmajor_\w+ \+ \(it_\w+ % 2\) \* 8192\)",  # B's K-major stores
        r"fence_async_smem\(\);",
        r"bar\.sync 1, 256;",
        r"wgmma\.mma_async\.sync\.aligned\.m64n256k8\.f32\.tf32\.tf32",
        r"wg_commit_wait_one\(\);",
        r"mbar_arrive\(bar_\w+ \+ 8 \* \(3 \+ \(\(it_\w+ - 1\) % 3\)\)\)",
        r"bar\.sync 1, 256;",
    ]
    pos = 0
    for pat in order:
        found = re.compile(pat).search(body, pos)
        assert found, (pat, body[pos : pos + 400])
        pos = found.end()
    assert body.count("wgmma.mma_async") == 4


@pytest.mark.parametrize(
    "point,dims,why",
    [
        ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 16}, {"M": 512, "N": 512, "K": 512}, "k = 32"),
        ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, {"M": 512, "N": 510, "K": 512}, "16-byte rows"),
    ],
)
def test_what_the_tma_tf32_ring_cannot_take_is_pruned(point, dims, why):
    with pytest.raises(CompileError, match="is pruned: TF32 bulk tensor copies take") as e:
        _source(point, dims)
    assert why in e.value.message


def test_the_register_ring_is_unchanged_without_tma():
    """Schedule.tma is what picks this path; without it TF32 keeps the register-staged ring."""
    g = _source(
        {"TILE_M": 128, "TILE_N": 256, "TILE_K": 32}, {"M": 1024, "N": 1024, "K": 1024}, Schedule(wgmma=True)
    )
    assert not g.tensor_maps and "__ldg(reinterpret_cast<const float4*>" in g.source


@pytest.mark.parametrize("tma_on", [True, False])
def test_tuner_searches_the_tma_tf32_ring_beside_the_register_ring(monkeypatch, tmp_path, tma_on):
    """The TF32 warpgroup family (timings made up, no GPU): the register-staged ring at 3 stages
    in both CTA orders and, unless PHOBOS_CUDA_TMA=0, the TMA ring at 4 and 6 stages."""
    from compiler.cuda import autotune

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PHOBOS_CUDA_TMA", "1" if tma_on else "0")
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    monkeypatch.setattr(autotune, "_inputs", lambda kernel, env: (None, None))
    asked = []

    def fake_measure(kernel, dims, candidates, tf32, inputs, log):
        asked.append(list(candidates))
        return [((tuple(sorted(p.items())), s), 1.0 + 0.01 * p["TILE_M"]) for p, s in candidates], []

    monkeypatch.setattr(autotune, "_measure", fake_measure)
    autotune.tune(load_example("matmul_tf32.phk"), {"M": 1024, "N": 1024, "K": 1024})
    family = {s for _, s in asked[-1]}
    assert all(s.wgmma for s in family)
    assert {(s.stages, s.order) for s in family if not s.tma} == {(3, "row"), (3, "grouped")}
    want = {(n, o) for n in (4, 6) for o in ("row", "grouped")} if tma_on else set()
    assert {(s.stages, s.order) for s in family if s.tma} == want
