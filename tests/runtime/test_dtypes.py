"""Tensors keep their dtype through the runtime: bf16 and f16 inputs are loaded, fetched between
pods, held and computed on in their own dtype (2 bytes per element, not widened to f32), and the
result matches the plain kernel under the interpreter. The plan allocates each buffer in its
tensor's dtype and the tuner's byte counts follow."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from scheduler.jobs.jobfile import build_job, read_job, write_job
from scheduler.jobs.prepare import prepare
from scheduler.planning.planner import NodeFigure, plan
from scheduler.tuning.tuner import account
from schemas.instructions import Allocate
from tests.runtime.cluster import open_cluster, reference

SOURCE = """
@cluster(TILE_M in [64], TILE_N in [64], TILE_K in [64])
@autotune(TILE_M in [32], TILE_N in [32], TILE_K in [32])
@aligned(M = TILE_M, N = TILE_N, K = TILE_K)
kernel mm(A: tensor<DT>[M, K], B: tensor<DT>[K, N], C: tensor<f32>[M, N]) {
  let pm = ctx.block.x
  let pn = ctx.block.y
  var acc: tile<f32>[TILE_M, TILE_N] = 0.0
  for kt in range(0, K, TILE_K) {
    let a = A[pm * TILE_M :+ TILE_M, kt :+ TILE_K]
    let b = B[kt :+ TILE_K, pn * TILE_N :+ TILE_N]
    acc += dot(a, b)
  }
  C[pm * TILE_M :+ TILE_M, pn * TILE_N :+ TILE_N] = acc
}
"""
SIZE = 128
NUMPY = {"bf16": np.dtype(ml_dtypes.bfloat16), "f16": np.dtype(np.float16)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("dtypes")
    c, _, close = open_cluster(root, 2)
    yield c
    close()


def _job(root, dtype):
    kernel = root / f"mm_{dtype}.phk"
    kernel.write_text(SOURCE.replace("DT", dtype))
    rng = np.random.default_rng(5)
    arrays = {name: rng.standard_normal((SIZE, SIZE)).astype(NUMPY[dtype]) for name in ("A", "B")}
    for name, array in arrays.items():
        np.save(root / f"{name}_{dtype}.npy", array)
    job = build_job(kernel, None, {"M": SIZE, "N": SIZE, "K": SIZE}, {},
                    {"A": f"file:A_{dtype}.npy", "B": f"file:B_{dtype}.npy", "C": f"file:C_{dtype}.npy"})
    path = root / f"mm_{dtype}.capnp"
    write_job(job, path)
    return kernel, path, arrays


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_half_precision_tiles_stay_half(cluster, dtype):
    kernel, job, arrays = _job(cluster.root, dtype)
    result = cluster.run(job)
    assert result.ok, result.reason
    want = reference(kernel, {"M": SIZE, "N": SIZE, "K": SIZE},
                     {**arrays, "C": np.zeros((SIZE, SIZE), np.float32)})["C"]
    got = np.load(cluster.root / f"C_{dtype}.npy")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    events = result.trace["events"]
    assert not result.trace["failures"] and all(e["ok"] for e in events)
    loads = [e for e in events if e["kind"] == "load"]
    fetches = [e for e in events if e["kind"] == "fetch"]
    assert fetches, "with 2 pods some operand tiles travel between them"
    for event in loads + fetches:  # every operand tile is 64 x 64 of a 2-byte dtype
        assert event["bytes"] == 64 * 64 * 2, event
    stores = [e for e in events if e["kind"] == "store"]
    assert all(e["bytes"] == 64 * 64 * 4 for e in stores)  # C is f32


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_the_plan_allocates_in_the_tensor_dtype(tmp_path, dtype):
    _, job, _ = _job(tmp_path, dtype)
    prepared = prepare(read_job(job), job, [tmp_path])
    planned = plan(prepared.program, [NodeFigure(0), NodeFigure(1)], prepared.uris)
    allocations = [i for p in planned.node_plans.values() for i in p.instructions if isinstance(i, Allocate)]
    assert {a.dtype for a in allocations} == {dtype, "f32"}
    loads = account(planned.node_plans, prepared.program)
    operand_bytes = 2 * SIZE * SIZE * 2  # A and B, each loaded once by some node, 2 bytes each
    assert sum(node.bytes_loaded for node in loads) == operand_bytes
    assert sum(node.bytes_stored for node in loads) == SIZE * SIZE * 4
