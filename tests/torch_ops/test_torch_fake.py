"""The fake (meta) implementation: output shapes and dtypes from the kernel's signature."""

from __future__ import annotations

import pytest

import phobos
from tests.torch_ops.helpers import linear_gelu, unique
from tests.torch_ops.torch_needed import pt, torch

FakeTensorMode = torch._subclasses.fake_tensor.FakeTensorMode


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 300, 5), (4096, 64, 12288)])
def test_fake_outputs_have_the_kernels_shapes_and_dtypes(dtype, m, k, n):
    forward = linear_gelu(dtype)
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    with FakeTensorMode():
        X, W, b = (torch.empty(s, dtype=torch_dtype) for s in [(m, k), (k, n), (n,)])
        Y = forward(X, W, b)
        assert (tuple(Y.shape), Y.dtype, Y.device.type) == ((m, n), torch_dtype, "cpu")
        # a backward step with two inputs: grad_W is [K, N] from X [M, K] and grad_Z [M, N]
        dw = forward.backward[2]
        grad_W = dw(X, torch.empty(m, n, dtype=torch_dtype))
        assert (tuple(grad_W.shape), grad_W.dtype) == ((k, n), torch_dtype)


def test_meta_tensors_get_meta_outputs_without_running_the_kernel():
    forward = linear_gelu(backward=False)
    X, W, b = (torch.empty(s, device="meta") for s in [(3, 4), (4, 6), (6,)])
    Y = forward(X, W, b)
    assert Y.device.type == "meta" and tuple(Y.shape) == (3, 6)


def test_fake_impl_refuses_a_wrong_dtype_by_the_parameters_name():
    forward = linear_gelu(backward=False)
    with FakeTensorMode(), pytest.raises(phobos.ArrayError) as info:
        forward(torch.empty(2, 3, dtype=torch.float16), torch.empty(3, 4), torch.empty(4))
    assert str(info.value) == "error: tensor X: the kernel expects f32, got torch.float16"


def test_fake_impl_refuses_a_wrong_rank():
    forward = linear_gelu(backward=False)
    wrong = r"tensor b: expected 1 dimensions, got shape \(4, 1\)"
    with FakeTensorMode(), pytest.raises(phobos.ArrayError, match=wrong):
        forward(torch.empty(2, 3), torch.empty(3, 4), torch.empty(4, 1))


FILL = """
@autotune(T in [8])
kernel fill(x: tensor<f32>[N], y: tensor<f32>[R]) {
  y[ctx.block.x * T :+ T] = 2.0
}
"""


def test_an_output_dimension_in_no_input_needs_a_pinned_value():
    k = phobos.from_source(FILL)
    with pytest.raises(phobos.Error, match=r"output y: dimension R is in no input tensor; pin it with "
                                           r"kernel.bind\(dims=\{'R': ...\}\)"):
        pt.op(k, name=unique("fill"))


def test_a_pinned_dimension_gives_the_output_its_size():
    k = phobos.from_source(FILL).bind(dims={"R": 8})
    op = pt.op(k, name=unique("fill_pinned"))
    y = op(torch.ones(3))
    assert tuple(y.shape) == (8,) and bool((y == 2.0).all())
