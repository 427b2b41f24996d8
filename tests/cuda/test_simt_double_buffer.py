"""The CUDA-core mainloop's double-buffered shared operands (Schedule.double_buffer), without a
GPU: the tuner offers it beside the default for kernels with a dot in a loop, every point of the
CUDA-core matmuls compiles with it (or is pruned for its doubled shared memory), the hot points
assemble without spills, a k tile costs one barrier instead of two, and a loop nested in another
keeps one buffer. (On the GPU, tests/cuda/test_cuda_gpu.py runs the examples at this schedule
against the interpreter.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from cuda_cases import all_points, example_names, free_dims, load_example

from compiler.cuda.compiled import compile_kernel, generate_source
from compiler.cuda.schedule import DEFAULT, SIMT_DOUBLE_BUFFER, SIMT_WIDE_BLOCK
from compiler.cuda.tuning import autotune
from compiler.frontend import binding
from compiler.frontend import load as frontend
from compiler.frontend.diagnostics import CompileError

SGEMM = {"M": 8192, "N": 8192, "K": 8192}
_NESTED = """
@autotune(T in [32])
kernel k(A: tensor<f32>[N, N], B: tensor<f32>[N, N], C: tensor<f32>[T, T]) {
  var acc: tile<f32>[T, T] = 0.0
  for r in range(0, 3, 1) {
    for kt in range(0, N, T) {
      let a = A[0 :+ T, kt :+ T]
      let b = B[kt :+ T, 0 :+ T]
      acc += dot(a, b)
    }
  }
  C[0 :+ T, 0 :+ T] = acc
}
"""


def _loop_body(source: str) -> str:
    """The text of the kernel's (first) k loop, up to the epilogue's first line."""
    start = source.index("for (int u_kt")
    return source[start:source.index("// line 13:", start)]


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setenv("PHOBOS_CUDA_WIDE_BLOCKS", "1")  # schedule.wide_blocks_searched


def test_wide_blocks_are_searched_by_default_and_the_switch_takes_them_out(monkeypatch):
    monkeypatch.delenv("PHOBOS_CUDA_WIDE_BLOCKS", raising=False)  # the default, whatever the shell sets
    assert autotune.cuda_core_schedules(load_example("matmul.phk")) == [
        DEFAULT, SIMT_DOUBLE_BUFFER, SIMT_WIDE_BLOCK]
    monkeypatch.setenv("PHOBOS_CUDA_WIDE_BLOCKS", "0")
    assert autotune.cuda_core_schedules(load_example("matmul.phk")) == [DEFAULT, SIMT_DOUBLE_BUFFER]
    k = load_example("matmul.phk")
    with pytest.raises(CompileError, match=r"holds 256 tile values per thread in registers \(budget 200\)"):
        generate_source(k, binding.bind(k, SGEMM, None, {"TILE_M": 128, "TILE_N": 256, "TILE_K": 8}))


def test_the_tuner_offers_double_buffering_only_where_a_dot_sits_in_a_loop(wide):
    assert autotune.cuda_core_schedules(load_example("matmul.phk")) == [
        DEFAULT, SIMT_DOUBLE_BUFFER, SIMT_WIDE_BLOCK]
    assert autotune.cuda_core_schedules(load_example("softmax.phk")) == [DEFAULT]
    launched = _NESTED.replace("@autotune", "@launch(threads = 64)\n@autotune")
    launched = frontend.load_text(launched, "launched.phk").kernel()
    assert autotune.cuda_core_schedules(launched) == [DEFAULT, SIMT_DOUBLE_BUFFER]  # its CTA size stays
    assert SIMT_DOUBLE_BUFFER.key().endswith("-db") and not DEFAULT.key().endswith("-db")


@pytest.mark.parametrize("tile_k", [8, 16])
def test_a_k_tile_costs_one_barrier_with_two_buffers_and_two_with_one(tile_k):
    k = load_example("matmul.phk")
    b = binding.bind(k, SGEMM, None, {"TILE_M": 128, "TILE_N": 128, "TILE_K": tile_k})
    one = generate_source(k, b)
    two = generate_source(k, b, schedule=SIMT_DOUBLE_BUFFER)
    assert _loop_body(one.source).count("__syncthreads();") == 2
    assert _loop_body(two.source).count("__syncthreads();") == 1
    # both operands' buffers are doubled, and the FMAs read the iteration's half
    assert two.shared_bytes == 2 * one.shared_bytes
    assert _loop_body(two.source).count(f"/ (c_TILE_K) & 1) * {tile_k * 132}") >= 4


@pytest.mark.parametrize("tiles,schedule,block", [
    ((128, 128), DEFAULT, (8, 8)), ((128, 128), SIMT_WIDE_BLOCK, (16, 8)),
    ((128, 256), SIMT_DOUBLE_BUFFER, (8, 16)), ((256, 128), DEFAULT, (16, 8)),
])
def test_register_blocks_of_the_sgemm_points(tiles, schedule, block, wide):
    """A thread's block of the accumulator: 8 x 8 on 256 threads at 128 x 128, twice that at 128
    threads or at twice the tile (points the register budget pruned before issue 36)."""
    k = load_example("matmul.phk")
    point = {"TILE_M": tiles[0], "TILE_N": tiles[1], "TILE_K": 8}
    source = generate_source(k, binding.bind(k, SGEMM, None, point), schedule=schedule).source
    assert f"float u_acc_3[{block[0]}][{block[1]}];" in source
    # per k step: one float4 shared load per 4 rows of a and 4 columns of b, both operands
    fma = _loop_body(source)
    fma = fma[fma.index("for (int k_ = 0;"):]
    assert fma.count("reinterpret_cast<const float4*>") == 2


@pytest.mark.parametrize("name,point,held", [
    ("matmul.phk", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}, 216),  # 128 + 64 prefetched + 24
    ("flash_attention.phk", {"BR": 64, "BC": 128}, 256),
])
def test_what_a_loop_holds_prunes_wide_blocks_that_spilled(name, point, held):
    """On 128 threads these held 216 and 256 values through their loop (accumulators, the next
    tiles prefetched into registers, the body's lets, a k step's fragments) and spilled 28 and
    384 bytes (ptxas 13.0, sm_90; attention single-buffered): codegen.REGISTER_BUDGET prunes them
    before any compile."""
    kernel = load_example(name)
    dims = SGEMM if name == "matmul.phk" else {"Nq": 4096, "Nk": 4096}
    with pytest.raises(CompileError, match=f"it holds {held} values per thread in registers through a loop"):
        generate_source(kernel, binding.bind(kernel, dims, None, point), schedule=SIMT_WIDE_BLOCK)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize("tiles,schedule", [((128, 128), SIMT_WIDE_BLOCK), ((128, 256), SIMT_DOUBLE_BUFFER)])
def test_wide_register_blocks_assemble_without_spills(tiles, schedule, tmp_path, wide):
    k = load_example("matmul.phk")
    point = {"TILE_M": tiles[0], "TILE_N": tiles[1], "TILE_K": 16}
    ptx = tmp_path / "k.ptx"
    ptx.write_text(compile_kernel(k, binding.bind(k, SGEMM, None, point), schedule=schedule).ptx)
    run = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(ptx), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True, check=True)
    assert re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", run.stderr) == [("0", "0")]
    assert int(re.search(r"Used (\d+) registers", run.stderr).group(1)) <= 255, run.stderr


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize("tile_k", [8, 16])
def test_sgemm_points_assemble_without_spills_in_128_registers(tile_k, tmp_path):
    k = load_example("matmul.phk")
    b = binding.bind(k, SGEMM, None, {"TILE_M": 128, "TILE_N": 128, "TILE_K": tile_k})
    ptx = tmp_path / "k.ptx"
    ptx.write_text(compile_kernel(k, b, schedule=SIMT_DOUBLE_BUFFER).ptx)
    run = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(ptx), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True, check=True)
    assert re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", run.stderr) == [("0", "0")]
    regs = int(re.search(r"Used (\d+) registers", run.stderr).group(1))
    assert regs <= 128, run.stderr  # 2 CTAs of 256 threads per multiprocessor


def _compile(job):
    name, kernel, point = job
    dims = {d: {"D": 64, "H": 8}.get(d, 2048) for d in free_dims(kernel)}  # as test_cuda_ptx
    try:
        compile_kernel(kernel, binding.bind(kernel, dims, None, point), schedule=SIMT_DOUBLE_BUFFER)
    except CompileError as e:
        return name, point, e.message
    return name, point, None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul.phk", "matmul_plain.phk"])
def test_every_point_of_the_cuda_core_matmuls_compiles_double_buffered(name):
    kernel = load_example(name)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_compile, [(name, kernel, p) for p in all_points(kernel)]))
    for _, point, why in results:
        assert why is None or any(r in why for r in ("registers", "shared memory", "cannot lay out")), (
            point, why)
    assert sum(why is None for *_, why in results) >= len(results) // 2


def test_default_point_of_every_example_compiles_double_buffered():
    jobs = [(n, k, k.default_tile_values()) for n in example_names() for k in [load_example(n)]]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for name, point, why in pool.map(_compile, jobs):
            assert why is None, (name, point, why)


def test_a_loop_nested_in_another_keeps_one_buffer():
    """An enclosing loop's next iteration would refill buffer 0 with no barrier since its last
    reads, so the inner loop's operands stay single-buffered (two barriers per iteration)."""
    kernel = frontend.load_text(_NESTED, "nested.phk").kernel()
    b = binding.bind(kernel, {"N": 96})
    one = generate_source(kernel, b)
    two = generate_source(kernel, b, schedule=SIMT_DOUBLE_BUFFER)
    assert "float4 pf_" in one.source  # the inner loop's operands are prefetched into registers
    assert two.source == one.source


def test_the_switch_is_part_of_the_tuning_cache_key(monkeypatch):
    """A winner tuned without the wide blocks is not served to a search that has them."""
    from compiler.cuda.compiled import compiler_version

    monkeypatch.delenv("PHOBOS_CUDA_WIDE_BLOCKS", raising=False)
    searched = compiler_version()
    monkeypatch.setenv("PHOBOS_CUDA_WIDE_BLOCKS", "0")
    assert compiler_version() == searched + "-nowide"
