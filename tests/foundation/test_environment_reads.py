"""One module reads the process environment: common/options.py (its `Options`, one field per
variable, with the defaults written down once). Everything else in phobos's packages asks it.

Flagged: any use of `os.environ`, `os.getenv`, `os.putenv`, `os.unsetenv`, `os.environb`, or
an import of them, outside common/options.py. Left out, as harnesses rather than phobos: tests/,
benchmarks/ and tools/ (they build the environments of the real processes they start).

`options.variable(name)`, the raw read of one variable, is for names chosen at run time only: its
callers are the RAW_READERS below, each with its reason; a fixed name gets a field of `Options`.
"""

from __future__ import annotations

import ast

from common.paths import REPO_ROOT

PACKAGES = ("common", "compiler", "phobos", "pod", "scheduler", "schemas")
READER = "common/options.py"
NAMES = {"environ", "environb", "getenv", "putenv", "unsetenv"}
RAW_READERS = {
    "common/blas.py": "the BLAS thread counts, saved by name before this process sets them to 1",
    "scheduler/running/leaf_ptx.py": "the compiled-leaf cache's key: the code switches, by name",
}


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


def raw_reads(source: str) -> list[int]:
    """Lines of `source` that call `options.variable(...)` or `variable(...)` imported from it."""
    tree = ast.parse(source)
    imported = any(isinstance(n, ast.ImportFrom) and n.module == "common.options"
                   and any(a.name == "variable" for a in n.names) for n in ast.walk(tree))
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "variable" and isinstance(f.value, ast.Name) \
                and f.value.id == "options" or imported and isinstance(f, ast.Name) and f.id == "variable":
            lines.append(node.lineno)
    return sorted(lines)


def test_the_raw_read_check_sees_each_form():
    source = ("from common import options\nfrom common.options import variable\n"
              "a = options.variable('X')\nb = variable('Y')\nc = options.current().token\n")
    assert raw_reads(source) == [3, 4]


def test_raw_reads_of_one_variable_only_where_names_are_chosen_at_run_time():
    callers = set()
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            rel = path.relative_to(REPO_ROOT).as_posix()
            if rel != READER and raw_reads(path.read_text(encoding="utf-8")):
                callers.add(rel)
    assert callers <= set(RAW_READERS), "a fixed variable gets a field of common/options.py's Options: " + \
        ", ".join(sorted(callers - set(RAW_READERS)))
    gone = set(RAW_READERS) - callers
    assert not gone, f"no longer raw readers, drop them from RAW_READERS: {sorted(gone)}"


def test_common_options_reads_each_variable_it_documents():
    from common import options

    doc = options.__doc__
    for field in options.Options._fields:
        assert f"({field}, " in doc, f"common/options.py's table lacks the field {field}"
