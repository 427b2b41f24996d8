"""The torch ops on the GPU (marked gpu: skipped without one): the compiled kernels on torch's
current stream, inside a captured CUDA graph, and the linear+GELU gradients in bf16.

    .venv/bin/pytest tests/torch_ops -m gpu -q     (torch with CUDA and cupy installed)
"""

from __future__ import annotations

import pytest

from tests.torch_ops.helpers import inputs, linear_gelu, reference
from tests.torch_ops.torch_needed import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def torch_sees_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA (a CPU build, or no driver)")


def test_gpu_forward_matches_the_interpreter():
    op = linear_gelu(backward=False)
    X, W, b = inputs(300, 96, 200, seed=2)
    want = op(X, W, b)  # CPU tensors: the reference interpreter
    got = op(*(t.cuda() for t in (X, W, b)))
    assert got.device.type == "cuda"
    # f32 on both: the same products, sums of 96 in another order, and the GPU's expf
    torch.testing.assert_close(got.cpu(), want, rtol=2e-5, atol=2e-5)


def test_cuda_graph_capture_and_replay():
    """Capture fails on any host synchronisation or cupy allocation inside the call: the op may
    only allocate through torch (the graph's private pool) and launch on torch's stream."""
    op = linear_gelu(backward=False)
    X, W, b = (t.cuda() for t in inputs(128, 64, 96, seed=4))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compiles, tunes and loads the kernel before capture
        for _ in range(3):
            op(X, W, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        Y = op(X, W, b) * 2.0
    for seed in (5, 6):
        X2, W2, b2 = inputs(128, 64, 96, seed=seed)
        X.copy_(X2)
        W.copy_(W2)
        b.copy_(b2)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(Y.cpu(), op(X2, W2, b2) * 2.0, rtol=2e-5, atol=2e-5)


def test_compiled_model_in_a_cuda_graph():
    """torch.compile's "cudagraphs" backend: dynamo's graph with both ops, replayed as a CUDA graph."""
    first, second = linear_gelu(backward=False), linear_gelu(backward=False)
    X, W1, b1 = (t.cuda() for t in inputs(64, 32, 48, seed=7))
    W2, b2 = (t.cuda() for t in inputs(1, 48, 16, seed=8)[1:])

    def model(X):
        return second(first(X, W1, b1), W2, b2)

    compiled = torch.compile(model, fullgraph=True, backend="cudagraphs")
    for _ in range(3):
        got = compiled(X)
    torch.testing.assert_close(got, model(X), rtol=0, atol=0)


def test_bf16_gradients_on_the_gpu_match_the_interpreter_and_the_float64_reference():
    """gradcheck's finite differences cannot resolve bf16 (8 significant bits), so the check is
    the analytic gradients of the GPU against the interpreter's (the meaning of the bf16 kernels)
    and both against torch's float64 gradients of the reference. bf16 stores round each value to
    2^-8 of itself; grad_Z is stored in bf16 and feeds grad_X, grad_W, grad_b: a few bf16 roundings
    of the gradients' scale."""
    op = linear_gelu("bf16")
    X, W, b = inputs(64, 48, 80, dtype=torch.bfloat16, seed=11)
    G = torch.randn(64, 80, generator=torch.Generator().manual_seed(12)).bfloat16()

    def grads(device: str):
        # detached: on the CPU, .to("cpu") is the input itself, which would then require grad
        # and make the float64 copies below non-leaf tensors without a .grad
        ts = [t.detach().to(device).requires_grad_(True) for t in (X, W, b)]
        op(*ts).backward(G.to(device))
        return [t.grad.float().cpu() for t in ts]

    gpu, cpu = grads("cuda"), grads("cpu")
    X64, W64, b64 = (t.detach().double().requires_grad_(True) for t in (X, W, b))
    reference(X64, W64, b64).backward(G.double())
    for got, meant, exact in zip(gpu, cpu, (X64.grad, W64.grad, b64.grad), strict=True):
        scale = float(exact.abs().max())
        torch.testing.assert_close(got, meant, rtol=2 ** -7, atol=2 ** -7 * scale)
        torch.testing.assert_close(got.double(), exact, rtol=2 ** -5, atol=2 ** -5 * scale)
