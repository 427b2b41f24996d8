"""docs/language.md stays true to the code: its kernels check and its stated rules hold."""

from __future__ import annotations

import re

from common.paths import repo_file
from compiler.frontend.load import load_text
from compiler.frontend.parser import expand_search_values

DOC = repo_file("docs/language.md").read_text()


def code_blocks() -> list[str]:
    return re.findall(r"```\n(.*?)```", DOC, flags=re.S)


def test_first_example_checks():
    module = load_text(code_blocks()[0], "doc.phk")
    assert [(g.axis, g.dim, g.tile) for g in module.kernels[0].grid] == [("x", "N", "BLOCK")]


def test_expansion_examples():
    assert expand_search_values((64,)) == (64,)
    assert expand_search_values((16, 100)) == (16, 32, 64, 100)
    assert expand_search_values((32, 48, 64)) == (32, 48, 64)
    assert "`BLOCK in [16, 100]` → 16, 32, 64, 100" in DOC


def test_keywords_listed_match_lexer():
    from compiler.frontend.lexer import KEYWORDS

    listed = re.search(r"\*\*Keywords\*\*: `([^`]*)`", DOC).group(1).split()
    assert set(listed) == set(KEYWORDS)


def test_builtins_listed_match_checker():
    from compiler.builtins import BUILTINS as SIGNATURES

    section = DOC.split("## 8. Built-in functions")[1].split("## 9.")[0]
    documented = set(re.findall(r"^\| `(\w+)\(", section, flags=re.M))
    documented |= set(re.findall(r", `(\w+)\(", section))
    assert documented == set(SIGNATURES) | {"load"}


def test_depth_limits_stated_match_parser():
    from compiler.frontend.parse_expr import MAX_EXPR_DEPTH, MAX_NESTING

    section = DOC.split("### 12.1 Limits")[1].split("## 13.")[0]
    assert f"at most **{MAX_NESTING}** levels" in section
    assert f"nested too deeply: more than {MAX_NESTING} levels" in section
    assert f"is at most **{MAX_EXPR_DEPTH}** deep" in section
    assert f"expression too deep: more than {MAX_EXPR_DEPTH} operators" in section
