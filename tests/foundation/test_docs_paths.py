"""The docs name files that exist: every `folder/file.py` a page of docs/ or the README writes is a
file of the repo, so that the module map (docs/architecture.md) and the guides follow a move.

A name is looked up as a path from the repo's root, then as the end of a file's path (docs write
`cuda/stages.py`, `mainloops/tma_ws/ring.py`, `backends/gpu_leaves.py`). Names under tests/ are
left out: a test target's runfiles hold only its own folder of tests.
"""

from __future__ import annotations

import re

from common.paths import REPO_ROOT

PAGES = ("README.md", "docs/*.md")
FOLDERS = ("benchmarks", "common", "compiler", "examples", "phobos", "pod", "scheduler", "schemas", "tools")
NAME = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.py)\b")


def named_paths(text: str) -> list[tuple[int, str]]:
    """(line, name) of every folder/file.py in `text`."""
    return [(n, m.group(1)) for n, line in enumerate(text.splitlines(), 1) for m in NAME.finditer(line)]


def missing(names: list[tuple[int, str]], files: set[str]) -> list[tuple[int, str]]:
    return [(n, name) for n, name in names if not name.startswith("tests/") and name not in files
            and not any(f.endswith("/" + name) for f in files)]


def test_the_check_finds_names_and_their_files():
    text = "see `compiler/cuda/stages.py` and cuda/stages.py,\nmainloops/x.py; not a.b/c.py or stages.py"
    assert named_paths(text) == [(1, "compiler/cuda/stages.py"), (1, "cuda/stages.py"), (2, "mainloops/x.py")]
    assert missing(named_paths(text), {"compiler/cuda/stages.py"}) == [(2, "mainloops/x.py")]


def test_every_file_the_docs_name_exists():
    files = {p.relative_to(REPO_ROOT).as_posix()
             for folder in FOLDERS for p in (REPO_ROOT / folder).rglob("*.py")}
    pages = [p for pattern in PAGES for p in sorted(REPO_ROOT.glob(pattern))]
    assert len(pages) > 5
    stale = [f"{page.relative_to(REPO_ROOT)}:{n}: {name}" for page in pages
             for n, name in missing(named_paths(page.read_text(encoding="utf-8")), files)]
    assert not stale, "the docs name files that are not there (moved?): " + ", ".join(stale)
