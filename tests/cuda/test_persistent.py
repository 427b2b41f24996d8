"""The persistent TMA ring on the CPU (compiler/cuda/mainloops/tma_ws/persistent.py): every case of
persistent_cases compiles through NVRTC and assembles for sm_90a without spills, on a grid of its CTA
count; the roles split once, before their tile loops; the ring's phases, run through a model of the
generated protocol, never let the producer overwrite a stage a consumer has not released nor a consumer
read one the producer has not filled, across tiles; what cannot take it or gains nothing is pruned with
its reason; the tuner searches it beside the one-CTA-per-tile ring."""

from __future__ import annotations

import dataclasses
import re
import shutil

import pytest
from cuda_cases import ptxas
from persistent_cases import CASES, case_id, schedule
from tma_store_cases import kernel

from common import options
from compiler.cuda import stages
from compiler.cuda.compiled import compile_kernel
from compiler.cuda.schedule import PERSISTENT_STAGES, Schedule, tensor_core_space
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError


def _generated(name, dims, point, sched):
    k = kernel(name)
    return stages.run(k, binding.bind(k, dims, None, point), stages.Options(False, sched, 90),
                      until="emit").generated


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize("tma_store", [False, True], ids=["plain", "tmast"])
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_every_case_compiles_on_its_grid_without_spills(case, tma_store, tmp_path):
    name, dims, point, ctas, order = case
    k = kernel(name)
    sched = schedule(ctas, tma_store, order=order)
    compiled = compile_kernel(k, binding.bind(k, dims, None, point), schedule=sched, cc=90)
    assert compiled.grid == (ctas, 1, 1)
    assert ("cp.async.bulk.tensor.2d.global.shared::cta" in compiled.ptx
            or "cp.async.bulk.tensor.3d.global.shared::cta" in compiled.ptx) == tma_store
    source = compiled.cuda_source
    # each role sets its registers once, before its own tile loop
    assert source.count("setmaxnreg.dec") <= 1 and source.count("setmaxnreg.inc") <= 1
    assert source.count("for (int tile_ = (int)blockIdx.x;") == 2
    if "setmaxnreg.inc" in source:  # the consumers' raise comes before their tile loop
        assert source.index("setmaxnreg.inc") < source.rindex("for (int tile_")
    report = ptxas(compiled.ptx, "sm_90a", tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report
    assert "are serialized" not in report and "setmaxnreg ignored" not in report, report


def test_a_grid_of_one_wave_is_pruned():
    """2 x 3 = 6 tiles on 6 CTAs: one tile each, nothing to overlap."""
    with pytest.raises(CompileError, match="pays only past one wave"):
        _generated("matmul_bf16.phk", {"M": 256, "N": 384, "K": 128},
                   {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, schedule(6, False))


def test_whole_waves_of_a_long_loop_are_pruned():
    """6 tiles on 3 CTAs (two waves) of 16384 / 64 = 256 iterations each: the epilogue is a small part."""
    with pytest.raises(CompileError, match="gain nothing from persistence"):
        _generated("matmul_bf16.phk", {"M": 256, "N": 384, "K": 16384},
                   {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, schedule(3, False))


def test_tf32_and_attention_rings_are_pruned():
    from tma_store_cases import TF32_POINTS

    point = TF32_POINTS[0][0]
    with pytest.raises(CompileError, match="not TF32's"):
        _generated("tf32", {"M": 2048, "N": 2048, "K": 256}, point, schedule(4, False))
    with pytest.raises(CompileError, match="a persistent grid takes a single dot's ring"):
        _generated("mha_bf16.phk", {"H": 4, "N": 1024, "D": 128}, {"BR": 128, "BC": 64},
                   dataclasses.replace(schedule(4, False), rotate=True))


def test_the_unchanged_ring_without_persistence():
    """Schedule.persistent = 0 is the ring as it was: one CTA per tile, no tile loop."""
    g = _generated("matmul_bf16.phk", {"M": 256, "N": 384, "K": 128},
                   {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, schedule(0, True))
    assert g.grid == (2, 3, 1) and "tile_" not in g.source and "ring_done_" not in g.source


def test_the_tuner_searches_it_at_the_gpus_multiprocessors(monkeypatch):
    from compiler.cuda import schedule as schedules
    from compiler.cuda.compiled import compiler_version

    monkeypatch.delenv("PHOBOS_CUDA_PERSISTENT", raising=False)
    searched = any(s.persistent for s in tensor_core_space(8, deep=True, sm_count=132))
    assert searched == schedules.PERSISTENT_TUNED  # on since its GPU tests passed
    plain = compiler_version()
    # against the default, either way: in or out of the search, and in the tuning caches' key
    monkeypatch.setenv("PHOBOS_CUDA_PERSISTENT", "0" if schedules.PERSISTENT_TUNED else "1")
    flipped = tensor_core_space(8, deep=True, sm_count=132)
    assert any(s.persistent for s in flipped) != schedules.PERSISTENT_TUNED
    assert compiler_version() == plain + ("-nopersist" if schedules.PERSISTENT_TUNED else "-persist")
    monkeypatch.setenv("PHOBOS_CUDA_PERSISTENT", "2")
    with pytest.raises(options.OptionError, match="PHOBOS_CUDA_PERSISTENT"):
        compiler_version()
    monkeypatch.setenv("PHOBOS_CUDA_PERSISTENT", "1")
    space = tensor_core_space(8, deep=True, sm_count=132)
    persistent = [s for s in space if s.persistent]
    want = {(n, st) for n in PERSISTENT_STAGES for st in (False, True)}
    assert {(s.stages, s.tma_store) for s in persistent} == want
    assert all(s.persistent == 132 and s.tma and s.wgmma for s in persistent)
    assert not any(s.persistent for s in tensor_core_space(8, deep=True))
    assert "-ps132" in persistent[0].key() and "-ps" not in Schedule(tma=True).key()


# ---- the ring's protocol, modelled ----------------------------------------------------------------

def _protocol(source: str) -> dict:
    """The stage count and the waits/arrivals of both roles, read off the generated code."""
    stages_n = int(re.search(r"mbar_init\(\w+ \+ 8 \* \((\d+) \+ s_\)", source).group(1))
    assert f"const int s_ = j_ring % {stages_n};" in source
    assert re.search(rf"if \(j_ring >= {stages_n}\) mbar_wait\(\w+ \+ 8 \* \({stages_n} \+ s_\), "
                     rf"\(\(j_ring / {stages_n}\) \+ 1\) & 1\);", source)
    assert re.search(rf"mbar_wait\(\w+ \+ 8 \* \((it_\d+) % {stages_n}\), \(\1 / {stages_n}\) & 1\);", source)
    assert re.search(r"const int (it_\d+) = ring_done_ \+ \(", source)
    # a tile's first iteration releases nothing; its last stage is released after the loop's last wait
    assert re.search(r"if \(u_kt_\d+ != first_\d+ && th_lane == 0\) mbar_arrive", source)
    last = rf"\({stages_n} \+ \(ring_done_ \+ trips_\d+ - 1\) % {stages_n}\)"
    assert re.search(rf"wg_wait_all\(\);\n\s*if \(trips_\d+ > 0 && th_lane == 0\) mbar_arrive\(\w+ \+ 8 \* "
                     rf"{last}\);\n\s*ring_done_ \+= trips_\d+;", source)
    return {"stages": stages_n}


def _run_model(stages_n: int, trips: list[int], consumer_lag: int = 3) -> None:
    """The generated protocol as a discrete simulation: mbarrier phases as counters, the producer's
    copies and the consumers' MMAs over a CTA's tiles of `trips` iterations each; the consumers
    lag the producer by `consumer_lag` steps at each epilogue. Asserts every wait's parity condition
    is exactly 'the stage holds the data of that iteration' (full) and 'it was released' (empty)."""
    full = [0] * stages_n  # completed phases of full[s]
    empty = [0] * stages_n  # completed phases of empty[s]
    total = sum(trips)
    filled, consumed, released = 0, 0, 0  # ring iterations
    holds = [None] * stages_n  # which ring iteration a stage holds
    tile_ends = set()
    acc = 0
    for t in trips:
        acc += t
        tile_ends.add(acc - 1)
    stall = 0
    steps = 0
    while released < total:
        steps += 1
        assert steps < 100 * total + 100, "deadlock"
        # the producer: wait(empty[s], ((j / S) + 1) & 1) for j >= S, i.e. phase j // S - 1 of empty[s] done
        if filled < total:
            j, s = filled, filled % stages_n
            if j < stages_n or empty[s] >= j // stages_n:
                assert holds[s] is None or holds[s] < released, "overwrote a stage not yet released"
                holds[s] = j
                full[s] += 1
                filled += 1
        # the consumers: wait(full[s], (i / S) & 1), phase i // S of full[s] done
        if stall:
            stall -= 1
            continue
        if consumed < total:
            i, s = consumed, consumed % stages_n
            if full[s] >= i // stages_n + 1:
                assert holds[s] == i, "read a stage not holding its iteration"
                consumed += 1
        # release i - 1 within a tile (after the next wgmma wait), the tile's last after its loop
        while released < consumed - 1 or (released == consumed - 1 and released in tile_ends):
            empty[released % stages_n] += 1
            if released in tile_ends:
                stall = consumer_lag  # the epilogue
            released += 1


@pytest.mark.parametrize("case", CASES[:3], ids=[case_id(c) for c in CASES[:3]])
def test_the_ring_phases_hold_across_tiles(case):
    name, dims, point, ctas, order = case
    g = _generated(name, dims, point, schedule(ctas, True, order=order))
    proto = _protocol(g.source)
    k_trips = -(-dims["K"] // point["TILE_K"])
    tiles = -(-dims["M"] // point["TILE_M"]) * -(-dims["N"] // point["TILE_N"])
    for lag in (0, 1, 7):
        _run_model(proto["stages"], [k_trips] * -(-tiles // ctas), lag)
    _run_model(proto["stages"], [1, 1, 2, 1, proto["stages"] + 1, 3], 2)  # loops shorter than the ring


# ---- the TMA store box by box ---------------------------------------------------------------------

def _evaluate(c_expr: str, env: dict) -> int:
    """A C integer expression of the generated code (non-negative operands: / and % as Python's)."""
    return eval(c_expr.replace("/", "//"), {}, dict(env))  # noqa: S307 - our own generated text


def _box_writes(source: str, consumers: int):
    """(box, row, col, byte address from the buffers' start) of every pair the epilogue writes, and the
    box each bulk store reads (its buffer offset), read off the generated code itself."""
    head = dict(re.findall(r"const int (th_r|th_c) = (.*);", source))
    body = source[source.index("box by box"):]
    line = r"([^\n]*)"
    loops = re.findall(rf"for \(int _j = (\d+); _j < (\d+); _j \+= 2\) \{{\n\s*const int _c = {line};\n.*?"
                       rf"_i < (\d+); \+\+_i\) \{{\n\s*const int _r = {line};\n\s*"
                       r"\*reinterpret_cast<(?:unsigned|float2)\*>\(epi_\d+ \+ ([^\n]*?)\) = ", body, re.S)
    stores = [int(x) for x in re.findall(r"tma_store_\dd\(&tms_\w+, epi_\d+ \+ (\d+),", body)]
    out = []
    for box, (j0, j1, c_expr, count_i, r_expr, addr) in enumerate(loops):
        for t in range(consumers):
            env = {"th_warp": t >> 5, "th_lane": t & 31}
            env |= {n: _evaluate(e.replace(", th_lane = th_id & 31", ""), env) for n, e in head.items()}
            for i in range(int(count_i)):
                for j in range(int(j0), int(j1), 2):
                    at = {**env, "_i": i, "_j": j}
                    at["_r"], at["_c"] = _evaluate(r_expr, at), _evaluate(c_expr, at)
                    out.append((box, at["_r"], at["_c"], _evaluate(addr, at)))
    return out, stores


@pytest.mark.parametrize("name,elem", [("linear_relu", 2), ("matmul_bf16.phk", 4)])
@pytest.mark.parametrize("point", [{"TILE_M": 128, "TILE_N": 256, "TILE_K": 64},
                                   {"TILE_M": 64, "TILE_N": 128, "TILE_K": 64}], ids=["128x256", "64x128"])
def test_each_box_lands_in_its_buffer_in_the_maps_swizzle_once(name, elem, point):
    gen = _generated(name, {"M": 1024, "N": 1024, "K": 128}, point, schedule(4, True))
    rows, cols = point["TILE_M"], point["TILE_N"]
    writes, stores = _box_writes(gen.source, gen.block[0] - 128)
    per_box, box_bytes = 128 // elem, rows * 128
    assert len(stores) == cols // per_box
    seen = set()
    for box, r, c, a in writes:
        assert c // per_box == box  # each loop writes its box's columns only
        o = r * 128 + (c % per_box) * elem  # the box's row-major byte, before the swizzle
        assert a == (box % 2) * box_bytes + (o ^ (((o >> 7) & 7) << 4)), (box, r, c, a)
        assert stores[box] == (box % 2) * box_bytes  # the bulk store reads the buffer it was written in
        seen.add((r, c))
    assert seen == {(r, c) for r in range(rows) for c in range(0, cols, 2)} and len(writes) == len(seen)


REDUCED_BEFORE = """
@autotune(TM in [128], TN in [128], TK in [64])
kernel k(A: tensor<bf16>[M, K], B: tensor<bf16>[K, N], s: tensor<f32>[N], C: tensor<f32>[M, N]) {
  let scale = s[0]
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ TK], B[kt :+ TK, ctx.block.y * TN :+ TN])
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc * scale
}
"""


def test_a_scalar_read_from_a_tensor_before_the_loop_is_pruned():
    """The producer evaluates the scalar lets before the loop again: only those of scalars."""
    from compiler.frontend import load as frontend

    k = frontend.select_kernel(frontend.load_text(REDUCED_BEFORE), None)
    b = binding.bind(k, {"M": 512, "N": 512, "K": 128}, None, {"TM": 128, "TN": 128, "TK": 64})
    stages.run(k, b, stages.Options(False, schedule(0, False), 90), until="emit")  # the plain grid takes it
    with pytest.raises(CompileError, match="only tiles and the scalar lets of scalars"):
        stages.run(k, b, stages.Options(False, schedule(4, False), 90), until="emit")


NO_LOOP = """
@autotune(TM in [128], TN in [128])
kernel k(A: tensor<bf16>[M, 64], B: tensor<bf16>[64, N], C: tensor<f32>[M, N]) {
  let m = ctx.block.x * TM
  let n = ctx.block.y * TN
  C[m :+ TM, n :+ TN] = dot(A[m :+ TM, :], B[:, n :+ TN])
}
"""


def test_a_dot_without_a_ring_is_pruned():
    """A tensor-core dot outside a loop: no ring, and a grid of the plain kernel's work."""
    from compiler.frontend import load as frontend

    k = frontend.select_kernel(frontend.load_text(NO_LOOP), None)
    b = binding.bind(k, {"M": 1024, "N": 1024}, None, {"TM": 128, "TN": 128})
    with pytest.raises(CompileError, match="takes a TMA ring's loop"):
        stages.run(k, b, stages.Options(False, schedule(4, False), 90), until="emit")
