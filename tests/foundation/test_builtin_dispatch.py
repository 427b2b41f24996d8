"""Built-ins are dispatched through compiler/builtins.py's table, never by comparing a call's name.

A layer that asks `e.func == "dot"` misses the next built-in with the same trait and hides what it
depends on; it asks the table instead (`builtins.is_contraction(e)`, `builtins.pairwise(e)`, ...).
This reads every comparison in the library code whose one side is a call's `.func` (or a bare
`func`/`f` name holding one) and the other a string or a collection of strings."""

from __future__ import annotations

import ast

from common.paths import REPO_ROOT

PACKAGES = ("common", "compiler", "phobos", "pod", "scheduler", "schemas")
TABLE = REPO_ROOT / "compiler" / "builtins.py"  # the one place that names them


def _is_name_of_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "func") or (
        isinstance(node, ast.Name) and node.id in ("func", "f"))


def _is_strings(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and all(_is_strings(x) for x in node.elts)
    return False


def string_dispatch_sites() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path == TABLE:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Compare):
                    continue
                sides = [node.left, *node.comparators]
                if any(map(_is_name_of_call, sides)) and any(map(_is_strings, sides)):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_layer_dispatches_a_built_in_by_its_name():
    sites = string_dispatch_sites()
    assert not sites, "ask compiler/builtins.py's table instead:\n" + "\n".join(sites)


def test_the_check_sees_a_name_comparison():
    tree = ast.parse('if e.func == "dot" or func in ("min", "max"):\n    pass\n')
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert len(compares) == 2
    assert all(any(map(_is_name_of_call, [c.left, *c.comparators])) for c in compares)
    assert all(any(map(_is_strings, [c.left, *c.comparators])) for c in compares)
