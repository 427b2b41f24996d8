"""torch.compile(fullgraph=True) traces a model with two phobos ops, without a graph break, and the
compiled model matches eager.

Backends: "aot_eager" (dynamo's graph, then AOTAutograd's functionalized forward and backward
graphs, run by eager torch; this is where the fake impl and the registered autograd are used) and
"inductor" (torch's compiler: the phobos ops stay calls, the code around them is generated C++; it
needs a C++ compiler, which CI's machine has)."""

from __future__ import annotations

import shutil

import pytest

from tests.torch_ops.helpers import inputs, linear_gelu, reference
from tests.torch_ops.torch_needed import torch


class TwoLayers(torch.nn.Module):
    def __init__(self, first, second, k: int, hidden: int, n: int):
        super().__init__()
        self.first, self.second = first, second
        g = torch.Generator().manual_seed(1)
        self.W1 = torch.nn.Parameter(torch.randn(k, hidden, generator=g) / k ** 0.5)
        self.b1 = torch.nn.Parameter(torch.randn(hidden, generator=g) * 0.1)
        self.W2 = torch.nn.Parameter(torch.randn(hidden, n, generator=g) / hidden ** 0.5)
        self.b2 = torch.nn.Parameter(torch.randn(n, generator=g) * 0.1)

    def forward(self, X):
        h = self.first(X, self.W1, self.b1)
        return self.second(h * 0.5 + 1.0, self.W2, self.b2).sum(dim=1)  # torch ops between them


class Recorder:
    """A torch.compile backend that keeps every graph dynamo hands it, then runs `inner`."""

    def __init__(self, inner: str):
        self.inner, self.graphs = inner, []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return torch._dynamo.backends.registry.lookup_backend(self.inner)(gm, example_inputs)

    def calls_of(self, *ops) -> int:
        targets = {op.torch_op for op in ops}
        return sum(1 for gm in self.graphs for node in gm.graph.nodes
                   if node.op == "call_function" and node.target in targets)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _model(backward: bool = True):
    return TwoLayers(linear_gelu(backward=backward), linear_gelu(backward=backward), 24, 40, 16)


@pytest.mark.parametrize("inner", ["aot_eager", "inductor"])
def test_two_phobos_ops_compile_into_one_graph_and_match_eager(inner):
    if inner == "inductor" and not (shutil.which("g++") or shutil.which("c++")):
        pytest.skip("inductor needs a C++ compiler; none here")
    model = _model(backward=False)
    X = inputs(33, 24, 1)[0]
    recorder = Recorder(inner)
    compiled = torch.compile(model, fullgraph=True, backend=recorder)  # a graph break raises
    with torch.no_grad():
        got, eager = compiled(X), model(X)
    assert len(recorder.graphs) == 1
    assert recorder.calls_of(model.first, model.second) == 2  # both phobos ops in the one graph
    # the same kernels on the same inputs; inductor may fuse the torch ops between them
    # differently (f32 rounding of h * 0.5 + 1.0 and of the sum), hence a tolerance there
    tolerance = {"rtol": 0, "atol": 0} if inner == "aot_eager" else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(got, eager, **tolerance)
    h = reference(X, model.W1, model.b1)
    want = reference(h * 0.5 + 1.0, model.W2, model.b2).sum(dim=1)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_compiled_training_step_gives_eagers_gradients():
    model = _model()
    X = inputs(20, 24, 1, seed=3)[0]
    model(X).square().sum().backward()
    eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    recorder = Recorder("aot_eager")
    torch.compile(model, fullgraph=True, backend=recorder)(X).square().sum().backward()
    assert len(recorder.graphs) == 1
    for got, want in zip((p.grad for p in model.parameters()), eager, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_dynamic_shapes_trace_once_for_several_batch_sizes():
    """With dynamic=True the fake impl sees symbolic sizes: one graph serves every batch size."""
    model = _model(backward=False)
    recorder = Recorder("aot_eager")
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=recorder)
    with torch.no_grad():
        for m in (5, 17, 64):
            X = inputs(m, 24, 1, seed=m)[0]
            torch.testing.assert_close(compiled(X), model(X), rtol=0, atol=0)
    assert len(recorder.graphs) == 1
