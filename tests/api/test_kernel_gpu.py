"""phobos.Kernel on GPU arrays (cupy and torch), against the reference interpreter: every example
the CUDA generator lowers, on the caller's stream (checked by capturing the call into a CUDA
graph: a launch on any other stream would not be in the graph), on the arrays' device, from
several threads; the autotune cache shared with the command line; and the refusal of arrays of
the wrong shape, dtype, device or layout before anything is launched.

Tolerances (relative to the reference's norm), as tests/cuda explains them: one rounding per
element (add, axpby, transpose) 1e-6; f32 sums in another order (matmul, 16-bit-operand and TF32
matmul, whose operands the interpreter rounds the same way) 1e-5; fast-math expf/sqrtf plus
reordered sums (softmax, layernorm, attention) 3e-5; 16-bit attention as noted at TOL.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import phobos
from compiler.frontend.binding import bind
from compiler.frontend.load import load_file
from compiler.interp.interpreter import run_kernel
from tests.api.test_kernel_numpy import DIMS, EXAMPLES, SCALARS, random_arrays

pytestmark = pytest.mark.gpu

TOL = {"add": 1e-6, "axpby": 1e-6, "transpose": 0.0, "matmul": 1e-5, "matmul_plain": 1e-5,
       "matmul_bf16": 1e-5, "matmul_f16": 1e-5, "matmul_tf32": 1e-5, "softmax": 3e-5, "layernorm": 3e-5,
       "flash_attention": 3e-5, "causal_attention": 3e-5, "decode_gqa": 3e-5,
       # 16-bit p and outputs: an expf a few ulp off rounds to the neighbouring value on one side
       # only (tests/cuda/test_cuda_tc_gpu.py): 2^-8 for bf16, 2^-11 for f16 and TF32.
       "mha_bf16": 2**-8, "causal_mha_bf16": 2**-8, "mha_f16": 2**-11, "mha_tf32": 2**-11,
       # f32 prefix sums of lines of C = 300 <= 512 in another order: L 2^-24 (test_builtins_gpu.py)
       "row_cumsum": 3e-5,
       # the matmul's reordered f32 sums, then the GELU's few roundings and erff's 2 ulp (§8.2)
       "gelu_linear": 1e-5,
       # as decode_gqa: fast-math expf and reordered sums (take's gathers are exact)
       "paged_decode": 3e-5,
       # exact fp8 products summed in f32 in another order, then one bf16 rounding each side:
       # where the two f32 sums straddle a bf16 rounding point the outputs differ by one bf16 ulp,
       # at most 2^-7 of the value (8 significant bits)
       "matmul_fp8": 2**-7}
FP8 = ("e4m3", "e5m2")  # cupy has no fp8 dtype: such tensors come from torch (compiler/api/arrays.py)


def test_every_example_is_covered():
    assert set(TOL) == set(DIMS)


def reference(example: str, arrays: dict, scalars: dict) -> dict:
    kernel = load_file(EXAMPLES / f"{example}.phk").kernel()
    host = {n: a.copy() for n, a in arrays.items()}
    run_kernel(kernel, bind(kernel, DIMS[example], {n: a.shape for n, a in host.items()}), host, scalars)
    return host


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    got, want = got.astype(np.float64), want.astype(np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def to_cupy(array: np.ndarray):
    import cupy

    return cupy.asarray(array.view(np.uint16) if str(array.dtype) == "bfloat16" else array)  # cupy: no bf16


def from_cupy(device, like: np.ndarray) -> np.ndarray:
    import cupy

    return cupy.asnumpy(device).view(like.dtype)


def _torch():
    return pytest.importorskip("torch")


def to_torch(array: np.ndarray, dtype: str):
    torch = _torch()
    types = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
             "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    wide = array.astype(np.int32 if dtype == "i32" else np.float32)  # exact: every type fits
    return torch.from_numpy(wide).to(types[dtype]).cuda()


def from_torch(tensor) -> np.ndarray:
    return tensor.cpu().float().numpy() if tensor.is_floating_point() else tensor.cpu().numpy()


@pytest.mark.parametrize("example", sorted(TOL))
def test_every_example_on_cupy_and_torch_equals_the_interpreter(example):
    """The first call compiles for the shapes (first value of each @autotune list: the tuned path
    is test_autotune_goes_through_the_command_lines_cache's); the torch call finds that launch.
    A kernel of fp8 tensors takes them from torch only (cupy has no fp8 dtype)."""
    import cupy

    kernel = phobos.load(EXAMPLES / f"{example}.phk").bind(autotune=False)
    arrays = random_arrays(kernel, DIMS[example], seed=1)
    scalars = {n: SCALARS[n] for n in kernel.scalars}
    want = reference(example, arrays, scalars)
    if not any(dtype in FP8 for dtype in kernel.tensors.values()):
        device = {n: to_cupy(a) for n, a in arrays.items()}
        kernel(**device, **scalars)
        cupy.cuda.get_current_stream().synchronize()
        for name in kernel.outputs:
            assert rel_err(from_cupy(device[name], arrays[name]), want[name]) <= TOL[example], f"cupy {name}"
    torch = _torch()
    tensors = {n: to_torch(a, kernel.tensors[n]) for n, a in arrays.items()}
    kernel(**tensors, **scalars)
    torch.cuda.synchronize()
    for name in kernel.outputs:
        assert rel_err(from_torch(tensors[name]), want[name]) <= TOL[example], f"torch {name}"


def test_the_call_runs_on_the_current_cupy_stream():
    import cupy

    kernel = phobos.load(EXAMPLES / "add.phk").bind(tiles={"BLOCK": 4096})
    a, b = cupy.arange(8192, dtype=cupy.float32), cupy.ones(8192, cupy.float32)
    c = cupy.zeros(8192, cupy.float32)
    kernel(a, b, cupy.empty_like(c))  # the first call compiles and loads: not while capturing
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        kernel(a, b, c)
        graph = stream.end_capture()
    stream.synchronize()
    assert float(c.sum()) == 0.0  # captured, not run: it was launched on `stream`
    graph.launch(stream)
    stream.synchronize()
    assert (c == a + 1).all()


def test_the_call_runs_on_the_current_torch_stream():
    torch = _torch()
    kernel = phobos.load(EXAMPLES / "add.phk").bind(tiles={"BLOCK": 4096})
    a, b = torch.arange(8192, dtype=torch.float32, device="cuda"), torch.ones(8192, device="cuda")
    c = torch.zeros(8192, device="cuda")
    kernel(a, b, torch.empty_like(c))  # the first call compiles and loads: not while capturing
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # makes a side stream current, and captures it
        kernel(a, b, c)
    torch.cuda.synchronize()
    assert float(c.sum()) == 0.0
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(c, a + 1)


def test_arrays_on_another_device():
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    kernel = phobos.load(EXAMPLES / "add.phk").bind(tiles={"BLOCK": 4096})
    with cupy.cuda.Device(1):
        a, b, c = cupy.ones(4096, cupy.float32), cupy.ones(4096, cupy.float32), cupy.zeros(4096, cupy.float32)
    with cupy.cuda.Device(0):
        kernel(a, b, c)  # runs where the arrays are, on that device's current stream
        other = cupy.zeros(4096, cupy.float32)
    with cupy.cuda.Device(1):
        cupy.cuda.get_current_stream().synchronize()
        assert (c == 2).all()
    with pytest.raises(phobos.ArrayError, match="tensor c: on GPU 0, the other arrays on GPU 1"):
        kernel(a, b, other)


def test_bad_gpu_arrays_are_refused_before_launch():
    import cupy

    kernel = phobos.load(EXAMPLES / "matmul.phk").bind(autotune=False)
    a, b = cupy.ones((64, 8), cupy.float32), cupy.ones((8, 64), cupy.float32)
    c = cupy.full((64, 64), 5.0, cupy.float32)
    cases = [
        (dict(A=a, B=cupy.ones((9, 64), cupy.float32), C=c), "B", r"makes K = 9"),
        (dict(A=a, B=b, C=cupy.zeros((64, 64), cupy.float64)), "C", r"expects f32, got an unsupported"),
        (dict(A=a, B=b, C=cupy.zeros((64, 128), cupy.float32)[:, ::2]), "C", r"not C-contiguous"),
        (dict(A=cupy.ones((8, 64), cupy.float32).T, B=b, C=c), "A", r"not C-contiguous"),
        (dict(A=cupy.ones(64 * 8 + 1, cupy.float32)[1:].reshape(64, 8), B=b, C=c), "A", r"16-byte boundary"),
        (dict(A=np.ones((64, 8), np.float32), B=b, C=c), "B", r"on a GPU while A is in host memory"),
        (dict(A=a, B=np.ones((8, 64), np.float32), C=c), "B", r"in host memory while the first tensor"),
    ]
    for tensors, name, message in cases:
        with pytest.raises(phobos.ArrayError, match=message) as info:
            kernel(**tensors, alpha=1.0, beta=0.0)
        assert info.value.parameter == name
    cupy.cuda.get_current_stream().synchronize()
    assert (c == 5.0).all()


def test_bad_torch_tensors_are_refused_before_launch():
    torch = _torch()
    kernel = phobos.load(EXAMPLES / "matmul.phk").bind(autotune=False)
    a, b = torch.ones(64, 8, device="cuda"), torch.ones(8, 64, device="cuda")
    c = torch.full((64, 64), 5.0, device="cuda")
    with pytest.raises(phobos.ArrayError, match="tensor A: not C-contiguous"):
        kernel(torch.ones(8, 64, device="cuda").t(), b, c, 1.0, 0.0)
    with pytest.raises(phobos.ArrayError, match="tensor C: the kernel expects f32, got f16"):
        kernel(a, b, c.half(), 1.0, 0.0)
    with pytest.raises(phobos.ArrayError, match="tensor B: in host memory while the first tensor"):
        kernel(a, b.cpu(), c, 1.0, 0.0)
    torch.cuda.synchronize()
    assert bool((c == 5.0).all())


def test_calls_from_several_threads_on_their_own_streams():
    import cupy

    kernel = phobos.load(EXAMPLES / "axpby.phk").bind(autotune=False)
    failures: list[str] = []

    def worker(seed: int) -> None:
        with cupy.cuda.Stream(non_blocking=True) as stream:
            rng = np.random.default_rng(seed)
            x, y = (rng.standard_normal((33, 70)).astype(np.float32) for _ in range(2))
            out = cupy.zeros((33, 70), cupy.float32)
            for _ in range(20):
                kernel(cupy.asarray(x), cupy.asarray(y), out, alpha=2.0, beta=0.5)
            stream.synchronize()
            if rel_err(cupy.asnumpy(out), 2.0 * x.astype(np.float64) + 0.5 * y) > 1e-6:
                failures.append(f"thread {seed}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_autotune_goes_through_the_command_lines_cache(tmp_path, monkeypatch):
    import cupy

    from compiler.cuda.tuning import autotune
    from compiler.cuda.tuning import cache as tune_cache

    monkeypatch.setenv("PHOBOS_CACHE_DIR", str(tmp_path))
    kernel = phobos.load(EXAMPLES / "softmax.phk")
    x = cupy.asarray(np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32))
    y = cupy.zeros_like(x)
    kernel(x, y)
    entries = json.loads((tmp_path / "autotune.json").read_text())
    # the winner is stored twice (compiler/cuda/tuning/cache.py): under the exact dimensions and
    # under their shape bucket (R = 64 < BUCKET_FROM stays exact, C = 512 becomes ~512)
    assert len(entries) == 2
    exact = [k for k in entries if "|C=512,R=64|" in k and "|bucket" not in k]
    near = [k for k in entries if "|C=~512,R=64|bucket|" in k]
    assert len(exact) == len(near) == 1, sorted(entries)
    assert exact[0].replace("|C=512,R=64|", "|C=~512,R=64|bucket|") == near[0]
    entry = entries[exact[0]]
    assert entries[near[0]] == entry and entry["dims"] == {"R": 64, "C": 512}
    checked = load_file(EXAMPLES / "softmax.phk").kernel()
    assert not isinstance(tune_cache.parse_entry(entry, checked), str)  # well formed, in the space
    assert autotune.cached_choice(checked, {"R": 64, "C": 512}) == entry["best"]
    pinned = phobos.load(EXAMPLES / "softmax.phk").bind(tiles={"BR": 1, "BC": 128})
    (tmp_path / "autotune.json").unlink()
    pinned(x, y)  # every @autotune name pinned: nothing is tuned, nothing cached
    assert not (tmp_path / "autotune.json").exists()


class Exporter:
    """An array of a library phobos knows nothing of but the DLPack protocol."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_another_dlpack_exporter_on_the_gpu_is_used_in_place():
    import cupy

    kernel = phobos.load(EXAMPLES / "add.phk").bind(tiles={"BLOCK": 4096})
    a, b = cupy.arange(4096, dtype=cupy.float32), cupy.full(4096, 2.0, cupy.float32)
    c = cupy.zeros(4096, cupy.float32)
    kernel(Exporter(a), Exporter(b), Exporter(c))
    cupy.cuda.get_current_stream().synchronize()
    assert (c == a + 2).all()  # written through the exporter's memory, not a copy
    with pytest.raises(phobos.ArrayError, match="tensor c: not C-contiguous"):
        kernel(Exporter(a), Exporter(b), Exporter(cupy.zeros(8192, cupy.float32)[::2]))


@pytest.mark.parametrize(
    "example,point,scalars",
    [
        ("matmul_f16", {"TILE_M": 128, "TILE_N": 256, "TILE_K": 64}, {}),
        # TF32 by role swap (compiler/cuda/mainloops/tma_ws/tf32.py): f32 tensors through TFLOAT32 maps
        ("matmul_tf32", {"TILE_M": 256, "TILE_N": 128, "TILE_K": 32}, {"alpha": 0.75, "beta": 0.5}),
    ],
)
def test_a_kernel_tuned_to_the_tma_ring_runs_through_phobos(monkeypatch, example, point, scalars):
    """A tuned schedule that reads operands by bulk tensor copies (compiler/cuda/mainloops/tma_ws/ring.py):
    the tensor maps are made for each call's arrays (cupy, then torch on its own stream), at ragged shapes,
    against the interpreter."""
    from types import SimpleNamespace

    from compiler.cuda.schedule import Schedule
    from compiler.cuda.tuning import autotune

    tma = Schedule(wgmma=True, stages=4, order="grouped", tma=True)
    monkeypatch.setattr(autotune, "tune", lambda *a, **k: SimpleNamespace(best=point, schedule=tma))
    kernel = phobos.load(EXAMPLES / f"{example}.phk")
    dtype = "f16" if example == "matmul_f16" else "f32"
    rng = np.random.default_rng(3)
    a = rng.standard_normal((300, 200)).astype(dtype.replace("f", "float"))
    b = rng.standard_normal((200, 520)).astype(a.dtype)
    c0 = rng.standard_normal((300, 520)).astype(np.float32)
    want = _matmul_reference(example, a, b, c0, scalars)
    c = to_cupy(c0)
    kernel(to_cupy(a), to_cupy(b), c, **scalars)
    assert rel_err(from_cupy(c, want), want) <= TOL[example]
    torch = _torch()
    tc = to_torch(c0, "f32")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        kernel(to_torch(a, dtype), to_torch(b, dtype), tc, **scalars)
    stream.synchronize()
    assert rel_err(from_torch(tc), want) <= TOL[example]


@pytest.mark.parametrize("example", ["mha_bf16", "causal_mha_bf16"])
def test_attention_tuned_to_the_tma_ring_runs_through_phobos(monkeypatch, example):
    """Attention whose K and V a producer warpgroup brings by 3-D bulk tensor copies
    (compiler/cuda/mainloops/tma_ws/ring.py, ping-pong consumers): the [H, N, D] maps are made for each call's
    arrays, at a ragged N, against the interpreter."""
    from types import SimpleNamespace

    from compiler.cuda.schedule import Schedule
    from compiler.cuda.tuning import autotune

    tma = Schedule(wgmma=True, stages=4, rotate=True, tma=True, pingpong=True)
    point = {"BR": 128, "BC": 64}
    monkeypatch.setattr(autotune, "tune", lambda *a, **k: SimpleNamespace(best=point, schedule=tma))
    kernel = phobos.load(EXAMPLES / f"{example}.phk")
    dims = {"H": 2, "N": 300, "D": 128}
    arrays = random_arrays(kernel, dims, seed=7)
    scalars = {"scale": 128**-0.5}
    checked = load_file(EXAMPLES / f"{example}.phk").kernel()
    want = {n: a.copy() for n, a in arrays.items()}
    run_kernel(checked, bind(checked, dims, {n: a.shape for n, a in want.items()}), want, scalars)
    dev = {n: to_cupy(a) for n, a in arrays.items()}
    kernel(**dev, **scalars)
    assert rel_err(from_cupy(dev["O"], want["O"]), want["O"]) <= TOL[example]


def _matmul_reference(example: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, scalars: dict) -> np.ndarray:
    ir = load_file(EXAMPLES / f"{example}.phk").kernel()
    host = {"A": a, "B": b, "C": c.copy()}
    dims = {"M": a.shape[0], "N": b.shape[1], "K": a.shape[1]}
    run_kernel(ir, bind(ir, dims, {n: x.shape for n, x in host.items()}), host, scalars)
    return host["C"]
