"""TF32 warpgroup MMA on the TMA ring by role swap (compiler/cuda/mainloops/tma_ws/tf32.py), without a GPU: a
model of the copies, the fragment loads, the wgmma (C^T = B^T A^T) and the epilogue's staging,
run over the generator's own index expressions; and the generated loop's structure."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
from cuda_cases import descriptor_reads, load_example

from compiler.cuda.compiled import generate_source
from compiler.cuda.mainloops.tma_ws import tf32 as tma_tf32
from compiler.cuda.mainloops.tma_ws.maps import MapSpec
from compiler.cuda.mainloops.wgmma.mma import CoreTile
from compiler.cuda.schedule import Schedule
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError
from compiler.interp.values import round_to

TMA = Schedule(wgmma=True, stages=4, order="grouped", tma=True)
BOX = tma_tf32.BOX


def _at(expr: str, **env) -> int:
    return eval(_index_code(expr), env)  # noqa: S307  (the generator's C index arithmetic)


@functools.cache
def _index_code(expr: str):
    """An index expression compiled once: the model evaluates each one for every warp and lane
    (compiling its text at each of 440,000 evaluations took most of this file's time)."""
    return compile(expr.replace("/", "//"), "<index>", "eval")


def _box(smem, word: int, src, r0: int, c0: int, rows: int) -> None:
    """A bulk tensor copy through a TFLOAT32 map of a box of `rows` x 32 f32 with the 128-byte
    swizzle, written out from the PTX ISA independently of the generator: byte a of the box lands
    at a ^ (((a >> 7) & 7) << 4) from a 1024-byte-aligned `word`; elements outside `src` arrive
    as zeros; every value is rounded to TF32 as the language rounds (what the copy does, measured
    on the H200: to nearest, ties to even)."""
    assert word % 256 == 0
    window = round_to("tf32", src[r0 : r0 + rows, c0 : c0 + BOX])
    for r in range(rows):
        for c in range(BOX):
            inside = r0 + r < src.shape[0] and c0 + c < src.shape[1]
            a = r * 128 + c * 4
            v = window[r, c] if inside else 0.0
            smem[word + (a ^ (((a >> 7) & 7) << 4)) // 4] = v


def _fragments(smem, b_stage: int, threads: int, groups: int) -> tuple[dict, list[list[int]]]:
    """Each consumer warpgroup's register a (B^T) of the 4 k steps, as the generated loads fill it
    (frag_k, frag_n, raw_offset): {warpgroup: [64 rows][32 k]}; and per load instruction and
    warp, the word each lane reads."""
    a_of = {wg: np.full((64, BOX), np.nan) for wg in range(threads // 128)}
    reads = []
    for step in range(tma_tf32.STEPS):
        for q in range(4):
            for warp in range(threads // 32):
                words = []
                for lane in range(32):
                    wl = _at(tma_tf32.warp_along_n(groups, "w"), w=warp)
                    k = _at(tma_tf32.frag_k(step, q, "l"), l=lane)
                    n = _at(tma_tf32.frag_n(q % 2, "w", "l"), w=wl, l=lane)
                    word = b_stage + _at(tma_tf32.raw_offset(str(k), str(n), BOX))
                    row = 16 * (warp % 4) + lane // 4 + 8 * (q % 2)  # wgmma's register a layout
                    col = 8 * step + lane % 4 + 4 * (q // 2)
                    assert np.isnan(a_of[warp // 4][row, col])
                    a_of[warp // 4][row, col] = smem[word]
                    words.append(word)
                reads.append(words)
    return a_of, reads


def _stage_out(threads: int, groups: int, wn: int, d_of: dict, tn: int, tm: int) -> tuple:
    """`finish`'s stores of each thread's accumulator [h][j] (wgmma's D at row 16 w + g + 8 h,
    column acc_index(j)) into the staging [TILE_M][TILE_N + PAD]; and per store instruction and
    warp, the words."""
    ld = tn + tma_tf32.PAD
    out = np.full(tm * ld, np.nan)
    writes = []
    for h in range(2):
        for j in range(wn // 4):
            for warp in range(threads // 32):
                words = []
                for lane in range(32):
                    wl = _at(tma_tf32.warp_along_n(groups, "w"), w=warp)
                    m0 = _at(tma_tf32.first_m(groups, wn, "w"), w=warp)
                    m = m0 + _at(tma_tf32.acc_index(j, "l"), l=lane)
                    n = _at(tma_tf32.frag_n(h, "w", "l"), w=wl, l=lane)
                    word = m * ld + n
                    assert np.isnan(out[word])
                    d = d_of[warp // 4]
                    out[word] = d[16 * (warp % 4) + lane // 4 + 8 * h, 8 * (j // 2) + 2 * (lane % 4) + j % 2]
                    words.append(word)
                writes.append(words)
    return out.reshape(tm, ld)[:, :tn], writes


@pytest.mark.parametrize(
    "m,n,kdim,tm,tn,at",
    [
        (1000, 996, 1000, 256, 128, (3, 7, 31)),  # the last CTA along m and n, the last k tile
        (8192, 8192, 8192, 128, 128, (5, 9, 40)),
        (300, 260, 200, 64, 64, (4, 4, 6)),  # 128 threads: one warpgroup
        (1000, 996, 1000, 256, 64, (3, 15, 2)),  # two warpgroups along m (wgmma N = 128 each)
    ],
)
def test_the_swapped_wgmma_computes_a_tile_of_the_product(m, n, kdim, tm, tn, at):
    """For one k tile of one CTA (at or past the edges): the TMA boxes (modelled from the PTX
    ISA), each warpgroup's register fragments from the generated loads, the wgmma's b (A^T) from
    `descriptor_reads` at the generated stage offsets, the product in wgmma's accumulator layout
    and `finish`'s staging give round(A) round(B) of the tile, zero past the edges; and every
    fragment load and staging store instruction meets 32 distinct banks per warp."""
    g = _source({"TILE_M": tm, "TILE_N": tn, "TILE_K": 32}, {"M": m, "N": n, "K": kdim})
    threads = g.block[0] - 128
    groups = tn // 64
    wn = tm // (threads // 128 // groups)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, kdim)).astype(np.float32)
    b = rng.standard_normal((kdim, n)).astype(np.float32)
    pm, pn, kt = at[0] % -(-m // tm), at[1] % -(-n // tn), at[2] % -(-kdim // 32)
    m0, n0, k0 = pm * tm, pn * tn, kt * 32
    smem = np.full(BOX * (tm + tn), np.nan, np.float32)
    a_stage, b_stage = 0, BOX * tm
    _box(smem, a_stage, a, m0, k0, tm)  # A: one box of TILE_M rows
    for j in range(tn // BOX):  # B: 32-wide boxes of 32 k rows, as the producer issues them
        _box(smem, b_stage + j * BOX * BOX, b, k0, n0 + j * BOX, BOX)
    a_of, reads = _fragments(smem, b_stage, threads, groups)
    d_of = {}
    for wg, frag in a_of.items():
        first = _at(tma_tf32.first_m(groups, wn, "w"), w=4 * wg)
        tile = CoreTile("", "b", BOX, wn, "f32")
        bt = np.zeros((wn, BOX))
        for step in range(tma_tf32.STEPS):
            base = 4 * (a_stage + first * BOX + step * 8)
            for x in range(wn):
                for k in range(8):
                    bt[x, 8 * step + k] = smem[descriptor_reads(tile, base, x, k) // 4]
        d_of[wg] = frag.astype(np.float64) @ bt.T  # wgmma: D[64 x N] = a[64 x k] b^T
    got, writes = _stage_out(threads, groups, wn, d_of, tn, tm)
    ra = np.zeros((tm, BOX))
    rb = np.zeros((BOX, tn))
    sub_a = a[m0 : m0 + tm, k0 : k0 + BOX]
    sub_b = b[k0 : k0 + BOX, n0 : n0 + tn]
    ra[: sub_a.shape[0], : sub_a.shape[1]] = round_to("tf32", sub_a)
    rb[: sub_b.shape[0], : sub_b.shape[1]] = round_to("tf32", sub_b)
    np.testing.assert_allclose(got, ra @ rb, rtol=1e-12, atol=1e-12)
    for words in reads + writes:
        assert len({w % 32 for w in words}) == 32, words


def test_the_model_fails_on_a_broken_index(monkeypatch):
    """The model catches a fragment load without the swizzle (wrong values), a row order whose
    loads meet in fewer banks (the plain g + 8 h rows: right values, 4-way conflicts), and an
    accumulator column off by its pair."""
    case = (1000, 996, 1000, 256, 128, (3, 7, 31))
    good = tma_tf32.raw_offset

    def unswizzled(k, x, k_rows):
        return good(k, x, k_rows).replace(f"^ (({k}) % 8)", "^ 0")

    def plain_rows(h, warp, lane="th_lane"):
        return f"(({warp}) * 16 + (({lane}) >> 2) + {8 * h})"

    def pair_swapped(j, lane="th_lane"):
        return f"({8 * (j // 2) + 1 - j % 2} + 2 * (({lane}) & 3))"

    for name, broken in (("raw_offset", unswizzled), ("frag_n", plain_rows), ("acc_index", pair_swapped)):
        with monkeypatch.context() as mp:
            mp.setattr(tma_tf32, name, broken)
            with pytest.raises(AssertionError):
                test_the_swapped_wgmma_computes_a_tile_of_the_product(*case)


def _source(point, dims, schedule=TMA):
    kernel = load_example("matmul_tf32.phk")
    return generate_source(kernel, binding.bind(kernel, dims, None, point), schedule=schedule)


def test_tma_tf32_loop_loads_fragments_and_multiplies_with_no_rounding_or_barrier():
    """The consumer loop: wait for the stage; per k step, wait until 3 groups are in flight,
    4 fragment loads, fence, one wgmma (a from registers), commit; then release stage i - 1. No
    rounding, no barrier, no cp.async in the loop; TFLOAT32 maps (A: TILE_M rows of 32; B: 32
    k rows, one copy per 32 columns); the stage count as asked; after the loop C^T goes through
    shared memory into acc between consumer barriers."""
    g = _source({"TILE_M": 256, "TILE_N": 128, "TILE_K": 32}, {"M": 1000, "N": 996, "K": 1000})
    assert g.block == (384, 1, 1)
    assert g.tensor_maps == (
        MapSpec("tm_a", "A", 256, 32, 1000, 1000, dtype="tf32"),
        MapSpec("tm_b", "B", 32, 32, 1000, 996, dtype="tf32"),
    )
    assert g.source.count("tma_load_2d(") == 1 + 1 + 128 // 32  # the prelude's definition, A, B
    assert ", 49152);" in g.source and "const int s_ = j_ % 4;" in g.source
    body = g.source[g.source.index("setmaxnreg.inc") : g.source.index("wg_wait_all();")]
    for absent in ("__syncthreads", "bar.sync", "cp.async", "tf32_of", "cvt.", "fence_async_smem"):
        assert absent not in body, absent
    step = [
        r"wgmma\.wait_group\.sync\.aligned 3;",
        *[rf"frag_\w+\[\d\]\[{q}\] = __float_as_uint\(stage_\w+\[" for q in range(4)],
        r"wg_fence\(\);",
        r"wgmma\.mma_async\.sync\.aligned\.m64n256k8\.f32\.tf32\.tf32 \{[^}]*\}, \{%128, %129, %130, %131\}",
        r"wg_commit\(\);",
    ]
    order = [r"mbar_wait\(bar_\w+ \+ 8 \* \(it_\w+ % 4\)", *step * 4, r"mbar_arrive\(bar_\w+ \+ 8 \* \(4 \+"]
    pos = 0
    for pat in order:
        found = re.compile(pat).search(body, pos)
        assert found, (pat, body[pos : pos + 400])
        pos = found.end()
    assert body.count("wgmma.mma_async") == 4
    tail = g.source[g.source.index("wg_wait_all();") :]
    assert re.search(r"bar\.sync 1, 256;[^@]*ring_\w+\[\(m0_\w+ \+ \(0 \+ 2 \*", tail)
    assert re.search(r"u_acc_\w+\[_i\]\[_j\] \+= ring_\w+\[\(_r\) \* 130 \+ \(_c\)\];", tail)


@pytest.mark.parametrize(
    "point,dims,why",
    [
        ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 16}, {"M": 512, "N": 512, "K": 512}, "k = 32"),
        ({"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, {"M": 512, "N": 510, "K": 512}, "16-byte rows"),
        ({"TILE_M": 128, "TILE_N": 256, "TILE_K": 32}, {"M": 512, "N": 512, "K": 512}, "TILE_N in 64s"),
    ],
)
def test_what_the_tma_tf32_ring_cannot_take_is_pruned(point, dims, why):
    with pytest.raises(CompileError, match="is pruned: TF32 bulk tensor copies swap the roles") as e:
        _source(point, dims)
    assert why in e.value.message


def test_a_cta_without_a_whole_warpgroup_is_pruned():
    """matmul.phk's TF32 opt-in at 32x64 runs 64 threads: pruned (this once divided by zero,
    which would have stopped a tuning run instead of skipping the point)."""
    kernel = load_example("matmul.phk")
    b = binding.bind(kernel, {"M": 512, "N": 512, "K": 512}, None, {"TILE_M": 32, "TILE_N": 64, "TILE_K": 32})
    with pytest.raises(CompileError, match="is pruned: TF32 bulk tensor copies swap the roles") as e:
        generate_source(kernel, b, tf32=True, schedule=TMA)
    assert "at least one warpgroup" in e.value.message


def test_the_register_ring_is_unchanged_without_tma():
    """Schedule.tma is what picks this path; without it TF32 keeps the register-staged ring."""
    g = _source(
        {"TILE_M": 128, "TILE_N": 256, "TILE_K": 32}, {"M": 1024, "N": 1024, "K": 1024}, Schedule(wgmma=True)
    )
    assert not g.tensor_maps and "__ldg(reinterpret_cast<const float4*>" in g.source


@pytest.mark.parametrize("tma_on", [True, False])
def test_tuner_searches_the_tma_tf32_ring_as_a_family_of_its_own(monkeypatch, tmp_path, tma_on):
    """The TF32 families (timings made up, no GPU): the register-staged ring at 3 stages in both
    CTA orders and, unless PHOBOS_CUDA_TMA=0, the TMA ring, probed at every tile point (its tile
    shapes are not the register ring's) and searched at 4 and 6 stages in both orders."""
    from compiler.cuda.schedule import TF32_TMA_PROBE
    from compiler.cuda.tuning import autotune

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PHOBOS_CUDA_TMA", "1" if tma_on else "0")
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    monkeypatch.setattr(autotune, "tuning_inputs", lambda kernel, env: (None, None))
    asked = []

    def fake_measure(kernel, dims, candidates, tf32, inputs, log, model=False):
        asked.append(list(candidates))
        return [((tuple(sorted(p.items())), s), 1.0 + 0.01 * p["TILE_M"]) for p, s in candidates], []

    monkeypatch.setattr(autotune, "_measure", fake_measure)
    kernel = load_example("matmul_tf32.phk")
    autotune.tune(kernel, {"M": 1024, "N": 1024, "K": 1024})
    probes, *families = asked
    points = len(autotune.search_points(kernel))
    assert sum(s == TF32_TMA_PROBE for _, s in probes) == (points if tma_on else 0)
    register = {s for _, s in families[1]}
    assert all(s.wgmma and not s.tma for s in register)
    assert {(s.stages, s.order) for s in register} == {(3, "row"), (3, "grouped")}
    assert len(families) == (3 if tma_on else 2)
    if tma_on:
        ring = {s for _, s in families[2]} | {TF32_TMA_PROBE}
        assert all(s.wgmma and s.tma for s in ring)
        assert {(s.stages, s.order) for s in ring} == {(n, o) for n in (4, 6) for o in ("row", "grouped")}
