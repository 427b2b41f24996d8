"""Parsing of the `NAME=VALUE` flags shared by the compiler's and the scheduler's commands."""

from __future__ import annotations

import re

from common.errors import UserError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_assignments(items: list[str] | None, flag: str, kind: type | None = int) -> dict:
    """Turn `["N=1024", "M=8"]` into `{"N": 1024, "M": 8}`.

    `kind` converts the value (int, float, or None to keep the string). A malformed item, a bad
    value or a name given twice is a user error naming the flag and the item.
    """
    out: dict = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name) or not value.strip():
            raise UserError(f"{flag} {item!r}: expected NAME=VALUE")
        if name in out:
            raise UserError(f"{flag} {name} given twice")
        if kind is None:
            out[name] = value.strip()
            continue
        try:
            out[name] = kind(value.strip())
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise UserError(f"{flag} {name}={value}: value must be {what}") from None
    return out


def parse_scalars(items: list[str] | None) -> dict[str, float]:
    """Scalars are kept as floats here and converted to each parameter's declared type later."""
    return parse_assignments(items, "--scalar", float)
