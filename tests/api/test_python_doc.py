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


def program_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python: this checkout first on its path, the rest kept (a GPU
    machine finds some packages on PYTHONPATH)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


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
    env = program_env(PHOBOS_CACHE_DIR=str(tmp_path / "cache"))
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


LOGGING = """
import structlog

{configure}
import phobos
from common.log import get_logger

get_logger().debug("a debug event")
get_logger().warning("a warning event")
"""


@pytest.mark.parametrize("configured", [False, True])
def test_importing_phobos_keeps_its_events_off_the_programs_stdout(configured, tmp_path):
    """Unconfigured structlog prints every level to stdout, the program's own output; phobos
    sends its warnings and errors to stderr instead, unless the program configured structlog."""
    configure = "structlog.configure(logger_factory=structlog.PrintLoggerFactory())" if configured else ""
    done = subprocess.run([sys.executable, "-c", LOGGING.format(configure=configure)], cwd=tmp_path,
                          env=program_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    if configured:  # the program's choice stands: its default processors print every level
        assert "a debug event" in done.stdout and "a warning event" in done.stdout
    else:
        assert done.stdout == "" and "a debug event" not in done.stderr
        assert "a warning event" in done.stderr
