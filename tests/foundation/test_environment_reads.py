"""One module reads the process environment: common/options.py (its `Options`, one field per
variable, with the defaults written down once). Everything else in phobos's packages asks it.

Flagged: any use of `os.environ`, `os.getenv`, `os.putenv`, `os.unsetenv`, `os.environb`, or
an import of them, outside common/options.py. Left out, as harnesses rather than phobos: tests/,
benchmarks/ and tools/ (they build the environments of the real processes they start).
"""

from __future__ import annotations

import ast

from common.paths import REPO_ROOT

PACKAGES = ("common", "compiler", "phobos", "pod", "scheduler", "schemas")
READER = "common/options.py"
NAMES = {"environ", "environb", "getenv", "putenv", "unsetenv"}


def environment_uses(source: str) -> list[int]:
    """Lines of `source` that touch the environment other than through common/options.py."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in NAMES \
                and isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                and any(a.name in NAMES for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_check_sees_each_form():
    source = ("import os\nfrom os import environ\na = os.environ.get('X')\nb = os.getenv('Y')\n"
              "os.environ['Z'] = '1'\nc = options.current().token\n")
    assert environment_uses(source) == [2, 3, 4, 5]


def test_only_common_options_reads_the_environment():
    found = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            rel = path.relative_to(REPO_ROOT).as_posix()
            if rel == READER:
                continue
            found += [f"{rel}:{line}" for line in environment_uses(path.read_text(encoding="utf-8"))]
    assert not found, "read the environment through common/options.py (options.current()): " + \
        ", ".join(found)


def test_common_options_reads_each_variable_it_documents():
    from common import options

    doc = options.__doc__
    for field in options.Options._fields:
        assert f"({field}, " in doc, f"common/options.py's table lacks the field {field}"
