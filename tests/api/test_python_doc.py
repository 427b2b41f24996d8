"""docs/python.md stays true: every code block marked `<!-- test: cpu -->` or `<!-- test: gpu -->`
runs, as a program of its own, from a folder holding a copy of examples/ (so that relative paths
work as written and nothing is written into the checkout); GPU blocks need a GPU and torch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "python.md").read_text()
BLOCKS = re.findall(r"<!-- test: (cpu|gpu) -->\n```python\n(.*?)```", DOC, flags=re.S)


def blocks(kind: str) -> list[str]:
    return [code for k, code in BLOCKS if k == kind]


def test_the_doc_has_its_examples():
    assert len(blocks("cpu")) >= 4 and len(blocks("gpu")) >= 1
    assert DOC.count("```python") == len(BLOCKS), "every python block of the doc is tested"
    gpu = "".join(blocks("gpu"))
    assert "examples/matmul.phk" in gpu and "examples/flash_attention.phk" in gpu and "torch" in gpu


def run_block(code: str, tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(REPO), PHOBOS_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


@pytest.mark.parametrize("index", range(len(blocks("cpu"))))
def test_cpu_example_runs(index, tmp_path):
    run_block(blocks("cpu")[index], tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(blocks("gpu"))))
def test_gpu_example_runs(index, tmp_path):
    pytest.importorskip("torch")
    run_block(blocks("gpu")[index], tmp_path)
