"""The IR printer writes the language's own syntax: printing and parsing again gives the same IR."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.paths import repo_file
from compiler.frontend import ir
from compiler.frontend.check import check_kernel
from compiler.frontend.ir_print import format_expr, format_module
from compiler.frontend.load import load_text
from compiler.frontend.parser import parse
from compiler.frontend.source import UNKNOWN_SPAN
from compiler.frontend.walk import without_spans as strip_spans

EXAMPLES = sorted({*repo_file("examples").rglob("*.phk"), *repo_file("tests/cluster/kernels").glob("*.phk")})


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_parsed_example_round_trips(path):
    parsed = parse(path.read_text(), "ex.phk")
    again = parse(format_module(parsed), "printed.phk")
    assert strip_spans(again) == strip_spans(parsed)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_checked_example_round_trips_with_types(path):
    checked = load_text(path.read_text(), "ex.phk")
    printed = format_module(checked)
    assert strip_spans(load_text(printed, "printed.phk")) == strip_spans(checked)
    assert "// tile<f32>" in printed or "// i32" in printed  # types are shown


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_checking_a_checked_kernel_again_changes_nothing(path):
    """The cluster compiler checks leaves it rewrote from checked IR (no print, no parse)."""
    text = path.read_text()
    for kernel in load_text(text, "ex.phk").kernels:
        assert check_kernel(kernel, text) == kernel  # spans, types, kinds, dot precisions alike


# ---- random expressions: precedence and associativity survive printing ----------------------

S = UNKNOWN_SPAN
atoms = st.one_of(
    st.integers(0, 99).map(lambda v: ir.Const(v, S)),
    st.sampled_from([0.5, 2.0, 1e-3, float("inf")]).map(lambda v: ir.Const(v, S)),
    st.sampled_from(["x", "y", "n"]).map(lambda n: ir.Name(n, S)),
    st.sampled_from(["x", "y", "z"]).map(lambda a: ir.BlockIndex(a, S)),
)


def _extend(children):
    binop = st.builds(
        lambda op, a, b: ir.BinOp(op, a, b, S),
        st.sampled_from(["+", "-", "*", "/", "%", "<", "==", "and", "or"]),
        children,
        children,
    )
    unary = st.builds(lambda op, a: ir.UnaryOp(op, a, S), st.sampled_from(["-", "not"]), children)
    call = st.builds(
        lambda f, a, b: ir.Call(f, (a, b), S), st.sampled_from(["max", "min"]), children, children
    )
    return st.one_of(binop, unary, call)


expressions = st.recursive(atoms, _extend, max_leaves=12)


def _fold_negated_literals(e):
    """The parser folds `-<literal>` into a negative literal; mirror that before comparing."""
    if isinstance(e, ir.UnaryOp):
        inner = _fold_negated_literals(e.operand)
        if e.op == "-" and isinstance(inner, ir.Const) and not isinstance(inner.value, bool):
            return ir.Const(-inner.value, S)
        return ir.UnaryOp(e.op, inner, S)
    if isinstance(e, ir.BinOp):
        return ir.BinOp(e.op, _fold_negated_literals(e.lhs), _fold_negated_literals(e.rhs), S)
    if isinstance(e, ir.Call):
        return ir.Call(e.func, tuple(_fold_negated_literals(a) for a in e.args), S)
    return e


@settings(max_examples=300, deadline=None)
@given(expressions)
def test_random_expression_round_trips(expr):
    source = f"kernel k(t: tensor<f32>[N]) {{\n  let v = {format_expr(expr)}\n}}\n"
    parsed = parse(source, "rt.phk").kernels[0].body[0].value
    assert strip_spans(parsed) == strip_spans(_fold_negated_literals(expr)), format_expr(expr)
