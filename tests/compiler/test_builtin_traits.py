"""compiler/builtins.py's traits: each query names exactly the built-ins with that trait, so a layer
asking `is_contraction(e)` sees every dot and nothing else."""

from __future__ import annotations

import pytest

from compiler import builtins
from compiler.frontend import ir
from compiler.frontend.source import Span

AT = Span("t.phk", 1, 1, 1, 2)


def call(name: str, args: int = 1, axis: bool = False) -> ir.Call:
    kwargs = (("axis", ir.Const(1, AT)),) if axis else ()
    return ir.Call(name, tuple(ir.Name("x", AT) for _ in range(args)), AT, kwargs=kwargs)


def named(query) -> set[str]:
    """The built-ins `query` says yes to, each called with its first accepted argument count."""
    out = set()
    for name, entry in builtins.BUILTINS.items():
        count = (entry.positional or entry.with_axis)[0]
        if query(call(name, count, axis=not entry.positional)):
            out.add(name)
    return out


@pytest.mark.parametrize("query, names", [
    (builtins.is_contraction, {"dot"}),
    (builtins.is_transpose, {"transpose"}),
    (builtins.is_broadcast, {"expand"}),
    (builtins.is_positions, {"arange"}),
    (builtins.is_select, {"where"}),
    (builtins.is_exponential, {"exp"}),
    (builtins.takes_shape, {"full"}),
    (builtins.takes_fp8, {"dot", "transpose", "f32", "i32", "bf16", "f16"}),
    (builtins.literals_adopt, {"max", "min", "where", "pow", "bit_and", "bit_or", "bit_xor",
                               "shift_left", "shift_right"}),
    (builtins.moves_data_only, {"transpose", "expand", "arange", "full", "f32", "i32", "i64", "u32",
                                "bf16", "f16"}),
])
def test_each_trait_names_its_built_ins(query, names):
    assert named(query) == names


def test_the_operators_of_folds_and_scans():
    assert builtins.pairwise(call("max", 2)) == "max" and builtins.pairwise(call("min", 2)) == "min"
    assert builtins.pairwise(call("max", 1, axis=True)) is None  # a reduction, not max(a, b)
    assert builtins.pairwise(call("pow", 2)) is None
    assert {n: builtins.combine_of(call(n)) for n in ("sum", "cumsum", "cumprod", "cummax", "exp")} == {
        "sum": "add", "cumsum": "add", "cumprod": "mul", "cummax": "max", "exp": None}
    assert builtins.is_reduction(call("sum", 1, axis=True)) and not builtins.is_reduction(call("max", 2))
    assert builtins.converts_to(call("bf16")) == "bf16" and builtins.converts_to(call("exp")) is None


def test_a_name_that_is_not_a_call_or_not_a_built_in_has_no_trait():
    assert not builtins.is_contraction(ir.Name("dot", AT))
    assert builtins.pairwise(call("load", 2)) is None and builtins.converts_to(call("nope")) is None
