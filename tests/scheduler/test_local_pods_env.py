"""BLAS threads of our processes (common/blas.py): local CPU pods share the host's cores, GPU pods
and the command itself run one, and what the user set reaches the pods unchanged."""

import os
import subprocess
import sys

from common import blas
from common.blas import THREAD_VARIABLES, pod_threads, user_environment


def test_cores_are_shared_among_cpu_pods(monkeypatch):
    """Each pod's share of the cores, divided among its two compute workers."""
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert pod_threads(["cpu"] * 4, {}) == dict.fromkeys(THREAD_VARIABLES, "2")
    assert pod_threads(["cpu"] * 16, {}) == dict.fromkeys(THREAD_VARIABLES, "1")
    assert pod_threads(["cpu"], {}) == dict.fromkeys(THREAD_VARIABLES, "8")
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert pod_threads(["cpu"], {}) == dict.fromkeys(THREAD_VARIABLES, "1")


def test_gpu_pods_run_one_thread_and_user_settings_stand(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert pod_threads(["0", "1"], {}) == dict.fromkeys(THREAD_VARIABLES, "1")
    assert "OPENBLAS_NUM_THREADS" not in pod_threads(["cpu", "cpu"], {"OPENBLAS_NUM_THREADS": "3"})


def test_the_command_runs_one_thread_and_its_pods_get_the_users_values(monkeypatch):
    monkeypatch.setattr(blas, "_USERS", {})
    monkeypatch.setitem(sys.modules, "numpy", None)  # pretend numpy is not loaded yet
    del sys.modules["numpy"]
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    blas.one_thread_here()
    assert all(os.environ[name] == "1" for name in THREAD_VARIABLES)
    children = user_environment(dict(os.environ))
    assert children["OPENBLAS_NUM_THREADS"] == "3"
    assert "OMP_NUM_THREADS" not in children and "MKL_NUM_THREADS" not in children


def test_too_late_once_numpy_is_loaded(monkeypatch):
    import numpy  # noqa: F401

    monkeypatch.setattr(blas, "_USERS", {})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    blas.one_thread_here()
    assert "OMP_NUM_THREADS" not in os.environ and blas._USERS == {}


def _threads_after_numpy(env: dict[str, str], one_thread: bool) -> int:
    probe = ("import os; from common import blas; " + ("blas.one_thread_here(); " if one_thread else "") +
             "import numpy; print(len(os.listdir('/proc/self/task')))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_one_thread_here_leaves_numpy_without_blas_workers():
    """The real effect, in processes of their own: numpy's BLAS starts no worker thread."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(dict.fromkeys(THREAD_VARIABLES, "4"))  # the user's setting: four threads
    assert _threads_after_numpy(env, one_thread=True) < _threads_after_numpy(env, one_thread=False)
    assert _threads_after_numpy(env, one_thread=True) == 1


def test_the_command_sets_it_before_its_main_runs(monkeypatch):
    from scheduler import cli

    seen = {}
    monkeypatch.setattr(blas, "_USERS", {})
    monkeypatch.setattr(cli.blas, "one_thread_here", lambda: seen.setdefault("set", True))
    monkeypatch.setattr(cli, "run_main_and_leave", lambda main: seen.setdefault("main_after", "set" in seen))
    # the dataclass code cache is a program's, not pytest's (tests/common/test_dataclass_code_cache.py)
    monkeypatch.setattr(cli.dataclass_code_cache, "install", lambda: None)
    cli.entry()
    assert seen == {"set": True, "main_after": True}
