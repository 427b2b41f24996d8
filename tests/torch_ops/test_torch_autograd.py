"""Autograd: the forward paired with its backward ops by name (phobos.torch, docs/torch.md).

The language has no f64 tensors, so the kernels compute in f32 (the interpreter gives their f32
meaning). torch.autograd.gradcheck runs in float64 around them: its inputs are f64, cast to f32 on
the way in and back to f64 on the way out (both differentiable). Its finite differences then see
the forward's f32 rounding: with |Y| <= about 4 here, an f32 rounding of 2^-24 * 4 over a step of
2 * eps = 2e-2 is under 1e-5; the step's own truncation error (GELU's third derivative is below
2 * 1.702^2) is below 1e-3 of the gradient's scale. Hence atol = rtol = 2e-3, far below any error
of a wrong gradient (a missing term of the GELU slope is of order 1)."""

from __future__ import annotations

import pytest

import phobos
from tests.torch_ops.helpers import inputs, kernel, linear_gelu, reference, unique
from tests.torch_ops.torch_needed import pt, torch


def _through_f32(op):
    def f(X, W, b):
        return op(X.float(), W.float(), b.float()).double()
    return f


@pytest.mark.parametrize("m,k,n", [(3, 5, 4), (9, 33, 7)])
def test_gradcheck_in_float64_through_the_interpreter(m, k, n):
    op = linear_gelu()
    X, W, b = (t.double().requires_grad_(True) for t in inputs(m, k, n, seed=m))
    assert torch.autograd.gradcheck(_through_f32(op), (X, W, b), eps=1e-2, atol=2e-3, rtol=2e-3)


def test_gradients_match_torchs_of_the_float64_reference():
    op = linear_gelu()
    X, W, b = (t.requires_grad_(True) for t in inputs(21, 40, 30, seed=5))
    G = torch.randn(21, 30, generator=torch.Generator().manual_seed(9))
    (op(X, W, b) * G).sum().backward()
    X64, W64, b64 = (t.detach().double().requires_grad_(True) for t in (X, W, b))
    (reference(X64, W64, b64) * G.double()).sum().backward()
    # f32 sums of up to 40 products of O(1) terms: 1e-5 of the scale is ~50 f32 ulps
    for got, want in ((X.grad, X64.grad), (W.grad, W64.grad), (b.grad, b64.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_only_inputs_that_need_a_gradient_are_differentiated_and_no_grad_skips_saving():
    op = linear_gelu()
    X, W, b = inputs(6, 8, 10)
    W.requires_grad_(True)
    op(X, W, b).sum().backward()
    assert X.grad is None and b.grad is None and W.grad.shape == (8, 10)
    with torch.no_grad():
        assert op(X, W, b).grad_fn is None


def test_a_backward_op_with_an_input_of_no_source_is_refused_before_registering():
    dz = pt.op(kernel("linear_gelu_dz"), name=unique("dz"))
    stray = pt.op(phobos.from_source(
        "kernel g(grad_Q: tensor<f32>[N], grad_X: tensor<f32>[N]) {\n"
        "  grad_X[0 :+ N] = grad_Q[0 :+ N]\n}\n"), name=unique("stray"))
    name = unique("fw")
    with pytest.raises(phobos.Error, match="its input grad_Q is no tensor or scalar of the forward"):
        pt.op(kernel("linear_gelu"), name=name, backward=[dz, stray])
    pt.op(kernel("linear_gelu"), name=name)  # the refused registration left the name free


def test_backward_that_makes_no_input_gradient_is_refused():
    dz = pt.op(kernel("linear_gelu_dz"), name=unique("dz_only"))
    with pytest.raises(phobos.Error, match="no op stores a gradient of a forward input"):
        pt.op(kernel("linear_gelu"), name=unique("fw_nograd"), backward=[dz])
