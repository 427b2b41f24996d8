"""phobos.torch.op registers a torch.library custom op; a second registration of a name is refused."""

from __future__ import annotations

import pytest

import phobos
from tests.torch_ops.helpers import inputs, kernel, linear_gelu, reference, unique
from tests.torch_ops.torch_needed import pt, torch


def test_the_op_is_a_torch_library_op_with_the_kernels_schema():
    name = unique("lg")
    op = pt.op(kernel("linear_gelu"), name=name)
    namespace, short = name.split("::")
    overload = getattr(getattr(torch.ops, namespace), short).default
    assert overload.name() == name and op.torch_op.name() == name
    assert str(overload._schema) == f"{name}(Tensor X, Tensor W, Tensor b) -> Tensor"
    assert op.inputs == ("X", "W", "b") and op.outputs == ("Y",)


def test_a_name_without_namespace_lands_in_phobos():
    short = unique("plain").split("::")[1]
    op = pt.op(kernel("linear_gelu"), name=short)
    assert op.qualname == f"phobos::{short}"
    assert getattr(torch.ops.phobos, short).default.name() == op.qualname


def test_opcheck_passes_schema_fake_and_autograd_registration():
    """torch's own checker: the schema matches what the op does (no input mutated or aliased),
    the fake impl agrees with the real outputs, the autograd registration is consistent."""
    op = linear_gelu()
    X, W, b = inputs(16, 8, 24)
    for t in (X, W, b):
        t.requires_grad_(True)
    torch.library.opcheck(op.torch_op, (X, W, b))


def test_eager_call_matches_the_float64_reference():
    op = linear_gelu(backward=False)
    X, W, b = inputs(37, 19, 45)  # no dimension a multiple of a tile: edge tiles are masked
    Y = op(X, W, b)
    assert Y.shape == (37, 45) and Y.dtype == torch.float32
    # f32 sums of 19 products and an f32 sigmoid: a few f32 ulps of the output's scale
    torch.testing.assert_close(Y.double(), reference(X, W, b), rtol=1e-5, atol=1e-5)


def test_registering_one_name_twice_is_refused_clearly():
    name = unique("twice")
    pt.op(kernel("linear_gelu"), name=name)
    with pytest.raises(phobos.Error) as info:
        pt.op(kernel("linear_gelu_db"), name=name)
    assert str(info.value) == (f"error: torch op {name} is already registered (kernel linear_gelu); "
                               "give this one another name")


def test_a_name_torch_already_knows_is_refused():
    name = unique("foreign")
    namespace, short = name.split("::")
    lib = torch.library.Library(namespace, "FRAGMENT")
    lib.define(f"{short}(Tensor x) -> Tensor")
    with pytest.raises(phobos.Error, match=f"torch op {name} cannot be registered"):
        pt.op(kernel("linear_gelu"), name=name)


@pytest.mark.parametrize("bad", ["a::b::c", "has space::x", "ns::", "::x", "ns::1st"])
def test_a_malformed_name_is_refused(bad):
    with pytest.raises(phobos.Error, match="must be 'namespace::name' of two identifiers"):
        pt.op(kernel("linear_gelu"), name=bad)


def test_only_phobos_kernels_are_taken():
    with pytest.raises(phobos.Error, match="takes a phobos.Kernel"):
        pt.op(lambda x: x, name=unique("notakernel"))


def test_outputs_must_be_tensor_parameters():
    with pytest.raises(phobos.Error, match="outputs: Z is not a tensor parameter of kernel linear_gelu"):
        pt.op(kernel("linear_gelu"), name=unique("badout"), outputs=["Z"])
