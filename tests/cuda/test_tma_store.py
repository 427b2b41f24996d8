"""The TMA-store epilogue on the CPU (compiler/cuda/mainloops/tma_ws/store.py): every point of its cases
compiles through NVRTC with the bulk tensor stores in the PTX and assembles for sm_90a without
spills; the tile each thread writes lands where the tensor map's 128-byte swizzle reads it, every
element once, without bank conflicts; what it cannot take is pruned with its
reason; the tuner searches it beside the plain epilogue."""

from __future__ import annotations

import re
import shutil

import pytest
from cuda_cases import ptxas
from tma_store_cases import CASES, POINTS, kernel, points_of, store_schedule

from compiler.cuda import stages
from compiler.cuda.compiled import compile_kernel
from compiler.cuda.schedule import Schedule, tensor_core_space
from compiler.cuda.tuning import autotune
from compiler.cuda.tuning import cache as tune_cache
from compiler.frontend import binding
from compiler.frontend import load as frontend
from compiler.frontend.diagnostics import CompileError


def _lowered(k, dims, point, schedule):
    b = binding.bind(k, dims, None, point)
    return stages.run(k, b, stages.Options(False, schedule, 90), until="emit").generated


@pytest.mark.parametrize("name,dims", [(n, d[0]) for n, d in CASES] + [(n, d[-1]) for n, d in CASES])
@pytest.mark.parametrize("case", range(len(POINTS)))
def test_every_point_compiles_with_bulk_tensor_stores_and_no_spills(name, dims, case, tmp_path):
    point, schedule = points_of(name)[case]
    k = kernel(name)
    compiled = compile_kernel(k, binding.bind(k, dims, None, point), schedule=schedule, cc=90)
    rank = 3 if name == "bmm" else 2
    assert f"cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group" in compiled.ptx
    assert "cp.async.bulk.wait_group.read 0" in compiled.ptx
    assert "fence.proxy.async.shared::cta" in compiled.ptx
    stored = [m for m in compiled.tensor_maps if m.param.startswith("tms_")]
    assert len(stored) == 1 and stored[0].box_rows == point["TILE_M"], compiled.tensor_maps
    # the epilogue reuses the ring: no shared memory beyond the plain TMA schedule's
    plain = _lowered(k, dims, point, Schedule(**{**schedule.__dict__, "tma_store": False}))
    assert compiled.shared_bytes == plain.shared_bytes
    if shutil.which("ptxas"):
        report = ptxas(compiled.ptx, "sm_90a", tmp_path)
        assert "0 bytes spill stores, 0 bytes spill loads" in report, report
        assert "are serialized" not in report, report


def _evaluate(c_expr: str, env: dict) -> int:
    """A C integer expression of the generated code (non-negative operands: / and % as Python's)."""
    return eval(c_expr.replace("/", "//"), {}, dict(env))  # noqa: S307 - our own generated text


def _writes(source: str, consumers: int):
    """(thread, _i, _j, row, col, byte address in the tile) of every pair the epilogue writes,
    read off the generated code itself."""
    head = dict(re.findall(r"const int (th_r|th_c) = (.*);", source))
    body = source[source.index("the tile through shared memory"):]
    counts = [int(re.search(rf"{v} < (\d+);", body).group(1)) for v in ("_i", "_j")]
    r_expr = re.search(r"const int _r = (.*);", body).group(1)
    c_expr = re.search(r"const int _c = (.*);", body).group(1)
    addr = re.search(r"reinterpret_cast<(?:unsigned|float2)\*>\((epi_\d+ \+ .*?)\) = ", body).group(1)
    addr = re.sub(r"epi_\d+", "0", addr)
    out = []
    for t in range(consumers):
        env = {"th_warp": t >> 5, "th_lane": t & 31}
        env |= {n: _evaluate(e.replace(", th_lane = th_id & 31", ""), env) for n, e in head.items()}
        for i in range(counts[0]):
            for j in range(0, counts[1], 2):
                at = {**env, "_i": i, "_j": j}
                at["_r"], at["_c"] = _evaluate(r_expr, at), _evaluate(c_expr, at)
                out.append((t, i, j, at["_r"], at["_c"], _evaluate(addr, at)))
    return out


@pytest.mark.parametrize("name,elem", [("linear_relu", 2), ("matmul_bf16.phk", 4)])
@pytest.mark.parametrize("case", range(len(POINTS)))
def test_tile_lands_in_the_maps_swizzle_once_without_bank_conflicts(name, elem, case):
    point, schedule = POINTS[case]
    dims = {"M": 256, "N": 512, "K": 128}
    gen = _lowered(kernel(name), dims, point, schedule)
    rows, cols = point["TILE_M"], point["TILE_N"]
    consumers = gen.block[0] - 128
    writes = _writes(gen.source, consumers)
    per_box = 128 // elem
    seen = set()
    for _, _, _, r, c, a in writes:
        o = r * 128 + (c % per_box) * elem  # the box's row-major byte, before the swizzle
        assert a == (c // per_box) * rows * 128 + (o ^ (((o >> 7) & 7) << 4)), (r, c, a)
        seen.add((r, c))
    assert seen == {(r, c) for r in range(rows) for c in range(0, cols, 2)}
    assert len(writes) == len(seen)
    # a warp's store of 32 x elem x 2 bytes takes elem / 2 wavefronts at best: as many words per bank
    groups = {}
    for t, i, j, _, _, a in writes:
        for word in range(a // 4, a // 4 + elem // 2):
            groups.setdefault((t // 32, i, j), {}).setdefault(word % 32, set()).add(word)
    assert all(len(words) == elem // 2 for banks in groups.values() for words in banks.values())
    assert all(len(banks) == 32 for banks in groups.values())


HEAD = "@autotune(TM in [128], TN in [128], TK in [64])\n"
ROW_MAX = HEAD + """kernel k(A: tensor<bf16>[M, K], B: tensor<bf16>[K, N], C: tensor<bf16>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ TK], B[kt :+ TK, ctx.block.y * TN :+ TN])
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = bf16(acc - expand(max(acc, axis = 1), axis = 1))
}
"""
READS_OUTPUT = HEAD + """kernel k(A: tensor<bf16>[M, K], B: tensor<bf16>[K, N], C: tensor<f32>[M, N]) {
  var acc: tile<f32>[TM, TN] = 0.0
  for kt in range(0, K, TK) {
    acc += dot(A[ctx.block.x * TM :+ TM, kt :+ TK], B[kt :+ TK, ctx.block.y * TN :+ TN])
  }
  C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN] = acc + C[ctx.block.x * TM :+ TM, ctx.block.y * TN :+ TN]
}
"""


@pytest.mark.parametrize("text,dims", [
    (READS_OUTPUT, {"M": 256, "N": 256, "K": 128}),  # the copy engine's writes beside the kernel's reads
    (ROW_MAX, {"M": 256, "N": 256, "K": 128}),  # a value that is not one element-wise expression
])
def test_a_schedule_no_store_takes_is_pruned(text, dims):
    k = frontend.select_kernel(frontend.load_text(text), None)
    point = {"TM": 128, "TN": 128, "TK": 64}
    _lowered(k, dims, point, Schedule(wgmma=True, stages=4, tma=True))  # the plain epilogue compiles
    with pytest.raises(CompileError, match="is pruned: no tile store takes the TMA store"):
        _lowered(k, dims, point, store_schedule())


def test_the_tuner_searches_the_tma_store_beside_the_plain_epilogue():
    space = tensor_core_space(8, deep=True)
    tma = [s for s in space if s.tma]
    assert {s.tma_store for s in tma} == {False, True}
    assert all(s.key().endswith("-tmast") == s.tma_store for s in space)
    probes, families, _ = autotune.search_families(kernel("linear_relu"), False, 90)
    assert any(s.tma_store for fam in families for s in fam)
    assert not any(s.tma_store for s in probes)  # a variant of the probed family, never the only choice


def test_a_cached_tma_store_schedule_reads_back(tmp_path, monkeypatch):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    k = kernel("linear_relu")
    dims = {"M": 4096, "N": 4096, "K": 4096}
    keys = autotune._keys(k, dims, "NVIDIA H100 80GB HBM3", False, 90)
    best = {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}
    tune_cache.store(keys, dims, best, 1.0, store_schedule())
    found = tune_cache.lookup(k, dims, keys, autotune.search_points(k), 90)
    assert found is not None and found[2] == store_schedule()


def test_one_ptx_at_two_shapes_gets_each_shapes_tensor_maps():
    """The launch plan (launch._plan) is keyed by the tensor maps as well as the PTX: a kernel whose
    dimensions are parameters compiles to one PTX for two shapes, and each needs its own maps."""
    from types import SimpleNamespace

    from compiler.cuda import launch
    from compiler.cuda.mainloops.tma_ws.maps import MapSpec

    def compiled(rows: int):
        spec = MapSpec(param="tm_a", tensor="A", box_rows=64, box_cols=64, rows=rows, cols=128,
                       dtype="bf16", outer=(3,))
        return SimpleNamespace(ptx="// same", entry="k", params=("tm_a",), scalars=(), tensor_maps=(spec,))

    first, second = launch._plan(compiled(200)), launch._plan(compiled(77))
    assert first[0][1].rows == 200 and second[0][1].rows == 77
