"""Affine forms of i32 index expressions.

`affine_of(expr, env)` writes a checked i32 expression as `const + sum(coeff_k * var_k)` where the
variables are the runtime values of one CTA: block indices ("block.x", "block.y", "block.z"),
loop variables and i32 scalar parameters (by name). Coefficients and the constant are `Size`s, so
dims and tile names stay symbolic (`ctx.block.x * BLOCK` is the term ("block.x", BLOCK)).

The checker uses it to find grid axes; the cluster compiler and the CUDA code generator use it
to reason about which elements a slice touches. Anything that is not affine (min(...), a product
of two runtime variables, division, a `var`) gives None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from compiler.frontend import ir
from compiler.frontend.ir import Size

BLOCK_KEYS = ("block.x", "block.y", "block.z")


@dataclass(frozen=True)
class Affine:
    """`const + sum(coeff * var)`; `terms` sorted by variable key, no zero coefficients."""

    terms: tuple[tuple[str, Size], ...] = ()
    const: Size = Size()

    @staticmethod
    def constant(value: Size) -> Affine:
        return Affine((), value)

    @staticmethod
    def variable(key: str) -> Affine:
        return Affine(((key, Size.const(1)),), Size())

    @property
    def is_constant(self) -> bool:
        return not self.terms

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.terms)

    def coeff(self, key: str) -> Size:
        return dict(self.terms).get(key, Size())

    def block_terms(self) -> tuple[tuple[str, Size], ...]:
        """The terms of block indices, keyed "x", "y", "z"."""
        return tuple((k.removeprefix("block."), c) for k, c in self.terms if k in BLOCK_KEYS)

    def __add__(self, other: Affine) -> Affine:
        acc = dict(self.terms)
        for k, c in other.terms:
            acc[k] = acc.get(k, Size()) + c
        return Affine(_canon(acc), self.const + other.const)

    def __neg__(self) -> Affine:
        return Affine(tuple((k, -c) for k, c in self.terms), -self.const)

    def __sub__(self, other: Affine) -> Affine:
        return self + (-other)

    def scale(self, factor: Size) -> Affine:
        return Affine(_canon({k: c * factor for k, c in self.terms}), self.const * factor)

    def __str__(self) -> str:
        parts = [f"({c})*{k}" if c != Size.const(1) else k for k, c in self.terms]
        if self.const.terms or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


def _canon(acc: Mapping[str, Size]) -> tuple[tuple[str, Size], ...]:
    return tuple(sorted((k, c) for k, c in acc.items() if c.terms))


def affine_of(expr: ir.Expr, env: Mapping[str, ir.Expr]) -> Affine | None:
    """The affine form of a checked i32 scalar expression, or None if it is not affine.

    `env` maps the names of lets in scope to their (checked) values; `walk.iter_stmts_with_env`
    builds it while walking a body. Names must carry their `kind` (set by the checker)."""
    if isinstance(expr, ir.Const):
        if isinstance(expr.value, bool) or not isinstance(expr.value, int):
            return None
        return Affine.constant(Size.const(expr.value))
    if isinstance(expr, ir.BlockIndex):
        return Affine.variable("block." + expr.axis)
    if isinstance(expr, ir.Name):
        if expr.kind in ("dim", "tile"):
            return Affine.constant(Size.sym(expr.name))
        if expr.kind == "loop" or (expr.kind == "scalar" and expr.ty == ir.I32):
            return Affine.variable(expr.name)
        if expr.kind == "let" and expr.name in env:
            return affine_of(env[expr.name], env)
        return None
    if isinstance(expr, ir.UnaryOp) and expr.op == "-":
        inner = affine_of(expr.operand, env)
        return None if inner is None else -inner
    if isinstance(expr, ir.BinOp) and expr.op in ("+", "-", "*"):
        lhs = affine_of(expr.lhs, env)
        rhs = affine_of(expr.rhs, env)
        if lhs is None or rhs is None:
            return None
        if expr.op == "+":
            return lhs + rhs
        if expr.op == "-":
            return lhs - rhs
        if lhs.is_constant:
            return rhs.scale(lhs.const)
        if rhs.is_constant:
            return lhs.scale(rhs.const)
        return None
    return None
