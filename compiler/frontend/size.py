"""Symbolic sizes: the extents of tiles, polynomials over dimension and tile names.

Part of the IR (compiler/frontend/ir.py names it `ir.Size`); kept apart because its algebra is
the one part of the IR with behaviour rather than fields.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    """A polynomial with integer coefficients over symbol names (dims and tile names).

    `terms` maps a sorted tuple of symbol names (a monomial; () is the constant term) to its
    coefficient. Canonical form: no zero coefficients, sorted by monomial. Two sizes are equal
    exactly when their canonical forms are, which is what the shape checker compares.
    """

    terms: tuple[tuple[tuple[str, ...], int], ...] = ()

    @staticmethod
    def const(value: int) -> Size:
        return Size((((), value),) if value else ())

    @staticmethod
    def sym(name: str) -> Size:
        return Size((((name,), 1),))

    @staticmethod
    def _canon(acc: dict[tuple[str, ...], int]) -> Size:
        return Size(tuple(sorted((m, c) for m, c in acc.items() if c != 0)))

    def __add__(self, other: Size | int) -> Size:
        other = other if isinstance(other, Size) else Size.const(other)
        acc = dict(self.terms)
        for m, c in other.terms:
            acc[m] = acc.get(m, 0) + c
        return Size._canon(acc)

    def __neg__(self) -> Size:
        return Size(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: Size | int) -> Size:
        other = other if isinstance(other, Size) else Size.const(other)
        return self + (-other)

    def __mul__(self, other: Size | int) -> Size:
        other = other if isinstance(other, Size) else Size.const(other)
        acc: dict[tuple[str, ...], int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2))
                acc[m] = acc.get(m, 0) + c1 * c2
        return Size._canon(acc)

    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def const_value(self) -> int | None:
        return dict(self.terms).get((), 0) if self.is_const else None

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(n for m, _ in self.terms for n in m)

    def evaluate(self, env: dict[str, int]) -> int:
        """The concrete value; raises KeyError naming a symbol missing from `env`."""
        total = 0
        for m, c in self.terms:
            v = c
            for n in m:
                v *= env[n]
            total += v
        return total

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in self.terms:
            body = "*".join(m)
            if not m:
                parts.append(str(c))
            elif c == 1:
                parts.append(body)
            else:
                parts.append(f"{c}*{body}")
        return " + ".join(parts)
