"""Mutated example kernels either check or fail with a CompileError: never an internal exception.

Mutations work on token boundaries (delete a token, replace it, or insert one after it) with
tokens drawn from the examples themselves, so most mutants are nearly valid programs that reach
deep into the parser and checker. The seed is fixed: a failure here is reproducible.
"""

from __future__ import annotations

import random

import pytest

from common.paths import repo_file
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.lexer import tokenize
from compiler.frontend.load import load_text

SOURCES = [p.read_text() for p in sorted(repo_file("examples").glob("*.phk"))]
EXTRA_TOKENS = ["\n", "0", "-1", "1.5", "ctx.block.z", "ctx.block.y", "true", ":", ":+", "[", "]", "(", ")"]


def _pool() -> list[str]:
    texts = {t.text for s in SOURCES for t in tokenize(s, "x.phk") if t.kind != "eof"}
    return sorted(texts) + EXTRA_TOKENS


def mutate(source: str, rng: random.Random, pool: list[str]) -> str:
    for _ in range(rng.randint(1, 3)):
        try:
            tokens = [t for t in tokenize(source, "x.phk") if t.kind != "eof"]
        except CompileError:
            return source
        tok = rng.choice(tokens)
        roll = rng.random()
        replacement = (
            "" if roll < 0.33 else rng.choice(pool) if roll < 0.66 else tok.text + " " + rng.choice(pool)
        )
        source = source[: tok.offset] + replacement + source[tok.end_offset :]
    return source


@pytest.mark.parametrize("seed", range(2))
def test_mutants_fail_cleanly(seed):
    rng = random.Random(seed)
    pool = _pool()
    outcomes = {"ok": 0, "error": 0}
    for _ in range(150):
        mutant = mutate(rng.choice(SOURCES), rng, pool)
        try:
            load_text(mutant, "mutant.phk")
            outcomes["ok"] += 1
        except CompileError as err:
            text = err.render()
            assert text.startswith("mutant.phk:"), text
            assert "Traceback" not in text and ".py" not in text
            outcomes["error"] += 1
    assert outcomes["error"] > 50  # the mutations really do break programs
