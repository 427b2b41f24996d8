"""CI checks that need no GPU: every example compiles to PTX at every point of its @autotune
space (or is pruned with a reason), ptxas assembles the hot kernels without spills, and NVRTC
errors point at the kernel's own line."""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from cuda_cases import all_points, example_names, free_dims, load_example

from compiler.cuda.compiled import compile_generated, compile_kernel, generate_source
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError

PRUNE_REASONS = ("registers", "shared memory", "cannot lay out")


def _dims(kernel, value=2048):
    """Every free dim at `value`, except an attention head dim D (a tile extent, 64) and a heads
    count H (8)."""
    fixed = {"D": 64, "H": 8}
    return {d: fixed.get(d, value) for d in free_dims(kernel)}


def _sweep_jobs(sample: bool = False, only: str | None = None):
    for name in example_names() if only is None else [only]:
        kernel = load_example(name)
        points = all_points(kernel)
        if sample:  # the default point and the largest point of the search space
            at = kernel.autotune
            corners = (
                [{d.name: d.values[0] for d in at.dims}, {d.name: d.values[-1] for d in at.dims}]
                if at
                else []
            )
            points = [p for p in points if p in corners]
        for point in points:
            yield name, kernel, point


def _compile(job):
    name, kernel, point = job
    try:
        compiled = compile_kernel(kernel, binding.bind(kernel, _dims(kernel), None, point))
    except CompileError as e:
        return name, point, None, e.message
    return name, point, compiled, None


def _check_results(results):
    compiled = 0
    for name, point, c, why in results:
        if c is None:
            assert any(r in why for r in PRUNE_REASONS), (name, point, why)
            continue
        compiled += 1
        assert ".entry phobos_" in c.ptx and ".target sm_90" in c.ptx, (name, point)
    # the default point of every example must fit
    names = {n for n, _, _, _ in results}
    defaults = {(n, tuple(sorted(load_example(n).default_tile_values().items()))) for n in names}
    ok = {(n, tuple(sorted(p.items()))) for n, p, c, _ in results if c is not None}
    assert defaults <= ok
    return compiled


# How many points of each example's @autotune space compile (275 of 301); the rest exceed the
# register budget or shared memory, or cannot be laid out. A change that prunes more on purpose
# lowers its entry here.
COMPILED_POINTS = {
    "add.phk": 9, "axpby.phk": 16, "causal_attention.phk": 9, "causal_mha_bf16.phk": 7, "decode_gqa.phk": 2,
    "flash_attention.phk": 9, "layernorm.phk": 12, "matmul.phk": 52, "matmul_bf16.phk": 12,
    "matmul_f16.phk": 12, "matmul_fp8.phk": 2, "matmul_plain.phk": 27, "matmul_tf32.phk": 24,
    "mha_bf16.phk": 7, "mha_f16.phk": 7, "mha_tf32.phk": 4, "softmax.phk": 20, "transpose.phk": 2,
    "gelu_linear.phk": 27, "paged_decode.phk": 3, "row_cumsum.phk": 12,
}


def test_every_example_has_its_count_of_compiling_points():
    assert set(COMPILED_POINTS) == set(example_names())
    assert sum(COMPILED_POINTS.values()) >= 140


@pytest.mark.slow
@pytest.mark.parametrize("name", example_names())
def test_every_point_of_every_example_compiles_or_is_pruned_with_a_reason(name):
    # One case per example, so that Bazel's shards share the 255 compiles (one test of them all
    # was the longest item of its shard). NVRTC releases the GIL, so threads compile in parallel.
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_compile, _sweep_jobs(only=name)))
    assert _check_results(results) >= COMPILED_POINTS[name]


def test_default_and_largest_point_of_every_example_compile_or_are_pruned_with_a_reason():
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_compile, _sweep_jobs(sample=True)))
    assert _check_results(results) >= len(example_names())


HOT_POINTS = [
    ("matmul.phk", None),
    ("matmul.phk", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 8}),
    ("matmul.phk", {"TILE_M": 64, "TILE_N": 128, "TILE_K": 16}),
    ("matmul_plain.phk", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 8}),
    ("flash_attention.phk", None),
    ("flash_attention.phk", {"D": 64, "BR": 64, "BC": 64}),
    ("flash_attention.phk", {"D": 64, "BR": 128, "BC": 64}),
    ("causal_attention.phk", None),
    ("causal_attention.phk", {"D": 64, "BR": 64, "BC": 64}),
]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize("name,point", HOT_POINTS)
def test_hot_kernels_assemble_for_sm90_without_spills(name, point, tmp_path):
    kernel = load_example(name)
    compiled = compile_kernel(kernel, binding.bind(kernel, _dims(kernel, 4096), None, point))
    ptx = tmp_path / "k.ptx"
    ptx.write_text(compiled.ptx)
    run = subprocess.run(
        ["ptxas", "-arch=sm_90", "-v", str(ptx), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
        check=True,
    )
    report = run.stderr
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert spills and all(s == ("0", "0") for s in spills), report
    assert "Used" in report


def test_aligned_matmul_loads_have_no_bounds_checks_and_plain_matmul_does():
    k = load_example("matmul.phk")
    # the kernel body only: the prelude's integer helpers (shl_i) compare shift counts unsigned
    src = generate_source(k, binding.bind(k, {"M": 256, "N": 256, "K": 256})).source
    assert "(unsigned)" not in src[src.index("__global__"):]
    k = load_example("matmul_plain.phk")
    src = generate_source(k, binding.bind(k, {"M": 250, "N": 256, "K": 256})).source
    assert "(unsigned)" in src[src.index("__global__"):]


def test_flash_attention_keeps_row_statistics_in_registers_and_reduces_with_shuffles():
    k = load_example("flash_attention.phk")
    src = generate_source(k, binding.bind(k, {"Nq": 1024, "Nk": 1024})).source
    assert "__shfl_xor_sync" in src
    assert re.search(r"float u_m_\d+\[\d+\];", src) and re.search(r"float u_l_\d+\[\d+\];", src)


def test_pruned_point_is_reported_not_miscompiled():
    k = load_example("matmul.phk")
    with pytest.raises(CompileError, match="registers"):
        generate_source(
            k,
            binding.bind(
                k, {"M": 1024, "N": 1024, "K": 1024}, None, {"TILE_M": 256, "TILE_N": 256, "TILE_K": 8}
            ),
        )


def test_nvrtc_error_names_the_generated_line_and_the_kernel_line():
    k = load_example("add.phk")
    gen = generate_source(k, binding.bind(k, {"N": 1000}))
    lines = gen.source.splitlines()
    # break the line that stores c: NVRTC must report it, and we must map it to the store's span
    idx = next(i for i, t in enumerate(lines) if "t_c[" in t)
    lines[idx] = lines[idx].replace("t_c[", "t_undefined_c[")
    broken = gen.__class__(**{**gen.__dict__, "source": "\n".join(lines) + "\n"})
    with pytest.raises(CompileError) as info:
        compile_generated(k, broken)
    err = info.value
    assert err.span.line == 5 and "add.phk" in err.span.file
    assert f"generated line {idx + 1}" in err.note and "t_undefined_c" in err.note
    assert "add.phk:5:" in err.render()


def test_cuda_and_ptx_commands(tmp_path, capsys):
    from compiler.cli.commands import main

    path = str(load_example.__globals__["EXAMPLES"] / "softmax.phk")
    assert main(["cuda", path, "--dim", "R=100", "--dim", "C=300", "--tile", "BR=4"]) == 0
    out = capsys.readouterr().out
    assert 'extern "C" __global__' in out and "constexpr int c_BR = 4;" in out
    target = tmp_path / "k.ptx"
    assert main(["ptx", path, "--dim", "R=100", "--dim", "C=300", "-o", str(target)]) == 0
    assert ".entry phobos_softmax" in target.read_text()


def test_ptx_command_reports_a_pruned_set_clearly(tmp_path):
    from compiler.cli.commands import main

    path = str(load_example.__globals__["EXAMPLES"] / "matmul.phk")
    with pytest.raises(CompileError, match="registers"):
        main(
            [
                "ptx",
                path,
                "--dim",
                "M=512",
                "--dim",
                "N=512",
                "--dim",
                "K=512",
                "--tile",
                "TILE_M=256",
                "--tile",
                "TILE_N=256",
                "-o",
                str(tmp_path / "k.ptx"),
            ]
        )
    assert not (tmp_path / "k.ptx").exists()


def test_autotune_flag_without_a_gpu_is_a_clear_user_error(monkeypatch):
    from common.errors import UserError
    from compiler.cli.commands import main
    from compiler.cuda.tuning import autotune

    monkeypatch.setattr(autotune, "gpu_name", lambda: None)
    path = str(load_example.__globals__["EXAMPLES"] / "add.phk")
    with pytest.raises(UserError, match="--autotune needs a GPU"):
        main(["cuda", path, "--dim", "N=1000", "--autotune"])


def test_cached_winner_brings_its_schedule_to_the_cli(monkeypatch, tmp_path, capsys):
    """`compiler cuda` without --tile takes the cached tile values and their schedule (here
    warpgroup MMA), under the key of the precision asked for."""
    import dataclasses

    from compiler.cli.commands import main
    from compiler.cuda.schedule import Schedule
    from compiler.cuda.tuning import autotune

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    kernel = load_example("matmul_bf16.phk")
    dims = {"M": 512, "N": 512, "K": 512}
    point = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}
    key = autotune.cache_key(kernel, dims, "GPU X")
    entry = {"best": point, "ms": 0.1, "schedule": dataclasses.asdict(Schedule(stages=4, wgmma=True))}
    autotune._write_cache({key: entry})
    path = str(load_example.__globals__["EXAMPLES"] / "matmul_bf16.phk")
    main(["cuda", path, "--dim", "M=512", "--dim", "N=512", "--dim", "K=512"])
    source = capsys.readouterr().out
    assert "wgmma.mma_async" in source and "c_TILE_N = 128;" in source
    main(["cuda", path, "--dim", "M=512", "--dim", "N=512", "--dim", "K=512", "--tf32"])
    assert "wgmma.mma_async" not in capsys.readouterr().out  # another precision: not this entry


HALF_KERNEL = """
@autotune(B in [256, 1024])
kernel convert(a: tensor<f16>[N], b: tensor<bf16>[N], i: tensor<i32>[N],
               o: tensor<bf16>[N], p: tensor<f16>[N]) {
  let base = ctx.block.x * B
  o[base :+ B] = a[base :+ B] * 2.0 + b[base :+ B] + f32(i[base :+ B])
  p[base :+ B] += a[base :+ B]
}
"""


def test_f16_bf16_and_i32_tensors_compile_without_headers(tmp_path):
    from compiler.frontend import load as frontend

    k = frontend.load_text(HALF_KERNEL, "convert.phk").kernel()
    c = compile_kernel(k, binding.bind(k, {"N": 1000}))
    assert "#include" not in c.cuda_source and "cvt.rn.bf16.f32" in c.ptx
    if shutil.which("ptxas"):
        (tmp_path / "k.ptx").write_text(c.ptx)
        subprocess.run(
            ["ptxas", "-arch=sm_90", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")], check=True
        )


def test_ptx_compiled_elsewhere_makes_the_same_kernel_without_nvrtc(monkeypatch):
    """A GPU pod given the scheduler's PTX builds the same CompiledKernel without compiling."""
    from compiler.cuda import nvrtc

    kernel = load_example("add.phk")
    bound = binding.bind(kernel, _dims(kernel))
    compiled = compile_kernel(kernel, bound)

    def no_nvrtc(*args, **kwargs):
        raise AssertionError("NVRTC ran although the PTX was given")

    monkeypatch.setattr(nvrtc, "compile_to_ptx", no_nvrtc)
    assert compile_generated(kernel, generate_source(kernel, bound), compiled.ptx) == compiled
