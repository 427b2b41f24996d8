"""The pod's command line: user errors are one line and exit 2; the token is never printed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.pod.harness import REPO


def pod_env() -> dict[str, str]:
    """The caller's environment without a token, the repo first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PHOBOS_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return env


def run_pod(args, env_token: str | None = None, timeout: float = 20):
    env = pod_env()
    if env_token is not None:
        env["PHOBOS_TOKEN"] = env_token
    return subprocess.run([sys.executable, "-m", "pod.main", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


T = "t" * 32  # a token long enough (16 bytes at least) for the errors after it to show


@pytest.mark.parametrize("args,token,message", [
    (["--listen", "127.0.0.1:0"], None, "no token: pass --token-file PATH or set PHOBOS_TOKEN"),
    (["--listen", "nonsense"], T, "--listen 'nonsense': expected HOST:PORT"),
    (["--listen", "127.0.0.1:99999"], T, "expected HOST:PORT"),
    (["--device", "gpu0"], T, "--device 'gpu0': expected a CUDA device number or 'cpu'"),
    (["--storage-root", "/no/such/dir"], T, "--storage-root /no/such/dir: not a directory"),
    (["--heartbeat-interval", "0"], T, "--heartbeat-interval must be positive"),
    (["--token-file", "/no/such/token"], None, "--token-file /no/such/token"),
    (["--listen", "127.0.0.1:0"], "t", "$PHOBOS_TOKEN: the token is 1 bytes, shorter than the 16"),
])
def test_user_errors_exit_2_with_one_line(args, token, message):
    proc = run_pod(args, token)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_a_pod_without_the_crc32c_package_refuses_to_start():
    """Where crc32c cannot be imported (a machine given the other wheels only), a pod that
    started would fail every tile it served or fetched through host memory: it exits 2 at once."""
    blocked = ("import runpy, sys; sys.modules['crc32c'] = None; "
               "runpy.run_module('pod.main', run_name='__main__')")  # None: `import crc32c` fails
    env = dict(pod_env(), PHOBOS_TOKEN=T)
    proc = subprocess.run([sys.executable, "-c", blocked, "--listen", "127.0.0.1:0"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "error: the crc32c package is not installed: a pod checks every tile it moves with "
        "it (CRC-32C); install third_party/requirements.lock"]


def test_empty_token_file_is_refused(tmp_path):
    (tmp_path / "token").write_text("\n")
    proc = run_pod(["--token-file", str(tmp_path / "token")])
    assert proc.returncode == 2 and "holds no token" in proc.stderr


def test_listening_line_and_no_token_in_the_logs(tmp_path):
    secret = "s3cr3t-token-value"
    (tmp_path / "token").write_text(secret + "\n")
    env = pod_env()
    proc = subprocess.Popen([sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0", "--token-file",
                             str(tmp_path / "token"), "--log-level", "debug"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PHOBOS_POD_LISTENING 127.0.0.1:")
        assert int(line.split(":")[-1]) > 0
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert out == ""  # exactly one line on stdout
    assert secret not in err


def test_cuda_start_thread_begins_after_numpy_is_imported():
    """A GPU pod imports cupy in a thread beside its own imports; both import numpy, and two
    threads inside numpy's circular imports at once once killed a pod before it listened
    ("cannot import name '__cpu_features__'", on the H200). So numpy must be whole before the
    thread starts. A fresh interpreter, with the thread's start recorded instead of run."""
    probe = (
        "import sys, threading\n"
        "import pod.cli\n"
        "assert 'numpy' not in sys.modules, 'pod.cli imports numpy itself: this test sees nothing'\n"
        "seen = []\n"
        "threading.Thread.start = lambda self: seen.append((self.name, 'numpy' in sys.modules))\n"
        "pod.cli.start_cuda('0')\n"
        "print(seen)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=pod_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('pod-cuda-start', True)]"


def test_a_cpu_pod_listens_before_the_compilers_front_end_loads():
    """The front end (parser, IR, binder) is what a CPU pod's first job needs, imported in the
    background once the pod listens (pod/cli.py, FIRST_JOB_MODULES); imported before, it held the
    pod 20-25 ms from listening, on the path of every command that starts its pods."""
    probe = ("import sys, pod.cli, pod.rpc.server\n"
             "backend = pod.cli.make_backend('cpu')\n"
             "print('compiler.frontend.ir' in sys.modules, backend.describe()[1] > 0)\n")
    assert fresh_probe(probe) == ["False", "True"]


def test_a_cpu_pod_ready_for_its_first_job_has_not_loaded_ml_dtypes():
    """ml_dtypes (bf16 only, about 10 ms) loads with the first bf16 tensor (common/storage.py),
    not with the server, the CPU backend or the modules a first job needs."""
    probe = ("import importlib, sys, pod.cli, pod.rpc.server\n"
             "backend = pod.cli.make_backend('cpu')\n"
             "for name in pod.cli.FIRST_JOB_MODULES['cpu']:\n"
             "    importlib.import_module(name)\n"
             "print('compiler.interp.interpreter' in sys.modules, 'ml_dtypes' in sys.modules)\n")
    assert fresh_probe(probe) == ["True", "False"]


def fresh_probe(probe: str) -> list[str]:
    """The words a probe prints, run in a fresh interpreter (what it has loaded can be seen)."""
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=pod_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_pod_imports_with_the_cycle_collector_off():
    """Off from the entry point (common/cli.pause_collection_for_imports): the server then
    collects on its own loop only. Seen at the moment the server would start serving."""
    probe = ("import gc, os, sys, pod.rpc.server\n"
             "async def serve(self, on_listening):\n"
             "    print('serving', gc.isenabled(), flush=True)\n"
             "    os._exit(0)\n"
             "pod.rpc.server.PodServer.serve = serve\n"
             "sys.argv = ['phobos-pod', '--listen', '127.0.0.1:0', '--device', 'cpu']\n"
             "from pod.cli import entry\n"
             "entry()\n")
    env = pod_env()
    env["PHOBOS_TOKEN"] = "t" * 43
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["serving", "False"]
