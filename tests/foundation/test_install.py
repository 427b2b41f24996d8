"""`pip install .` gives phobos, phobos-sched and phobos-pod, usable from any folder with paths
relative to it; and the README's tour runs top to bottom as written, in a scratch folder.

The install is offline and quick: no dependencies (the test's own environment has them), no build
isolation (setuptools and wheel come from the lock file), into a target folder, from a copy of
the sources so that nothing (build/, *.egg-info) is written into the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from common.paths import REPO_ROOT

PACKAGES = ("phobos", "common", "compiler", "scheduler", "pod", "schemas")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The environment in which the three commands are on PATH."""
    root = tmp_path_factory.mktemp("install")
    source = root / "source"
    source.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", source / "pyproject.toml")
    ignore = shutil.ignore_patterns("__pycache__", "BUILD.bazel")
    for package in PACKAGES:
        shutil.copytree(REPO_ROOT / package, source / package, ignore=ignore)
    target = root / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--disable-pip-version-check", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True, cwd=root)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BUILD_WORKING_DIRECTORY")}
    # The commands run under this interpreter (their #! line), which has the dependencies; the
    # target folder stands in for site-packages.
    path = [str(target / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")]
    env["PATH"] = os.pathsep.join(path)
    env["PYTHONPATH"] = str(target)
    return env


def _run(env, cwd, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_commands_work_from_any_folder_with_relative_paths(installed, tmp_path):
    work = tmp_path / "somewhere" / "else"
    work.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "examples" / "add.phk", work / "add.phk")
    np.save(work / "a.npy", np.arange(3000, dtype=np.float32))
    np.save(work / "b.npy", np.ones(3000, np.float32))
    done = _run(installed, work, "phobos", "check", "add.phk")
    assert done.returncode == 0, done.stderr
    done = _run(installed, work, "phobos", "run", "add.phk", "--tensor", "a=a.npy", "--tensor", "b=b.npy",
                "--tensor", "c=c_local.npy")
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(work / "c_local.npy"), np.arange(3000) + 1.0)
    done = _run(installed, work, "phobos-sched", "new-job", "add.phk", "--cluster", "BLOCK=1024",
                "--tensor", "a=file:a.npy", "--tensor", "b=file:b.npy", "--tensor", "c=file:c.npy",
                "-o", "add.capnp")
    assert done.returncode == 0, done.stderr
    done = _run(installed, work, "phobos-sched", "add.capnp", "--expect", "c=c_local.npy")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "c matches the expected values" in done.stdout
    done = _run(installed, work, "phobos-pod", "--help")
    assert done.returncode == 0 and "--listen" in done.stdout
    done = _run(installed, work, "python3", "-c", "import phobos; print(phobos.load('add.phk').name)")
    assert done.returncode == 0 and done.stdout.strip() == "add", done.stderr  # the Python API too
    done = _run(installed, work, "phobos", "run", "missing.phk")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr


def tour_commands() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    match = re.search(r"^## A tour\n.*?```sh\n(.*?)```", readme, re.S | re.M)
    assert match, "README.md has no '## A tour' section with a sh block"
    return match.group(1)


def test_the_readme_tour_runs_as_written(installed, tmp_path):
    """From a copy of the checkout's examples, as the tour's first line expects; every file it
    writes lands in its scratch folder (TMPDIR points mktemp there)."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / "examples", checkout / "examples")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = "set -euo pipefail\n" + tour_commands() + "\nls\n"
    done = subprocess.run(["bash", "-c", script], env={**installed, "TMPDIR": str(scratch)}, cwd=checkout,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder,) = scratch.iterdir()
    assert {"c1000.npy", "c4194304.npy", "add.capnp", "run.html"} <= {p.name for p in folder.iterdir()}
    assert f"wrote {folder / 'run.html'} (HTML report)" in done.stdout  # the scheduler says where
    a, b, c = (np.load(folder / f"{t}4194304.npy") for t in "abc")
    np.testing.assert_array_equal(c, a + b)
    assert sorted(p.name for p in checkout.iterdir()) == ["examples"]  # nothing written in the checkout


def test_the_readmes_activate_step_puts_the_commands_on_path(tmp_path):
    """README, "Installed commands": after `pip install .` into a virtual environment, `source
    VENV/bin/activate` is what puts phobos, phobos-sched and phobos-pod on PATH. A real venv
    (without pip of its own: this interpreter's packages, pip included, reach it through a .pth
    file), installed offline from a copy of the sources."""
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", source / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(REPO_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--disable-pip-version-check", str(source)],
                   check=True, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"  # none of the commands is on it before the activation
    script = (f"! command -v phobos && source {venv}/bin/activate && "
              "for c in phobos phobos-sched phobos-pod; do command -v $c; $c --help | head -1; done")
    done = subprocess.run(["bash", "-c", script], env=env, cwd=elsewhere, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0::2] == [str(venv / "bin" / c) for c in ("phobos", "phobos-sched", "phobos-pod")]
    assert all(line.startswith("usage: ") for line in lines[1::2]), done.stdout
