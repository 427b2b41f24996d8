"""CI checks of the attention leaves' generated CUDA that need no GPU: warpgroup MMA's waits in
the plain and the rotated loop, P packed as it is, exp as exp2 of one fma, and the causal mask
tested once per key block where it holds on the whole block (compiler/cuda/uniform.py)."""

from __future__ import annotations

import dataclasses
import re

from cuda_cases import EXAMPLES, load_example

from compiler.cuda.compiled import compile_kernel
from compiler.cuda.schedule import Schedule
from compiler.frontend import binding
from compiler.frontend import load as frontend

WG = Schedule(wgmma=True, stages=4)


def _attention_source(name: str, schedule: Schedule, point=None) -> str:
    kernel = load_example(name)
    b = binding.bind(kernel, {"H": 2, "N": 1000, "D": 64}, None, point or {"BR": 128, "BC": 64})
    return compile_kernel(kernel, b, schedule=schedule).cuda_source


def test_warpgroup_attention_starts_s_from_scale_d_and_packs_p_as_it_is():
    """Warpgroup MMA attention, not rotated: S = Q K^T starts from scale-d 0 (no zeroed
    accumulator registers, which would make ptxas serialize a rotated loop), both dots wait
    for their group; P goes into fragments without a rounded copy, and exp is exp2 of one fma."""
    for name in ("mha_bf16.phk", "causal_mha_bf16.phk"):
        src = _attention_source(name, Schedule(wgmma=True, stages=4))
        body = src[src.index("for (int u_j_") :]
        s_dot, pv_dot = body.index("m64n64k16"), body.index("a from registers")
        assert body.index("wg_commit_wait();", s_dot) < pv_dot and "wg_commit_wait();" in body[pv_dot:]
        assert "setp.ne.b32 p, 0, 0;" in body[s_dot:pv_dot] and "= 0.0f;" not in body[:s_dot]
        assert "bf16_to_f32(f32_to_bf16(" not in body and "pack_bf16x2(u_p_" in body
        assert "exp2f(fmaf(" in body and "expf(" not in body


def test_rotated_attention_issues_p_v_after_the_next_s():
    """Schedule.rotate: the deferred P V only packs its fragments and keeps its V stage; the
    next iteration issues it right after S's commit and waits for S alone (wait_group 1); the
    statement that rescales acc first waits for all; after the loop the last P V is issued."""
    src = _attention_source("mha_bf16.phk", Schedule(wgmma=True, stages=4, rotate=True))
    loop, after = src.index("for (int u_j_"), src.rindex("if (kept_b_")
    body, tail = src[loop:after], src[after : src.rindex("wg_wait_all();")]
    kept = body.index("if (kept_b_", body.index("wg_commit();"))
    assert body.index("a0_ = kept_a_", kept) < body.index("wg_commit(); wg_wait_one();", kept)
    assert body.index("} else {", kept) < body.index("wg_wait_all();", kept)
    rescale = body.index("acc = acc * expand(correction")
    assert body.index("wg_wait_all();", rescale) < body.index("u_acc_5[_i][_j] = (u_acc_5", rescale)
    assert "= pack_bf16x2(u_p_" in body[rescale:] and "wgmma.mma_async" not in body[rescale:]
    assert "a0_ = kept_a_" in tail and "wgmma.mma_async" in tail and "wg_commit();" in tail


def test_rotation_leaves_kernels_without_a_loop_of_dots_alone():
    """Schedule.rotate changes nothing in matmul (one dot in its loop)."""
    kernel = load_example("matmul_bf16.phk")
    point = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}
    b = binding.bind(kernel, {"M": 512, "N": 512, "K": 512}, None, point)
    plain, rotated = (
        compile_kernel(kernel, b, schedule=Schedule(wgmma=True, stages=4, rotate=r)).cuda_source
        for r in (False, True)
    )
    assert rotated == plain


def _source_of(text: str, schedule: Schedule) -> str:
    kernel = frontend.load_text(text, "k.phk").kernel()
    b = binding.bind(kernel, {"H": 2, "N": 1000, "D": 64}, None, {"BR": 128, "BC": 64})
    return compile_kernel(kernel, b, schedule=schedule).cuda_source


def test_causal_mask_is_tested_once_per_key_block():
    """`where(cols <= rows and cols < N, ...)`: one test per block from the ends of the aranges
    (the block's last key against the tile's first query and against N) picks the unmasked
    copy of the scores; the masked copy stays for the blocks on the diagonal. Full attention,
    whose mask is a bool let, and the f32 kernels keep the per-element select only."""
    for schedule in (Schedule(), WG):
        src = _attention_source("causal_mha_bf16.phk", schedule)
        body = src[src.index("for (int u_j_") :]
        test = body[body.index("const bool whole_") : body.index("\n", body.index("const bool whole_"))]
        assert "(u_j_" in test and "(c_BC - 1)) <= (u_row_" in test and "< c_N)" in test, test
        plain, masked = body.index("if (whole_"), body.index("} else {", body.index("if (whole_"))
        assert "? (v_" not in body[plain:masked] and "u_rows_" in body[masked : masked + 900]
    assert "whole_" not in _attention_source("mha_bf16.phk", WG)
    f32 = load_example("causal_attention.phk")
    dims = {d: 512 for d in binding.kernel_dims(f32)} | {"D": 64}
    assert "whole_" not in compile_kernel(f32, binding.bind(f32, dims, None, None)).cuda_source


def test_masks_outside_the_affine_form_stay_per_element():
    """A product of two index tiles, or `or`, has no tile-wide test: the select stays."""
    text = (EXAMPLES / "causal_mha_bf16.phk").read_text()
    assert "whole_" in _source_of(text, WG)
    old = "cols <= rows and"
    for new in ("cols * cols <= rows and", "cols <= rows or"):
        assert old in text
        assert "whole_" not in _source_of(text.replace(old, new), WG)



PINGPONG = Schedule(wgmma=True, stages=5, rotate=True, pingpong=True, late_copies=True)
TAKE = "if ((th_warp >> 2) == 0) turn_wait<2>(); else turn_wait<3>();"
PASS = "if ((th_warp >> 2) == 0) turn_pass<3>(); else turn_pass<2>();"


def test_pingpong_hands_the_ring_over_by_mbarriers_and_takes_turns():
    """Schedule.pingpong (mainloops/pingpong/handover.py): no CTA-wide barrier and no cp.async group wait in
    the loop; each iteration releases iteration it - 2's stage (one arrival per warp), waits until its own
    stage is full, and takes its turn before S = Q K^T; the turn passes after the carried P V is issued (or,
    in the first iteration, before the wait); a refill waits until its stage was released and each thread's
    copies arrive on the stage's full barrier (one per thread); warpgroup 1 passes first and warpgroup 0 takes
    the last turn after the loop."""
    last = "if ((th_warp >> 2) == 0) turn_wait<2>();  // warpgroup 1's last pass"
    for name in ("mha_bf16.phk", "causal_mha_bf16.phk"):
        src = _attention_source(name, PINGPONG, {"BR": 128, "BC": 32})
        loop, after = src.index("for (int u_j_"), src.rindex(last)
        head, body, tail = src[src.index("mbar_init(bar_") : loop], src[loop:after], src[after:]
        assert ", 256);" in head and ", 8);" in head  # full: one arrival per thread; empty: per warp
        # copies run stages - 3 = 2 iterations ahead: two fills before the loop, no cp.async groups
        assert head.count("cp_async_mbar_arrive(bar_") == 2 and "cp_async_commit();" not in head
        assert head.rindex("turn_pass<2>();") > head.rindex("cp_async_mbar_arrive(")
        for barrier in ("__syncthreads", "cp_async_wait", "cp_async_commit"):
            assert barrier not in body, barrier
        release = body.index("- 2) % 5)")
        full = body.index("mbar_wait(bar_", release)
        turn = body.index(TAKE, full)
        assert body.index("fence_async_smem();", full) < turn < body.index("wg_fence();")
        assert body.index("wg_fence();") < body.index("wgmma.mma_async")
        kept = body.index("if (kept_b_")
        issued = body.index(f"wg_commit(); {PASS} wg_wait_one();", kept)
        assert issued < body.index(f"{PASS} wg_wait_all();", kept)  # the first iteration passes too
        refill = body.index("if ((it_")  # the refill of iteration it + 2 waits for iteration it - 3's release
        assert "+ 2) >= 5) mbar_wait(bar_" in body[refill : refill + 60]
        assert refill < body.index("cp_async16(", refill) < body.index("cp_async_mbar_arrive(bar_", refill)
        assert body.rstrip().endswith("}") and "wgmma" in tail and "turn_" not in tail[len(last) :]


def test_pingpong_prunes_what_it_cannot_take():
    """Ping-pong needs a rotated warpgroup-MMA loop of two dots on two warpgroups."""
    import pytest

    from compiler.frontend.diagnostics import CompileError

    loop = "rotated warpgroup-MMA loop"
    cases = [
        (Schedule(wgmma=True, stages=5, pingpong=True), None, loop),
        (Schedule(stages=5, rotate=True, pingpong=True), None, loop),
        (dataclasses.replace(PINGPONG, threads=512), {"BR": 256, "BC": 32}, "two warpgroups"),
        (PINGPONG, {"BR": 64, "BC": 64}, "two warpgroups"),
    ]
    for schedule, point, why in cases:
        with pytest.raises(CompileError, match=why):
            _attention_source("mha_bf16.phk", schedule, point)
    with pytest.raises(CompileError, match=loop):  # TF32 attention has no warpgroup MMA loop
        _attention_source("mha_tf32.phk", PINGPONG, {"BR": 128, "BC": 64})
    kernel = load_example("matmul_bf16.phk")
    point = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}
    b = binding.bind(kernel, {"M": 512, "N": 512, "K": 512}, None, point)
    with pytest.raises(CompileError, match=loop):
        compile_kernel(kernel, b, schedule=PINGPONG)


def test_four_warpgroups_take_64_rows_each_and_share_the_copies():
    """BR = 256 on 512 threads (Schedule.threads = WIDE_THREADS): warpgroup w reads Q's rows
    64 w .. 64 w + 63 through its descriptor, each warp's accumulator rows are 16 per warp in
    order, and the 512 threads share the copies (Q: 8 chunks each, a K or V tile of 32 keys at
    D = 128: one each); the grid has one CTA per 256 queries."""
    from compiler.cuda.schedule import WIDE_THREADS

    kernel = load_example("mha_bf16.phk")
    b = binding.bind(kernel, {"H": 2, "N": 1000, "D": 128}, None, {"BR": 256, "BC": 32})
    c = compile_kernel(kernel, b, schedule=Schedule(wgmma=True, stages=4, threads=WIDE_THREADS, rotate=True))
    src = c.cuda_source
    assert c.block == (512, 1, 1) and c.grid[:2] == (4, 2) and "__launch_bounds__(512)" in src
    assert "(th_warp / 4) * 8192, 128, 2048, 0)" in src  # 64 rows x 128 columns per warpgroup
    assert "th_r = (th_warp / 1) * 8 + (th_lane >> 2);" in src
    assert "_r = ((th_r / 8) * 16 + ((_i) / 2) * 16 + ((_i) % 2) * 8 + th_r % 8);" in src
    copies = re.findall(r"for \(int it_ = 0; it_ < (\d+); \+\+it_\) \{\n\s+const int e_ = it_ \* 512", src)
    assert copies[0] == "8" and set(copies[1:]) == {"1"}, copies
