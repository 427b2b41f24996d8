"""phobos.Kernel on numpy arrays: every example kernel through the API gives the bytes the
reference interpreter gives when called directly, with dimensions inferred from the arrays; and
the refusals (shape, dtype, layout, arguments) name the parameter before anything runs."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import phobos
from compiler.frontend.binding import bind
from compiler.frontend.load import load_file
from compiler.interp.interpreter import run_kernel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Small sizes, ragged where the kernel allows it (no @aligned), so masked edges are exercised.
DIMS = {
    "add": {"N": 100},
    "axpby": {"M": 10, "N": 40},
    "causal_attention": {"N": 40, "D": 64},
    "causal_mha_bf16": {"H": 2, "N": 70, "D": 64},
    "decode_gqa": {"G": 5, "S": 100, "D": 128},
    "flash_attention": {"Nq": 40, "Nk": 50, "D": 64},
    "layernorm": {"R": 5, "C": 300},
    "matmul": {"M": 64, "N": 64, "K": 8},
    "matmul_bf16": {"M": 70, "N": 70, "K": 40},
    "matmul_f16": {"M": 70, "N": 70, "K": 40},
    "matmul_fp8": {"M": 70, "N": 140, "K": 200},
    "matmul_plain": {"M": 40, "N": 40, "K": 20},
    "matmul_tf32": {"M": 70, "N": 70, "K": 40},
    "mha_bf16": {"H": 2, "N": 70, "D": 64},
    "mha_f16": {"H": 2, "N": 70, "D": 64},
    "mha_tf32": {"H": 2, "N": 70, "D": 64},
    "softmax": {"R": 5, "C": 200},
    "transpose": {"M": 40, "N": 50},
}
SCALARS = {"alpha": 1.5, "beta": 0.5, "scale": 0.125, "eps": 1e-5}
HOST = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32,
        "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def test_every_example_has_sizes():
    assert sorted(DIMS) == sorted(p.stem for p in EXAMPLES.glob("*.phk"))


def random_arrays(kernel: phobos.Kernel, dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for p in load_file(kernel.file).kernel(kernel.name).tensors:
        shape = tuple(d if isinstance(d, int) else dims[d] for d in p.dims)
        out[p.name] = rng.standard_normal(shape).astype(np.float32).astype(HOST[p.dtype])
    return out


@pytest.mark.parametrize("example", sorted(DIMS))
def test_example_through_the_api_equals_the_interpreter(example):
    kernel = phobos.load(EXAMPLES / f"{example}.phk")
    dims = DIMS[example]
    arrays = random_arrays(kernel, dims)
    scalars = {name: SCALARS[name] for name in kernel.scalars}
    direct = {n: a.copy() for n, a in arrays.items()}
    checked = load_file(EXAMPLES / f"{example}.phk").kernel()
    run_kernel(checked, bind(checked, dims, {n: a.shape for n, a in direct.items()}), direct, scalars)

    kernel(**arrays, **scalars)  # dims inferred from the shapes
    for name in kernel.outputs:
        assert arrays[name].tobytes() == direct[name].tobytes(), name
        assert np.isfinite(arrays[name].astype(np.float32)).all()


def test_positional_arguments_and_a_numpy_reference():
    kernel = phobos.load(EXAMPLES / "matmul.phk")
    a = np.arange(64 * 8, dtype=np.float32).reshape(64, 8) / 64
    b = np.ones((8, 64), np.float32)
    c = np.full((64, 64), 2.0, np.float32)
    kernel(a, b, c, 1.0, 0.5)
    np.testing.assert_allclose(c, a @ b + 1.0, rtol=1e-6)


def test_pinned_dims_and_tiles():
    kernel = phobos.load(EXAMPLES / "add.phk").bind(dims={"N": 100}, tiles={"BLOCK": 4096})
    assert kernel.dims == {"N": 100} and kernel.tiles == {"BLOCK": 4096}
    a, b, c = (np.full(100, 1.0, np.float32) for _ in range(3))
    kernel(a, b, c)
    assert (c == 2.0).all()
    with pytest.raises(phobos.ArrayError, match=r"tensor a: shape \(99,\) makes N = 99, but N = 100"):
        kernel(np.ones(99, np.float32), np.ones(99, np.float32), np.ones(99, np.float32))


def test_a_tile_outside_the_search_space_is_refused_at_bind():
    kernel = phobos.load(EXAMPLES / "add.phk")
    with pytest.raises(phobos.Error, match=r"BLOCK = 5 is outside its @autotune search space"):
        kernel.bind(dims={"N": 10}, tiles={"BLOCK": 5})


def _matmul_arrays():
    return np.ones((64, 8), np.float32), np.ones((8, 64), np.float32), np.zeros((64, 64), np.float32)


def test_bad_arrays_are_refused_naming_the_parameter():
    kernel = phobos.load(EXAMPLES / "matmul.phk")
    a, b, c = _matmul_arrays()
    before = c.copy()
    cases = [
        (dict(A=a, B=np.ones((9, 64), np.float32), C=c), r"tensor B: shape \(9, 64\) makes K = 9, but K = 8"),
        (dict(A=a, B=b, C=np.zeros((64, 64), np.float64)),
         r"tensor C: the kernel expects f32, got an array of float64"),
        (dict(A=a, B=b, C=np.zeros((64, 128), np.float32)[:, ::2]), r"tensor C: not C-contiguous"),
        (dict(A=np.asfortranarray(a), B=b, C=c), r"tensor A: not C-contiguous"),
        (dict(A=a[0], B=b, C=c), r"tensor A: expected 2 dimensions \[M, K\], got shape \(8,\)"),
        (dict(A=[[1.0]], B=b, C=c), r"tensor A: expected a numpy, torch or cupy array"),
    ]
    for tensors, message in cases:
        with pytest.raises(phobos.ArrayError, match=message) as info:
            kernel(**tensors, alpha=1.0, beta=0.0)
        assert info.value.parameter == message.split(":")[0].split()[-1]
    assert (c == before).all()


def test_argument_mistakes():
    kernel = phobos.load(EXAMPLES / "matmul.phk")
    a, b, c = _matmul_arrays()
    with pytest.raises(phobos.Error, match="missing argument\\(s\\) beta"):
        kernel(a, b, c, alpha=1.0)
    with pytest.raises(phobos.Error, match="has no parameter gamma"):
        kernel(a, b, c, alpha=1.0, beta=0.0, gamma=1.0)
    with pytest.raises(phobos.Error, match="parameter A given twice"):
        kernel(a, b, c, 1.0, 0.0, A=a)
    with pytest.raises(phobos.Error, match="scalar alpha"):
        phobos.load(EXAMPLES / "matmul.phk")(a, b, c, alpha="x", beta=0.0)


def test_an_i32_scalar_takes_a_whole_number_that_fits():
    """phobos.Kernel's i32 scalars follow binding.scalar_value, as the launches and job files do:
    a fraction or a value past 32 bits is a one-line phobos.Error before anything runs."""
    kernel = phobos.from_source("""
@autotune(B in [4])
kernel k(x: tensor<i32>[N], s: i32) {
  x[ctx.block.x * B :+ B] = x[ctx.block.x * B :+ B] + s
}
""")
    x = np.zeros(6, np.int32)
    kernel(x, -(2**31))
    assert (x == -(2**31)).all()
    for value, why in [(2.5, "must be an integer (it is i32)"), (2**31, "does not fit in i32")]:
        with pytest.raises(phobos.Error) as info:
            kernel(x, value)
        assert str(info.value) == f"error: scalar s = {value} {why}"
    assert (x == -(2**31)).all()


def test_a_read_only_output_is_refused():
    kernel = phobos.load(EXAMPLES / "add.phk")
    c = np.zeros(16, np.float32)
    c.flags.writeable = False
    with pytest.raises(phobos.Error, match="tensor c: the kernel stores to it, but the array is read-only"):
        kernel(np.ones(16, np.float32), np.ones(16, np.float32), c)


def test_kernel_errors_carry_the_command_lines_diagnostic(tmp_path):
    source = "kernel f(a: tensor<f32>[N]) {\n  a[0 :+ 4] = b\n}\n"
    with pytest.raises(phobos.Error) as info:
        phobos.from_source(source, filename="bad.phk")
    err = info.value
    assert (err.file, err.line, err.col) == ("bad.phk", 2, 15)
    assert str(err) == "bad.phk:2:15: error: unknown name 'b'\n  a[0 :+ 4] = b\n              ^"
    assert err.message == "unknown name 'b'"
    path = tmp_path / "bad.phk"
    path.write_text(source)
    with pytest.raises(phobos.Error) as from_file:
        phobos.load(path)
    assert str(from_file.value).startswith(f"{path}:2:15: error: unknown name 'b'")
    with pytest.raises(phobos.Error, match="no such file"):
        phobos.load(tmp_path / "missing.phk")


def test_sizes_that_break_a_promise_of_the_kernel_point_at_it():
    """A call whose arrays break the kernel's @aligned promise is refused before it runs, with the
    diagnostic pointing at the promise, as the command line prints it."""
    kernel = phobos.load(EXAMPLES / "matmul.phk")
    c = np.zeros((63, 64), np.float32)
    with pytest.raises(phobos.Error) as info:
        kernel(np.ones((63, 8), np.float32), np.ones((8, 64), np.float32), c, 1.0, 0.0)
    err = info.value
    assert (Path(err.file).name, err.line, err.col) == ("matmul.phk", 3, 10)
    assert str(err).splitlines()[1:] == ["@aligned(M = TILE_M, N = TILE_N, K = TILE_K)", " " * 9 + "^" * 10]
    assert err.message == "M = 63 is not a multiple of TILE_M = 32 (@aligned)"
    assert not c.any()


def test_several_kernels_need_a_name():
    source = ("kernel f(a: tensor<f32>[N]) {\n  a[0 :+ 4] = a[0 :+ 4]\n}\n"
              "kernel g(a: tensor<f32>[N]) {\n  a[0 :+ 4] = a[0 :+ 4]\n}\n")
    with pytest.raises(phobos.Error, match="several kernels"):
        phobos.from_source(source)
    assert phobos.from_source(source, kernel="g").name == "g"


def test_calls_from_several_threads():
    from concurrent.futures import ThreadPoolExecutor

    kernel = phobos.load(EXAMPLES / "axpby.phk")

    def one(seed: int):
        rng = np.random.default_rng(seed)
        x, y = (rng.standard_normal((10, 40)).astype(np.float32) for _ in range(2))
        out = np.zeros((10 + seed % 3, 40), np.float32)[:10]
        kernel(x, y, out, alpha=2.0, beta=-1.0)
        return np.array_equal(out, (np.float32(2.0) * x + np.float32(-1.0) * y))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, range(16)))


def test_torch_tensors_in_host_memory_run_on_the_interpreter_in_place():
    torch = pytest.importorskip("torch")
    kernel = phobos.load(EXAMPLES / "matmul_bf16.phk")
    arrays = random_arrays(kernel, DIMS["matmul_bf16"], seed=3)
    direct = {n: a.copy() for n, a in arrays.items()}
    kernel(**direct)
    tensors = {n: torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16 if n in "AB" else torch.float32)
               for n, a in arrays.items()}
    output = tensors["C"]
    kernel(**tensors)
    assert tensors["C"] is output  # written in place, no copy made
    assert output.numpy().tobytes() == direct["C"].tobytes()
    with pytest.raises(phobos.ArrayError, match="tensor B: not contiguous"):
        kernel(tensors["A"], tensors["B"].t().contiguous().t(), output)
    with pytest.raises(phobos.ArrayError, match="tensor A: the kernel expects bf16, got an array of float32"):
        kernel(tensors["A"].float(), tensors["B"], output)


class _GpuExporter:
    """What any DLPack exporter of GPU memory says of itself (kDLCUDA, device 0)."""

    def __dlpack__(self, **kwargs):
        raise AssertionError("its memory is never read without cupy")

    def __dlpack_device__(self):
        return (2, 0)


def test_gpu_arrays_without_cupy_are_a_one_line_error():
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("cupy is installed here")
    kernel = phobos.load(EXAMPLES / "add.phk")
    with pytest.raises(phobos.Error) as info:
        kernel(_GpuExporter(), _GpuExporter(), _GpuExporter())
    assert str(info.value) == "error: calling a kernel on GPU arrays needs cupy, which is not installed here"
