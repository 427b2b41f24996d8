"""What a CPU pod loads before its first job: nothing that only some jobs need (checked in a fresh
interpreter; each module named here was once imported at a module's top)."""

from __future__ import annotations

import subprocess
import sys

from tests.pod.test_pod_cli import REPO, pod_env


def test_a_cpu_pod_ready_for_its_first_job_has_not_loaded_ml_dtypes():
    """ml_dtypes (bf16 only, about 10 ms) loads with the first bf16 tensor (common/storage.py),
    not with the server, the CPU backend or the modules a first job needs."""
    probe = ("import importlib, sys, pod.cli, pod.server\n"
             "backend = pod.cli.make_backend('cpu')\n"
             "for name in pod.cli.FIRST_JOB_MODULES['cpu']:\n"
             "    importlib.import_module(name)\n"
             "print('compiler.interp.interpreter' in sys.modules, 'ml_dtypes' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=pod_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]
