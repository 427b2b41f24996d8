"""Attention fed by a producer warpgroup's bulk tensor copies (mainloops/tma_ws/ring.py on a rotated loop of
two dots, Schedule.tma + rotate, ping-pong or not), on the CPU: the generated structure, what is pruned, and a
layout check read back from the generated code: the boxes the producer's copies write (3-D tensor maps, the
128-byte swizzle and zero fill as the PTX ISA describes them) hold, where each wgmma descriptor of the
consumers reads, the right K or V element, at ragged N too, and the masks are those of the cp.async loop."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest
from cuda_cases import descriptor_reads, load_example

from compiler.cuda.compiled import compile_kernel
from compiler.cuda.mainloops.tma_ws.maps import MapSpec, geometry
from compiler.cuda.schedule import WIDE_THREADS, Schedule
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError

TMA = Schedule(wgmma=True, stages=4, rotate=True, tma=True)
TMA_PP = dataclasses.replace(TMA, pingpong=True)


def _compiled(name: str, schedule: Schedule, dims: dict, point: dict):
    kernel = load_example(name)
    return compile_kernel(kernel, binding.bind(kernel, dims, None, point), schedule=schedule)


def _loop(src: str) -> str:
    return src[src.index("for (int u_j_") :]


@pytest.mark.parametrize("name", ["mha_bf16.phk", "causal_mha_bf16.phk", "mha_f16.phk"])
def test_producer_brings_k_and_v_by_3d_boxes_and_consumers_only_wait(name):
    """384 threads: the producer warpgroup walks the consumers' loop bound, one 3-D box per 64
    columns of K and of V into one stage, announced on full[s] and released by each consumer
    warp once the carried P V that read it is done; the consumers issue no copy in the loop and
    meet at no CTA-wide barrier; Q is staged before the split by the consumers' threads only."""
    dims = {"H": 3, "N": 1000, "D": 128}
    c = _compiled(name, TMA_PP, dims, {"BR": 128, "BC": 64})
    src = c.cuda_source
    k_map, v_map = c.tensor_maps  # named after the lets (causal's are hoisted: k_tile1, ...)
    assert c.block == (384, 1, 1) and c.params[-2:] == (k_map.param, v_map.param)
    assert (k_map, v_map) == (
        MapSpec(k_map.param, "K", 64, 64, 1000, 128, outer=(3,)),
        MapSpec(v_map.param, "V", 64, 64, 1000, 128, outer=(3,)),
    )
    producer = src[src.index("if (th_id == 256)") : src.index("return;")]
    stop = re.search(r"for \(int u_j_\d+ = \(?[^;]*; u_j_\d+ < (\w+);", src).group(1)
    assert re.search(rf"kp_\d+ < {stop};", producer), "the producer walks the consumers' bound"
    boxes = re.findall(
        r"tma_load_3d\(ring_\d+ \+ s_ \* 8192 \+ (\d+), &(\w+), 0 \+ (\d+), kp_\d+, u_head", producer
    )
    k, v = k_map.param, v_map.param
    assert boxes == [("0", k, "0"), ("4096", k, "64"), ("0", v, "0"), ("4096", v, "64")]
    assert "mbar_expect_bytes(bar_" in producer and ", 32768);" in producer  # 2 x 64 x 128 x 2 bytes
    assert "setmaxnreg.dec.sync.aligned.u32 40" in src and "setmaxnreg.inc.sync.aligned.u32 232" in src
    q_copy = src[: src.index("const int stop_")]
    assert q_copy.count("if (th_id < 256) {") == 1 and "cp_async16(" in q_copy
    loop = _loop(src)[: _loop(src).index("turn_wait<2>();  // warpgroup 1's last pass")]
    assert "__syncthreads" not in loop and "cp_async" not in loop and "tma_load" not in loop
    full = loop.index("mbar_wait(bar_")
    assert full < loop.index("turn_wait<2>(); else turn_wait<3>();") < loop.index("wgmma.mma_async")
    release = r"if \(it_\d+ > 0 && th_lane == 0\) mbar_arrive\(bar_\d+ \+ 8 \* \(4 \+ \(\(it_\d+ - 1\) % 4"
    assert re.search(release + r"\)\)\);\n  }", loop)  # at the end of the body
    assert loop.rindex("wg_wait_all();") < loop.index("mbar_arrive(")  # P V of it - 1 done first


def test_without_turns_the_consumers_only_wait_on_the_ring():
    src = _compiled("mha_bf16.phk", TMA, {"H": 2, "N": 512, "D": 64}, {"BR": 128, "BC": 64}).cuda_source
    assert "turn_" not in src and src.count("tma_load_3d(ring_") == 2  # one 64-wide box of K, of V
    assert "tma_load_3d(void*" in src and "tma_load_2d(ring" not in src


def _pruned(name, schedule, dims, point) -> str:
    with pytest.raises(CompileError) as e:
        _compiled(name, schedule, dims, point)
    assert "is pruned" in e.value.message, e.value.message
    return e.value.message


def test_what_the_tma_attention_ring_cannot_take_is_pruned():
    dims = {"H": 2, "N": 512, "D": 128}
    assert "rotated loop of two" in _pruned("mha_bf16.phk", dataclasses.replace(TMA, rotate=False), dims, {})
    assert "two warpgroups" in _pruned("mha_bf16.phk", TMA_PP, dims, {"BR": 64, "BC": 64})
    wide = dataclasses.replace(TMA, threads=WIDE_THREADS)
    assert "one or two consumer warpgroups" in _pruned("mha_bf16.phk", wide, dims, {"BR": 256, "BC": 32})
    # one consumer warpgroup (BR = 64) without turns: 256 threads, no register hand-over
    c = _compiled("mha_bf16.phk", TMA, dims, {"BR": 64, "BC": 64})
    assert c.block == (256, 1, 1) and "setmaxnreg" not in c.cuda_source


def test_3d_tensor_maps_step_over_rows_then_heads():
    spec = MapSpec("tm_k", "K", 64, 64, 1000, 128, outer=(3,))
    assert geometry(spec) == ((128, 1000, 3), (256, 256 * 1000), (64, 64, 1))
    assert spec.rank == 3 and spec.elements == 3 * 1000 * 128
    assert geometry(MapSpec("tm_a", "A", 128, 64, 1000, 776)) == ((776, 1000), (1552,), (64, 128))


# -- the layout check: box writes against descriptor reads -----------------------------------------


def _swizzle(a: int) -> int:
    """The 128-byte swizzle: the 16-byte chunk (address bits 4-6) XOR bits 7-9 (PTX ISA)."""
    return a ^ (((a >> 7) & 7) << 4)


def _args(call: str) -> list[str]:
    return [x.strip() for x in call[call.index("(") + 1 : call.rindex(")")].split(",")]


def _stage_after_boxes(src: str, spec: MapSpec, ring: str, j: int, head: int) -> dict:
    """Byte address in the stage -> (head, row, col) of the source element, or None where the
    box reaches past the tensor (zero fill): every box the producer writes into `ring`."""
    sizes, _, box = geometry(spec)
    producer = src[src.index("if (th_id ==") : src.index("return;")]
    stage = {}
    for line in (x.strip() for x in producer.splitlines()):
        if not line.startswith(f"tma_load_3d({ring} "):
            continue
        dst, _, c0, c1, c2, _ = _args(line)
        at = int(dst.split("+")[2]) if dst.count("+") == 2 else 0
        ev = [eval(re.sub(r"kp_\d+", str(j), re.sub(r"u_head_\d+", str(head), c))) for c in (c0, c1, c2)]  # noqa: S307
        for r in range(box[1]):
            for col in range(box[0]):
                el = (ev[2], ev[1] + r, ev[0] + col)  # (head, row, column)
                inside = all(0 <= v < n for v, n in zip(el[::-1], sizes, strict=True))
                stage[_swizzle(2 * at + r * 128 + col * 2)] = el if inside else None
    return stage


def _descriptor_steps(loop: str, base: str) -> list[tuple[list[str], int]]:
    """Each k step's b descriptor of the dots whose tile starts at `base` (a C name prefix):
    (the arguments of wg_desc at the tile's start, the step's added 16-byte units)."""
    steps, start = [], None
    for line in (x.strip() for x in loop.splitlines()):
        if line.startswith("const unsigned long long db0_ = wg_desc("):
            start = _args(line[line.index("wg_desc(") : line.index(";")])
            start = start if start[0].startswith(base) else None
        elif line.startswith("const unsigned long long db_ = db0_ + ") and start is not None:
            steps.append((start, int(line.split("+")[1].rstrip(";"))))
    return steps


def _descriptor_reads(step: tuple[list[str], int], x: int, k: int, mn_major: bool) -> int:
    """The byte address (from the stage's start) at which one k step's descriptor reads operand
    element (x, k): the step's 16-byte units added to the start-address field, then the PTX
    ISA's canonical 128-byte swizzled layouts (cuda_cases.descriptor_reads) with the LBO and
    SBO the generated wg_desc call passes."""
    (start, lbo, sbo, swz), units = step
    off = units * 16 + (int(start.split("+")[1]) * 2 if "+" in start else 0)
    assert swz == "1"
    fields = SimpleNamespace(mn_major=mn_major, swizzled=True, lbo=int(lbo), sbo=int(sbo), elem_bytes=2)
    return descriptor_reads(fields, off, x, k)


@pytest.mark.parametrize("d,bc", [(64, 64), (64, 128), (128, 32), (128, 64), (128, 128)])
@pytest.mark.parametrize("name", ["mha_bf16.phk", "causal_mha_bf16.phk"])
def test_each_descriptor_reads_the_k_or_v_element_the_boxes_brought(name, d, bc):
    """S = Q K^T's b at k step s reads K[h, j + x, 16 s + k]; P V's b reads V[h, j + 16 s + k, x];
    rows past N (the last key block at N = 1000) read zeros, not the next head's rows."""
    n = 1000
    c = _compiled(name, TMA_PP, {"H": 2, "N": n, "D": d}, {"BR": 128, "BC": bc})
    src = c.cuda_source
    loop = _loop(src)[: _loop(src).index("// warpgroup 1's last pass")]
    k_ring = re.search(r"stage_\d+ = (ring_\d+) \+", loop).group(1)
    v_ring = [r for r in re.findall(r"tma_load_3d\((ring_\d+)", src) if r != k_ring][0]
    s_reads, pv_reads = _descriptor_steps(loop, "stage_"), _descriptor_steps(loop, "kept_b_")
    assert len(s_reads) == d // 16 and len(pv_reads) == bc // 16
    k_map, v_map = c.tensor_maps
    for head in (0, 1):
        for j in (0, (n // bc) * bc):  # the first block and the ragged last one
            k_stage = _stage_after_boxes(src, k_map, k_ring, j, head)
            v_stage = _stage_after_boxes(src, v_map, v_ring, j, head)
            for s, line in enumerate(s_reads):
                for x in range(bc):
                    for k in range(16):
                        want = (head, j + x, 16 * s + k) if j + x < n else None
                        assert k_stage[_descriptor_reads(line, x, k, False)] == want, (s, x, k)
            for s, line in enumerate(pv_reads):
                for x in range(d):
                    for k in range(16):
                        want = (head, j + 16 * s + k, x) if j + 16 * s + k < n else None
                        assert v_stage[_descriptor_reads(line, x, k, True)] == want, (s, x, k)


def _masks(src: str) -> list[str]:
    """The loop's mask and bound lines, fresh-name numbers dropped."""
    loop = _loop(src)
    lines = [x.strip() for x in loop.splitlines() if "c_N" in x or "u_row" in x or "<= " in x]
    return [re.sub(r"_\d+\b", "", x) for x in lines]


@pytest.mark.parametrize("name", ["mha_bf16.phk", "causal_mha_bf16.phk"])
def test_the_masks_are_those_of_the_cp_async_loop(name):
    """The ragged-N mask (full) and the causal mask with its once-per-block test (uniform.py)
    read the same loop variable and bounds whether K and V come by TMA or by cp.async."""
    dims, point = {"H": 2, "N": 1000, "D": 128}, {"BR": 128, "BC": 64}
    tma = _masks(_compiled(name, TMA_PP, dims, point).cuda_source)
    plain = _masks(
        _compiled(name, Schedule(wgmma=True, stages=5, rotate=True, pingpong=True), dims, point).cuda_source
    )
    plain = [x for x in plain if "ahead" not in x and "cp_async" not in x]
    assert tma == plain and tma, (tma, plain)
    if "causal" in name:
        assert any("<=" in x for x in tma)
