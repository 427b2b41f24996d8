"""The GPU a leaf's PTX is for (compiler/cuda/target.py), with no GPU: the compute capability is
given, the compiles are real (NVRTC, and ptxas for the architectures it names). Every example
compiles for compute_80 and assembles for sm_80 and sm_86 (and, where its code runs on CUDA cores
alone, for sm_75); warpgroup MMA and TMA are refused off sm_90, in the tuner before anything is
timed and at the dot for a kernel compiled anyway; and sm_90 stays as it was."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cuda_cases import all_points, example_names, free_dims, load_example, ptxas

from compiler.cuda import stages, target
from compiler.cuda.compiled import compile_kernel
from compiler.cuda.schedule import DEFAULT, WGMMA_DEEP_PROBE, Schedule
from compiler.cuda.tuning import autotune
from compiler.frontend import binding
from compiler.frontend.diagnostics import CompileError

REPO = Path(__file__).resolve().parents[2]
CAPABILITIES = (80, 86, 89, 90, 100, 120)
MM_DIMS = {"M": 1000, "N": 1000, "K": 1000}
MM_POINT = {"TILE_M": 128, "TILE_N": 128, "TILE_K": 32}
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")


def _bound(name: str, point=None, dims=None):
    kernel = load_example(name)
    fixed = {"D": 64, "H": 8}
    dims = dims or {d: fixed.get(d, 2048) for d in free_dims(kernel)}
    return kernel, binding.bind(kernel, dims, None, point)


def _target_line(ptx: str) -> str:
    return re.search(r"^\.target (\S+)", ptx, re.M).group(1)


@pytest.mark.parametrize("cc", CAPABILITIES)
def test_the_ptx_target_follows_the_gpu(cc):
    """compute_{cc} below 9.0; compute_90 (or compute_90a for warpgroup MMA) on 9.0, as before;
    compute_90 beyond, where the driver JIT-compiles it forward and sm_90a code is refused."""
    kernel, b = _bound("matmul_bf16.phk", MM_POINT, MM_DIMS)
    mma = compile_kernel(kernel, b, cc=cc)
    assert _target_line(mma.ptx) == (f"sm_{cc}" if cc < 90 else "sm_90")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in mma.ptx
    target.check(mma, cc)
    f32, fb = _bound("matmul.phk")
    assert _target_line(compile_kernel(f32, fb, cc=cc).ptx) == (f"sm_{cc}" if cc < 90 else "sm_90")
    if cc == 90:
        wg = compile_kernel(kernel, b, schedule=Schedule(wgmma=True), cc=cc)
        assert _target_line(wg.ptx) == "sm_90a" and "wgmma.mma_async" in wg.ptx
        return
    with pytest.raises(CompileError) as e:
        compile_kernel(kernel, b, schedule=Schedule(wgmma=True), cc=cc)
    assert "compute capability 9.0 exactly (sm_90a) for warpgroup MMA (wgmma)" in e.value.message
    assert f"this GPU has compute capability {cc // 10}.{cc % 10}" in e.value.message
    assert e.value.span.line == 10  # acc += dot(a, b)


def test_what_the_code_needs_comes_from_what_the_emitters_used():
    kernel, b = _bound("matmul_bf16.phk", MM_POINT, MM_DIMS)

    def need(schedule, kernel=kernel, b=b):
        return compile_kernel(kernel, b, schedule=schedule).need

    assert need(DEFAULT).features == ("mma.sync", "cp.async") and need(DEFAULT).cc == 80
    wg = need(Schedule(wgmma=True))
    assert "wgmma" in wg.features and wg.specific and wg.cc == 90
    wide, wb = _bound("matmul_bf16.phk", {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, MM_DIMS)
    tma = need(Schedule(wgmma=True, stages=4, tma=True), wide, wb)
    assert {"wgmma", "tma", "setmaxnreg", "mbarrier"} <= set(tma.features)
    mha, mb = _bound("mha_bf16.phk", {"BR": 128, "BC": 64})
    pp = need(Schedule(wgmma=True, stages=5, rotate=True, pingpong=True), mha, mb)
    assert {"wgmma", "mbarrier"} <= set(pp.features)
    f32, fb = _bound("matmul.phk")
    assert compile_kernel(f32, fb).need == target.Need() and target.Need().cc == target.OLDEST_CC


def _spills(report: str) -> bool:
    counts = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert counts, report
    return any(c != ("0", "0") for c in counts)


def _example_cases():
    out = []
    for name in example_names():
        kernel = load_example(name)
        out.append((name, False))
        if not stages.tensor_core_dots(kernel, False) and stages.tensor_core_dots(kernel, True):
            out.append((name, True))  # exact-f32 dots: also with the TF32 opt-in
    return out


# compute_80 PTX that ptxas assembles for sm_86 with a spill, where the compute_86 PTX phobos
# generates for that GPU (its ring cut to 99 KB of shared memory) has none: mha_tf32 at BR=64,
# BC=32 gets 96 registers and 4 bytes of spill stores there (93 and none on sm_80 and as compute_86).
FORWARD_SPILLS = {("mha_tf32.phk", False)}


def _hopper_point(name: str, tf32: bool):
    """The default point, else (TF32 forced on a kernel written for exact f32, whose default may fit
    no MMA shape) the first point that compiles for the H200; None when none does (decode_gqa's
    8-row tiles and paged_decode's one query row fit no tensor-core tile: then sm_80 refuses them
    alike)."""
    kernel = load_example(name)
    for point in [None, *all_points(kernel)]:
        _, b = _bound(name, point)
        try:
            return b, compile_kernel(kernel, b, tf32=tf32)
        except CompileError as e:
            assert tf32, e.message
            with pytest.raises(CompileError) as same:
                compile_kernel(kernel, b, tf32=tf32, cc=80)
            assert same.value.message == e.message
    return None


@needs_ptxas
@pytest.mark.parametrize("name,tf32", _example_cases())
def test_every_example_assembles_for_sm80_and_sm86(name, tf32, tmp_path):
    """compute_80 PTX (NVRTC), assembled by ptxas for sm_80 and (as the driver would JIT it on an
    RTX 3090) sm_86, compute_86 PTX for sm_86 and, without tensor cores, compute_75 for sm_75; no
    spills where sm_90 had none. TF32 operands round by the integer sequence there (tf32.py)."""
    kernel = load_example(name)
    found = _hopper_point(name, tf32)
    if found is None:
        assert name in ("decode_gqa.phk", "paged_decode.phk") and tf32  # 8- and 1-row tiles
        return
    b, hopper = found
    clean = not _spills(ptxas(hopper.ptx, "sm_90", tmp_path))
    ampere, rtx = (compile_kernel(kernel, b, tf32=tf32, cc=cc) for cc in (80, 86))
    assert (_target_line(ampere.ptx), _target_line(rtx.ptx)) == ("sm_80", "sm_86")
    assert ampere.cuda_source == hopper.cuda_source or ampere.shared_bytes < hopper.shared_bytes
    spills = {
        "sm_80": _spills(ptxas(ampere.ptx, "sm_80", tmp_path)),
        "sm_86": _spills(ptxas(rtx.ptx, "sm_86", tmp_path)),
        "compute_80 on sm_86": _spills(ptxas(ampere.ptx, "sm_86", tmp_path)),
    }
    if clean:
        assert not spills["sm_80"] and not spills["sm_86"], (name, spills)
        assert spills["compute_80 on sm_86"] == ((name, tf32) in FORWARD_SPILLS), (name, spills)
    tensor_cores = bool(stages.tensor_core_dots(kernel, tf32))
    if tensor_cores:  # fp8 operands converted to f16 go through registers, not the cp.async ring
        fp8 = any(p.dtype in ("e4m3", "e5m2") for p in kernel.tensors)
        assert "mma.sync.aligned.m16n8k" in ampere.ptx and ("cp.async" in ampere.ptx or fp8)
    if "tf32" in name or tf32:
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ampere.ptx
        assert "cvt.rn.tf32.f32" not in ampere.ptx and "cvt.rna" not in ampere.ptx
        assert "cvt.rn.tf32.f32" in hopper.ptx  # the same source, one instruction from sm_90
    if target.refusal(ampere.need, 75) is not None:  # tensor cores or bf16 conversions
        assert tensor_cores or any(p.dtype == "bf16" for p in kernel.tensors), (name, ampere.need)
        return
    try:
        turing = compile_kernel(kernel, b, tf32=tf32, cc=75)
    except CompileError as e:  # 64 KB of shared memory per CTA there
        assert "bytes of shared memory (the limit is 65536)" in e.message, e.message
        return
    assert _target_line(turing.ptx) == "sm_75" and not _spills(ptxas(turing.ptx, "sm_75", tmp_path)), name


def test_a_ring_is_cut_to_the_shared_memory_of_the_gpu():
    """A CTA gets 227 KB on 9.0, 163 KB on 8.0 and 99 KB on 8.6: the same point holds fewer stages
    in its ring, or is pruned, and a kernel compiled for more cannot be loaded on a smaller GPU."""
    deep = Schedule(stages=4)
    kernel, wide = _bound("matmul_bf16.phk", {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, MM_DIMS)
    sizes = {cc: compile_kernel(kernel, wide, schedule=deep, cc=cc).shared_bytes for cc in (90, 80)}
    assert sizes[80] < sizes[90] <= target.shared_memory_limit(90)  # a stage less on 8.0
    assert sizes[80] <= target.shared_memory_limit(80) - 32 * 1024 < sizes[90]
    too_big = r"is pruned: it needs \d+ bytes of shared memory \(the limit is 101376\)"
    with pytest.raises(CompileError, match=too_big):
        compile_kernel(kernel, wide, schedule=deep, cc=86)  # two stages are the fewest: too many
    _, square = _bound("matmul_bf16.phk", {"TILE_M": 128, "TILE_N": 128, "TILE_K": 64}, MM_DIMS)
    hopper, rtx = (compile_kernel(kernel, square, schedule=deep, cc=cc) for cc in (90, 86))
    assert rtx.shared_bytes < target.shared_memory_limit(86) < hopper.shared_bytes
    ampere = compile_kernel(kernel, square, schedule=deep, cc=80)  # compute_80: loads on 8.6, but
    too_big = r"needs \d+ bytes of shared memory per CTA; this GPU \(compute capability 8\.6"
    with pytest.raises(CompileError, match=too_big):
        target.check(ampere, 86)


def test_ptx_made_for_a_newer_gpu_is_refused_before_the_driver_sees_it():
    kernel, b = _bound("matmul.phk")
    hopper = compile_kernel(kernel, b)
    with pytest.raises(CompileError, match=r"compiled for compute_90, which a GPU of compute capability 8.6"):
        target.check(hopper, 86)
    target.check(hopper, 100)  # forward: Blackwell JIT-compiles sm_90 PTX
    ampere = compile_kernel(kernel, b, cc=80)
    target.check(ampere, 86)  # compute_80 runs on 8.6 as it is
    kernel, b = _bound("matmul_bf16.phk", MM_POINT, MM_DIMS)
    wg = compile_kernel(kernel, b, schedule=Schedule(wgmma=True))
    for cc in (80, 100, 120):
        with pytest.raises(CompileError, match=r"9\.0 exactly \(sm_90a\)") as e:
            target.check(wg, cc)
        assert e.value.span.line == 10


@pytest.mark.parametrize("cc", [80, 86, 89, 100, 120])
def test_the_tuner_prunes_warpgroup_mma_off_sm90_before_timing(cc, monkeypatch, tmp_path):
    """On any GPU but 9.0 the tuner never times (nor picks) a schedule that needs sm_90a: every
    point is probed on mma.sync only, the warpgroup families are pruned with the reason, and the
    winner is cached under this GPU's arch."""
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    monkeypatch.setattr(autotune, "tuning_inputs", lambda kernel, env: (None, None))
    asked = []

    def fake_measure(kernel, dims, candidates, tf32, inputs, log, model=False):  # no GPU: made up
        asked.extend(s for _, s in candidates)
        return [((tuple(sorted(p.items())), s), sum(p.values()) - s.stages) for p, s in candidates], []

    monkeypatch.setattr(autotune, "_measure", fake_measure)
    cases = (("matmul_bf16.phk", {"M": 1024, "N": 1024, "K": 1024}),
             ("mha_bf16.phk", {"H": 8, "N": 1024, "D": 64}))
    for name, dims in cases:
        kernel = load_example(name)
        asked.clear()
        res = autotune.tune(kernel, dims, cc=cc)
        assert asked and not any(target.schedule_need(s).features for s in asked), name
        assert {s.stages for s in asked} == {2, 3, 4}  # the whole mma.sync space was searched
        assert not res.schedule.wgmma
        rows = [(dict(items), why) for items, why in res.pruned]  # each point's refused probes
        reasons = {why for p, why in rows if "wgmma" in p["schedule"]}
        assert reasons and all("9.0 exactly (sm_90a)" in r and "is pruned on this GPU" in r for r in reasons)
        points = {tuple(sorted((k, v) for k, v in p.items() if k != "schedule")) for p, _ in rows}
        assert len(points) == len(autotune.search_points(kernel))
        again = autotune.tune(kernel, dims, cc=cc)
        assert again.cached and again.schedule == res.schedule


def test_a_cached_schedule_is_never_replayed_on_another_arch(monkeypatch, tmp_path):
    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "gpu_name", lambda: "GPU X")
    kernel = load_example("matmul_bf16.phk")
    dims = {"M": 512, "N": 512, "K": 512}
    keys = {cc: autotune.cache_key(kernel, dims, "GPU X", cc=cc) for cc in CAPABILITIES}
    assert len(set(keys.values())) == len(CAPABILITIES)
    entry = {"best": MM_POINT, "ms": 0.1, "schedule": dataclasses.asdict(WGMMA_DEEP_PROBE)}
    autotune._write_cache({keys[90]: entry, keys[80]: entry})  # the 8.0 one written by hand
    assert autotune.cached_result(kernel, dims, cc=90).schedule == WGMMA_DEEP_PROBE
    assert autotune.cached_result(kernel, dims, cc=80) is None  # sm_90a: never replayed on 8.0
    assert autotune.cached_result(kernel, dims, cc=86) is None  # no entry for this arch


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "compiler" / "main.py"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_the_ptx_command_compiles_for_arch_and_refuses_at_the_dot(tmp_path):
    path = REPO / "examples" / "matmul_bf16.phk"
    dims = ("--dim", "M=1000", "--dim", "N=1000", "--dim", "K=1000")
    ok = _cli("ptx", str(path), *dims, "--arch", "8.6", "-o", str(tmp_path / "k.ptx"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "for compute_86" in ok.stdout and ".target sm_86" in (tmp_path / "k.ptx").read_text()
    old = _cli("ptx", str(path), *dims, "--arch", "sm_75", "-o", str(tmp_path / "t.ptx"), cwd=tmp_path)
    assert old.returncode == 2 and "Traceback" not in old.stderr
    assert re.match(
        r".*matmul_bf16\.phk:10:12: error: this kernel cannot run on this GPU: it needs compute capability "
        r"8\.0 or later for tensor cores \(mma\.sync, ldmatrix\); this GPU has compute capability 7\.5\n"
        r"    acc \+= dot\(a, b\)\n           \^+",
        old.stderr,
    ), old.stderr
    assert not (tmp_path / "t.ptx").exists()
    for bad in ("9", "sm90x", "6.1"):
        run = _cli("ptx", str(path), *dims, "--arch", bad, "-o", str(tmp_path / "b.ptx"), cwd=tmp_path)
        assert run.returncode == 2 and run.stderr.startswith(f"error: --arch {bad}: "), run.stderr


HALF = """@autotune(B in [64])
kernel k(a: tensor<f16>[N], o: tensor<f32>[N], h: tensor<f16>[N]) {
  let i = ctx.block.x * B
  o[i :+ B] = f32(a[i :+ B]) * 2.0
  h[i :+ B] = f16(a[i :+ B] + 1.0)
}
"""


@needs_ptxas
def test_f16_on_cuda_cores_runs_from_sm75_and_bf16_from_sm80(tmp_path):
    """f16 converts with instructions every GPU has; bf16's `cvt.rn.bf16.f32` is sm_80's."""
    from compiler.frontend import load as frontend

    half = frontend.load_text(HALF, "half.phk").kernel()
    turing = compile_kernel(half, binding.bind(half, {"N": 100}), cc=75)
    assert turing.need == target.Need() and "cvt.rn.f16.f32" in turing.ptx
    assert not _spills(ptxas(turing.ptx, "sm_75", tmp_path))
    brain = frontend.load_text(HALF.replace("f16", "bf16"), "brain.phk").kernel()
    b = binding.bind(brain, {"N": 100})
    assert compile_kernel(brain, b, cc=80).need.features == ("bf16",)
    refused = (r"compute capability 8\.0 or later for bf16 conversions \(cvt\.rn\.bf16\.f32\); "
               r"this GPU has compute capability 7\.5")
    with pytest.raises(CompileError, match=refused) as e:
        compile_kernel(brain, b, cc=75)
    assert (e.value.span.line, e.value.span.col) == (2, 10)  # at the first bf16 tensor: a: tensor<bf16>
