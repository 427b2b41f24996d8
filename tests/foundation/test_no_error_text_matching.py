"""No decision reads an error's text: failures are told apart by kind (schemas/remote_errors.py
FailureKind, through `classify` or a Refused's `kind`), and the text is only shown.

Flagged: `"words" in X` (or `not in`, `startswith`) where X is an error's text: a call of
`remote_reason(...)` or `str(e)` of an exception, or a variable holding one (named reason,
message, why). The one reader of transport text, schemas/remote_errors.py, is left out.
"""

from __future__ import annotations

import ast

from common.paths import REPO_ROOT

PACKAGES = ("common", "compiler", "phobos", "pod", "scheduler", "schemas")
READER = "schemas/remote_errors.py"
TEXT_NAMES = {"reason", "message", "why"}
ERROR_NAMES = {"err", "error", "exc", "e"}


def _is_error_text(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "lower":
        return _is_error_text(node.func.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "remote_reason":
            return True
        if node.func.id == "str" and node.args and isinstance(node.args[0], ast.Name):
            return node.args[0].id in ERROR_NAMES
    return isinstance(node, ast.Name) and node.id in TEXT_NAMES


def matches_on_error_text(source: str) -> list[int]:
    """Lines of `source` that decide by an error's words."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                and isinstance(node.left.value, str) \
                and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            if any(_is_error_text(c) for c in node.comparators):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith") and _is_error_text(node.func.value):
            lines.append(node.lineno)
    return lines


def test_no_module_decides_by_the_words_of_an_error():
    found = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            name = path.relative_to(REPO_ROOT).as_posix()
            if name == READER:
                continue
            found += [f"{name}:{line}" for line in matches_on_error_text(path.read_text(encoding="utf-8"))]
    assert not found, "decide by FailureKind, not by text: " + ", ".join(found)


def test_the_check_sees_the_forms_it_forbids():
    source = '''
if "declared dead" in reason: pass
if "disconnect" in remote_reason(err).lower(): pass
if "not ready" not in str(err): pass
if message.startswith("login refused"): pass
if "x" in names: pass
'''
    assert matches_on_error_text(source) == [2, 3, 4, 5]
