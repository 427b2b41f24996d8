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


def _reference_row(name: str) -> str:
    """The row of the doc's Reference whose first cell names `phobos.<name>`."""
    table = DOC.split("## Reference", 1)[1].splitlines()
    rows = [line for line in table if re.search(rf"`(await )?phobos\.{name}\b", line.split(" | ")[0])]
    assert len(rows) == 1, f"phobos.{name}: {len(rows)} rows in docs/python.md's Reference"
    return rows[0]


def test_every_public_name_is_in_the_reference():
    """The public surface is what docs/python.md's Reference lists: every name of `phobos` and
    every public member of its classes; anything else carries a leading underscore."""
    import dataclasses

    import phobos

    assert {n for n in vars(phobos) if not n.startswith("_")} == set(phobos.__all__) - {"JobFailed"}
    assert phobos.JobFailed.__name__ == "JobFailed"  # imported on first use (see phobos/__init__.py)
    for name in phobos.__all__:
        _reference_row(name)
    error = set(vars(phobos.Error("error: x", "x")))
    members = {
        "Kernel": set(vars(phobos.Kernel)),
        "ClusterJob": set(vars(phobos.ClusterJob)) | {"base_dir"},
        "JobResult": set(vars(phobos.JobResult)) | {f.name for f in dataclasses.fields(phobos.JobResult)},
        "Error": error,
        "ArrayError": set(vars(phobos.ArrayError("t", "x"))) - error,
        "Interrupted": {"exit_code"},
    }
    for cls, names in members.items():
        row = _reference_row(cls)
        for member in sorted(n for n in names if not n.startswith("_")):
            assert f"`{member}" in row, f"phobos.{cls}.{member} is public but not in docs/python.md"
