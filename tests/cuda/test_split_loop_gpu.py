"""On the GPU: the split loop (partial, merge tree and combine kernels) through the ordinary paths
equals the reference interpreter's one-CTA loop, for every G of split_cases.GS, bf16 / f16 / f32
KV, odd S (not a multiple of BS) and split factors 1 (unsplit), 2, 3, 7, half the SM count and
the SM count, plus the cost model's own choice, with the default tree (fan-in 8), and for a
few, none (0) and fan-ins 4 and 16. The calls go through phobos (Kernel.bind(split=N)) on cupy
arrays, once on torch tensors, and through a shipped CompiledLeaf's launch sequence.
Tolerances are relative Frobenius errors against the interpreter: the attention tests' 2e-3 bf16,
5e-4 f16, 1e-4 f32, or for decode (`_decode_tol`) what the operation allows where that is more:
the kernel rounds p to bf16/f16 against the running maximum, which differs between a chunk and the
one-CTA loop, so each side rounds each p on its own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from split_cases import DTYPES, GS, SPLITK_SOURCE, decode_inputs, decode_source, load

from compiler.api.kernel import from_source
from compiler.cuda.mainloops.split_loop import launch as split_launch
from compiler.cuda.mainloops.split_loop import plan as split_plan
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.cuda.mainloops.split_loop import tree as split_tree
from compiler.frontend import binding
from compiler.interp import interpreter as interp

pytestmark = pytest.mark.gpu
TOL = {"bf16": 2e-3, "f16": 5e-4, "f32": 1e-4}


def _factors(sms: int) -> list[int | None]:
    return [1, 2, 3, 7, sms // 2, sms, None]  # None: the cost model's factor


def _device(arrays: dict, kernel) -> dict:
    import cupy

    out = {}
    for p in kernel.tensors:
        host = np.ascontiguousarray(arrays[p.name])
        out[p.name] = cupy.asarray(host.view(np.uint16) if p.dtype == "bf16" else host)
    return out


def _err(got, want) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


UNIT_ROUNDOFF = {"bf16": 2.0**-8, "f16": 2.0**-11, "f32": 0.0}  # of the kernel's cast of p


def _decode_tol(dtype: str, arrays: dict, scale: float) -> float:
    """The relative Frobenius error that independent roundings of p allow. O = sum_j r(p_j) V_j / l
    with r(p) = p (1 + d), |d| <= u, d uniform: each side's error has standard deviation
    u / sqrt(3) * sqrt(sum_j p_j^2 V_j^2) / l per element, and the two sides' errors are
    independent (at worst), so the difference's norm is about sqrt(2/3) u ||sqrt(sum p^2 V^2) / l||;
    twice that is well above chance (the norm over G x D elements concentrates; the interpreter
    measures about half of it) and far below a lost or doubled chunk."""
    q, k, v = (np.asarray(arrays[n], np.float64) for n in ("Q", "K", "V"))
    s = scale * q @ k.T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    l = p.sum(axis=1, keepdims=True)
    sigma = np.sqrt((p**2) @ (v**2)) / l * np.sqrt(2.0 / 3.0) * UNIT_ROUNDOFF[dtype]
    want = (p @ v) / l
    return max(TOL[dtype], 2.0 * float(np.linalg.norm(sigma) / np.linalg.norm(want)))


FAN_INS = [(dtype, g, 8) for dtype in DTYPES for g in GS]  # the default tree (mainloops/split_loop/tree.py)
FAN_INS += [("bf16", 16, 0), ("f32", 1, 0), ("f16", 8, 0)]  # no tree: the combine merges all
FAN_INS += [("bf16", 16, 4), ("bf16", 16, 16), ("f32", 1, 4), ("f16", 32, 16)]


@pytest.mark.parametrize(("dtype", "g", "fan_in"), FAN_INS)
def test_split_decode_on_gpu_equals_the_interpreter(dtype, g, fan_in, monkeypatch):
    import cupy

    monkeypatch.setenv("PHOBOS_SPLIT_FAN_IN", str(fan_in))
    # the tree's launches; the one launch the cost model takes for these leaves has its own test
    # below (test_one_launch_decode_on_gpu_equals_the_interpreter_call_after_call)
    monkeypatch.setenv("PHOBOS_SPLIT_ONE_LAUNCH", "0")
    source = decode_source(dtype, g, "64")
    kernel = load(source)
    sms = split_plan.device_sm_count()
    s = 64 * (2 * sms + 5) + 37  # odd S, enough key blocks for SM-count chunks of two blocks
    arrays, scalars = decode_inputs(dtype, g, s, np.random.default_rng(g))
    want = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, binding.bind(kernel, {"G": g, "S": s}, None, {"BS": 64}), want, scalars)
    api = from_source(source).bind(tiles={"BS": 64}, autotune=False)
    calls = [api.bind(split=f) for f in _factors(sms)]
    device = [_device(arrays, kernel) for _ in calls]
    with ThreadPoolExecutor(8) as pool:  # the compiles (NVRTC) overlap; the launches do not
        list(pool.map(lambda c, d: c.prepare_gpu({n: a.shape for n, a in d.items()}), calls, device))
    tol = _decode_tol(dtype, arrays, scalars["scale"])
    for call, d, factor in zip(calls, device, _factors(sms), strict=True):
        call(**d, **scalars)
        cupy.cuda.get_current_stream().synchronize()
        got = cupy.asnumpy(d["O"])
        assert np.isfinite(got).all() and _err(got, want["O"]) < tol, (dtype, g, factor, tol)
    launch = calls[-2]._launches[next(iter(calls[-2]._launches))]
    # split = SM count: at most that many chunks of equal length (split_loop.chunking), padded
    per, used = split_loop.chunking(-(-s // 64), sms)
    levels = len(split_tree.tree_sizes(split_loop.padded(used), fan_in)) - 1
    assert len(launch.parts) == 2 + levels and launch.parts[0].grid[1] == split_loop.padded(used), per


def test_a_split_call_on_torch_tensors_equals_the_interpreter():
    torch = pytest.importorskip("torch")
    source = decode_source("bf16", 16, "64")
    kernel = load(source)
    s = (1 << 16) + 5
    arrays, scalars = decode_inputs("bf16", 16, s, np.random.default_rng(1))
    want = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, binding.bind(kernel, {"G": 16, "S": s}, None, {"BS": 64}), want, scalars)
    t = {n: torch.from_numpy(np.ascontiguousarray(a).view(np.int16) if n != "O" else a).cuda()
         for n, a in arrays.items()}
    t = {n: v.view(torch.bfloat16) if n != "O" else v for n, v in t.items()}
    call = from_source(source).bind(tiles={"BS": 64}, autotune=False)  # the cost model splits it
    call(**t, **scalars)
    torch.cuda.synchronize()
    # split over CTAs, in the launches compile_sequence makes by the cost model (here the one launch)
    b = binding.bind(kernel, {"G": 16, "S": s}, None, {"BS": 64})
    model = split_launch.compile_sequence(kernel, b, cc=90, sm_count=split_plan.device_sm_count())
    launch = next(iter(call._launches.values()))
    assert [p.grid for p in launch.parts] == [k.grid for k in model.kernels] and model.kernels[0].grid[1] > 1
    assert _err(t["O"].cpu().numpy(), want["O"]) < _decode_tol("bf16", arrays, scalars["scale"])


def test_a_shipped_split_leaf_runs_its_sequence_and_equals_the_interpreter():
    """The launch sequence a pod gets (CompiledLeaf: one module, partial then combine, scratch),
    loaded from its PTX alone and launched in order."""
    from compiler.cuda.compiled import compiled_leaf, launched_kernels
    from schemas.program import Leaf

    source = decode_source("f16", 8, "64")
    kernel = load(source)
    s = 64 * 300 + 11
    b = binding.bind(kernel, {"G": 8, "S": s}, None, {"BS": 64})
    leaf = Leaf(name="dec", kernel="decode", source=source, dims=(("G", 8), ("S", s)),
                tile_values=(("D", 128), ("BG", 8), ("BS", 64)), grid=(1,), threads=256,
                tensors=("Q", "K", "V", "O"), scalars=("scale",))
    sequence = split_launch.compile_sequence(kernel, b, split=7)
    shipped = compiled_leaf(leaf, kernel, b, sequence, 90)
    arrays, scalars = decode_inputs("f16", 8, s, np.random.default_rng(2))
    want = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, b, want, scalars)
    again = split_launch.LaunchSequence(launched_kernels(shipped), shipped.scratch)
    got = split_launch.run_sequence_gpu(again, kernel, arrays, scalars)["O"]
    assert _err(got, want["O"]) < TOL["f16"]


@pytest.mark.parametrize("fan_in", [0, 4])
@pytest.mark.parametrize("factor", [1, 3, 8, 40, None])
def test_split_k_matmul_on_gpu_equals_the_interpreter(factor, fan_in, monkeypatch):
    monkeypatch.setenv("PHOBOS_SPLIT_FAN_IN", str(fan_in))
    kernel = load(SPLITK_SOURCE)
    rng = np.random.default_rng(3)
    dims = {"M": 128, "N": 128, "K": 32 * 40 + 7}
    arrays = {"A": rng.standard_normal((128, dims["K"])).astype(np.float32),
              "B": rng.standard_normal((dims["K"], 128)).astype(np.float32),
              "C": rng.standard_normal((128, 128)).astype(np.float32)}
    scalars = {"alpha": 0.5, "beta": 2.0}
    b = binding.bind(kernel, dims)
    want = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, b, want, scalars)
    sequence = split_launch.compile_sequence(kernel, b, split=factor)
    got = split_launch.run_sequence_gpu(sequence, kernel, arrays, scalars)["C"]
    assert _err(got, want["C"]) < TOL["f32"], factor


def test_a_tuned_call_times_factors_around_the_model_and_caches_the_winner():
    """autotune on (the default): the split factor is tuned (mainloops/split_loop/tune.py) around the cost
    model's, the winner cached under its own key and used; the result equals the interpreter."""
    import cupy

    from compiler.cuda.mainloops.split_loop import tune as split_tune
    from compiler.cuda.tuning import cache as tune_cache

    source = decode_source("bf16", 16, "64")
    kernel = load(source)
    s = (1 << 18) + 17
    arrays, scalars = decode_inputs("bf16", 16, s, np.random.default_rng(7))
    want = {k: v.copy() for k, v in arrays.items()}
    b = binding.bind(kernel, {"G": 16, "S": s}, None, {"BS": 64})
    interp.run_kernel(kernel, b, want, scalars)
    call = from_source(source).bind(tiles={"BS": 64})
    d = _device(arrays, kernel)
    call(**d, **scalars)
    cupy.cuda.get_current_stream().synchronize()
    assert _err(cupy.asnumpy(d["O"]), want["O"]) < _decode_tol("bf16", arrays, scalars["scale"])
    entries = {k: v for k, v in tune_cache.read_cache().items() if k.startswith("split|decode|")}
    assert entries, "no split factor was tuned"
    entry = next(iter(entries.values()))
    model = split_plan.model_factor(kernel, b, split_plan.device_sm_count())
    assert sorted(int(f) for f in entry["timings"]) == split_tune.candidates(model, -(-s // 64))
    launch = next(iter(call._launches.values()))  # the winner's launches, in the cost model's form
    winner = split_launch.compile_sequence(kernel, b, cc=90, split=entry["split"],
                                           sm_count=split_plan.device_sm_count())
    assert [p.grid for p in launch.parts] == [k.grid for k in winner.kernels]


ONE_LAUNCH = [(dtype, g) for dtype in DTYPES for g in (1, 16, 32)] + [("bf16", 4), ("f16", 8)]


@pytest.mark.parametrize(("dtype", "g"), ONE_LAUNCH)
def test_one_launch_decode_on_gpu_equals_the_interpreter_call_after_call(dtype, g, monkeypatch):
    """The split loop in one launch (mainloops/split_loop/fused.py): every factor, twice each (the
    winners zero the tickets for the next call; a ticket left over would merge too early)."""
    import cupy

    monkeypatch.setenv("PHOBOS_SPLIT_ONE_LAUNCH", "1")
    source = decode_source(dtype, g, "64")
    kernel = load(source)
    sms = split_plan.device_sm_count()
    s = 64 * (2 * sms + 5) + 37
    arrays, scalars = decode_inputs(dtype, g, s, np.random.default_rng(g + 7))
    want = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, binding.bind(kernel, {"G": g, "S": s}, None, {"BS": 64}), want, scalars)
    api = from_source(source).bind(tiles={"BS": 64}, autotune=False)
    factors = [2, 7, sms, None]
    calls = [api.bind(split=f) for f in factors]
    device = [_device(arrays, kernel) for _ in calls]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c, d: c.prepare_gpu({n: a.shape for n, a in d.items()}), calls, device))
    tol = _decode_tol(dtype, arrays, scalars["scale"])
    for call, d, factor in zip(calls, device, factors, strict=True):
        launch = call._launches[next(iter(call._launches))]
        assert len(launch.parts) == 1, factor
        for again in range(2):
            d["O"].fill(np.nan)
            call(**d, **scalars)
            cupy.cuda.get_current_stream().synchronize()
            got = cupy.asnumpy(d["O"])
            assert np.isfinite(got).all() and _err(got, want["O"]) < tol, (dtype, g, factor, again, tol)


def test_one_launch_sequence_on_cupy_arrays_equals_the_interpreter_twice():
    """launch_sequence with one set of scratch buffers, twice: the second call starts from the
    tickets the first call's winners zeroed."""
    import cupy

    kernel = load(decode_source("bf16", 16, "64"))
    s = (1 << 16) + 37
    arrays, scalars = decode_inputs("bf16", 16, s, np.random.default_rng(3))
    b = binding.bind(kernel, {"G": 16, "S": s}, None, {"BS": 64})
    want = {k: v.copy() for k, v in arrays.items()}
    interp.run_kernel(kernel, b, want, scalars)
    sequence = split_launch.compile_sequence(kernel, b, cc=90, sm_count=split_plan.device_sm_count(),
                                             one_launch=True)
    assert len(sequence.kernels) == 1
    tol = _decode_tol("bf16", arrays, scalars["scale"])
    device, scratch = _device(arrays, kernel), split_launch.scratch_arrays(sequence)
    for _ in range(2):
        device["O"].fill(np.nan)
        split_launch.launch_sequence(sequence, device, scalars, scratch=scratch)
        cupy.cuda.get_current_stream().synchronize()
        got = cupy.asnumpy(device["O"])
        assert np.isfinite(got).all() and _err(got, want["O"]) < tol
    assert not cupy.asnumpy(scratch[sequence.scratch[-1].name]).any()  # the tickets are zero again
