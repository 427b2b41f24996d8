"""Local pods: counted without starting CUDA, started before the command's compile, and stopped
whatever happens to the command (real pod processes, no GPU needed)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from common.errors import UserError
from scheduler.pods import forked_pod, local_pods
from scheduler.pods.local_pods import spawn_local_pods, visible_gpus
from tests.job_files import make_job, write_inputs

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("chosen,want", [
    (None, 4), ("0,1", 2), ("3", 1), ("", 0), ("-1", 0), ("0,7,1", 1), ("GPU-5d3c,1", 2), ("1, 2", 2),
])
def test_the_gpu_count_follows_the_driver_and_cuda_visible_devices(tmp_path, monkeypatch, chosen, want):
    for i in range(4):
        (tmp_path / f"0000:0{i}:00.0").mkdir()
    monkeypatch.setattr(local_pods, "DRIVER_GPUS", tmp_path)
    if chosen is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", chosen)
    assert visible_gpus() == want


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_spawned_pods_listen_once_ready_and_stop(tmp_path):
    pods = spawn_local_pods(["cpu", "cpu"], [tmp_path], local_pods.new_token())
    pids = [p.process.pid for p in pods.pods]
    assert all(_alive(pid) for pid in pids)  # started at once, not waited for

    async def use():
        await pods.ready()
        assert all(p.address.startswith("127.0.0.1:") for p in pods.pods)
        await pods.stop()

    asyncio.run(use())
    assert all(p.process.returncode is not None for p in pods.pods)
    assert not any(_alive(pid) for pid in pids)


def test_pods_of_a_command_that_never_ran_its_job_are_stopped(tmp_path):
    pods = spawn_local_pods(["cpu"], [tmp_path], local_pods.new_token())
    pods.stop_now()
    assert pods.pods[0].process.returncode is not None


def test_a_pod_that_exits_before_listening_is_a_user_error(tmp_path):
    pods = spawn_local_pods(["no-such-device"], [tmp_path], local_pods.new_token())

    async def wait():
        await pods.ready()

    with pytest.raises(UserError, match="exited with code 2 before listening"):
        asyncio.run(wait())


def _pods_serving(folder: Path) -> list[int]:
    """Pids of the live pod processes of a command run in `folder`: a pod started fresh names
    pod.main and the folder (its storage root) in its command line; a pod forked from the
    command (scheduler/pods/forked_pod.py) is named phobos-pod and keeps the command's line, whose
    job file lies in the folder."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            pod = "pod.main" in argv or (entry / "comm").read_text().strip() == forked_pod.POD_PROCESS_NAME
            if pod and any(str(folder) in arg for arg in argv):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            pass
    return found


@pytest.mark.parametrize("flag,message", [
    ("--cluster=BLOCK=3", "BLOCK"),  # refused by the compile, after the pods were started
    ("--expect=c=missing.npy", "missing.npy"),
])
def test_a_command_refused_after_starting_its_pods_leaves_none_running(tmp_path, flag, message):
    write_inputs(tmp_path, {"a": np.ones(1024, np.float32), "b": np.ones(1024, np.float32)})
    job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    done = subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--local-pods", "1", flag],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert _pods_serving(tmp_path) == []  # the pod, started first thing, was stopped


def test_a_command_leaves_with_its_pods_reaped_and_not_told_to_drop_the_job(tmp_path):
    """At a job's end the command's own pods get SIGTERM, not a `cancel` call first (a round
    trip for pods about to stop), and are reaped before the command exits: none is left the
    moment it has."""
    write_inputs(tmp_path, {"a": np.ones(1024, np.float32), "b": np.ones(1024, np.float32)})
    job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    done = subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--local-pods", "1",
                           "--pod-log-level", "info", "--trace", str(tmp_path / "trace.json")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "plan submitted" in done.stderr  # the pod's info lines do reach the command's stderr
    assert "job cancelled by the scheduler" not in done.stderr
    assert _pods_serving(tmp_path) == []
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.full(1024, 2, np.float32))


def test_a_command_terminated_while_it_compiles_stops_its_pods(tmp_path):
    """SIGTERM as soon as the command's pod exists (the command is then compiling, or at the
    latest starting the job): exit 143, no pod left running."""
    write_inputs(tmp_path, {"a": np.ones(1024, np.float32), "b": np.ones(1024, np.float32)})
    job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    command = subprocess.Popen([sys.executable, "-m", "scheduler.main", str(job), "--local-pods", "1"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _pods_serving(tmp_path) and command.poll() is None:
            assert time.monotonic() < deadline, "the pod never started"
            time.sleep(0.002)
        command.terminate()
        _, err = command.communicate(timeout=60)
    finally:
        command.kill()
    assert command.returncode in (143, 0), err  # 0: the job was done before the signal came
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while _pods_serving(tmp_path):
        assert time.monotonic() < deadline, "a pod outlived its command"
        time.sleep(0.01)


# The command run through its real entry point, held at one moment: the probe prints a marker
# there and sleeps, the test sends SIGTERM once it has read the marker (no race, no sleep).
_HELD_AT = """
import sys, time
moment, job = sys.argv[1], sys.argv[2]
def hold():
    print("held at", moment, flush=True)
    time.sleep(120)
if moment == "cupy import":  # inside `except Exception` (the GPU count, then the compile's target)
    class Hold:
        def find_spec(self, name, path=None, target=None):
            if name == "cupy":
                sys.meta_path.remove(self)
                hold()
    sys.meta_path.insert(0, Hold())
else:  # the report, after the job ended: asyncio's signal handling is over by then
    from scheduler import run_cli
    run_cli._report = lambda *args: hold()
sys.argv = ["phobos-sched", job, "--local-pods", "1"]
from scheduler.cli import entry
entry()
"""


@pytest.mark.parametrize("moment", ["cupy import", "report"])
def test_a_sigterm_while_no_job_runs_exits_143_at_once_with_no_pod_left(tmp_path, moment):
    """A SIGTERM that met an import inside a broad `except` was swallowed (the job then ran, exit
    0), one after the job met asyncio's default action (exit -15, pods left to time out), and one
    in a `finally` ended in a traceback (exit 1): now each stops the pods and exits 143."""
    write_inputs(tmp_path, {"a": np.ones(1024, np.float32), "b": np.ones(1024, np.float32)})
    job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    command = subprocess.Popen([sys.executable, "-c", _HELD_AT, moment, str(job)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert command.stdout.readline() == f"held at {moment}\n"
        command.terminate()
        _, err = command.communicate(timeout=60)
    finally:
        command.kill()
    assert command.returncode == 143, err
    assert "Traceback" not in err and "error: interrupted by SIGTERM while no job was running" in err
    assert _pods_serving(tmp_path) == []  # stopped and reaped before the command exited
    if moment == "report":
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.full(1024, 2, np.float32))


def test_the_command_spawns_its_pods_before_its_heavy_imports(tmp_path):
    """What the command has loaded at the moment it starts its first pod: nothing the pod's own
    start-up would wait behind (numpy, asyncio, capnp, the compiler's IR, the standard library's
    logging: 5-70 ms each here; `dataclasses`, with `inspect`, 7-10 ms; `subprocess`, ~5 ms, which
    only a pod started fresh needs). A fresh interpreter, with the spawn recorded."""
    probe = (
        "import os, sys\n"
        "from scheduler.pods import local_pods\n"
        "def record(self, argv, env, cwd, *fork):\n"
        "    heavy = ('numpy', 'asyncio', 'capnp', 'logging', 'compiler.frontend.ir', 'dataclasses',\n"
        "             'subprocess')\n"
        "    print(sorted(m for m in heavy if m in sys.modules), argv[argv.index('-m') + 1], flush=True)\n"
        "    os._exit(0)\n"
        "local_pods.PodProcess.__init__ = record\n"
        "from scheduler.cli import main\n"
        f"main([{str(tmp_path / 'job.capnp')!r}, '--local-pods', '1'])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "pod.main"]


def test_the_command_imports_without_the_cycle_collector_and_runs_its_job_with_it(tmp_path):
    """Off from the entry point through the imports (young-generation collections that find
    nothing, about 5% of the imports' CPU), on again, with what the imports made frozen, before
    the job runs: a long job's cyclic garbage is collected. A fresh interpreter, through the
    program's real entry point."""
    write_inputs(tmp_path, {"a": np.ones(1024, np.float32), "b": np.ones(1024, np.float32)})
    job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    probe = (
        "import gc, os, sys\n"
        "from scheduler import api; from scheduler.pods import local_pods\n"
        "real_init = local_pods.PodProcess.__init__\n"
        "def record_spawn(self, argv, env, cwd, *fork):\n"
        "    print('spawn', gc.isenabled(), flush=True)\n"
        "    real_init(self, argv, env, cwd, *fork)\n"
        "def record_run(prepared, options):\n"
        "    print('run', gc.isenabled(), gc.get_freeze_count() > 10000, flush=True)\n"
        "    options.started_pods.stop_now()\n"
        "    os._exit(0)\n"
        "local_pods.PodProcess.__init__ = record_spawn\n"
        "api.run_prepared = record_run\n"
        f"sys.argv = ['phobos-sched', {str(job)!r}, '--local-pods', '1']\n"
        "from scheduler.cli import entry\n"
        "entry()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["spawn False", "run True True"]


def test_a_cpu_pod_is_forked_from_a_command_with_the_environment_a_fresh_one_gets(tmp_path):
    """From a process that has loaded nothing heavy (the command at its spawn), a CPU pod is
    forked (scheduler/pods/forked_pod.py): named phobos-pod, in a session of its own, in the repo's
    folder, with the user's BLAS setting and the token in its environment, not the command's
    one BLAS thread. The pod's entry point is replaced by a probe that says what it sees."""
    probe = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from common import blas\n"
        "blas.one_thread_here()\n"
        "import pod.cli\n"
        "def seen():\n"
        "    comm = open('/proc/self/comm').read().strip()\n"
        "    held = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))\n"
        "    print('pod', comm, sys.argv[0], os.getsid(0) == os.getpid(), os.getcwd(),\n"
        "          os.environ['OPENBLAS_NUM_THREADS'], os.environ['PHOBOS_TOKEN'], held,\n"
        "          file=sys.stderr, flush=True)\n"
        "    os._exit(0)\n"
        "pod.cli.entry = seen\n"
        "from scheduler.pods.local_pods import spawn_local_pods\n"
        f"pods = spawn_local_pods(['cpu'], [Path({str(tmp_path)!r})], 'tok' * 10)\n"
        "held = list(signal.pthread_sigmask(signal.SIG_BLOCK, []))\n"
        "code = pods.pods[0].process.popen.wait(60)\n"
        "print('exit', code, os.environ['OPENBLAS_NUM_THREADS'], held, flush=True)\n"
    )
    env = dict(os.environ, OPENBLAS_NUM_THREADS="4", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pod_line = [line for line in done.stderr.splitlines() if line.startswith("pod ")]
    main_py = REPO / "pod" / "main.py"
    assert pod_line == [f"pod phobos-pod {main_py} True {REPO} 4 {'tok' * 10} []"], done.stderr
    assert done.stdout.split() == ["exit", "0", "1", "[]"]  # SIGINT and SIGTERM held only around the fork


def test_a_pod_is_started_fresh_from_a_process_with_numpy_loaded(tmp_path):
    """numpy loaded here (pytest's process): a fork would carry this process's BLAS threads
    into the pod, so the pod is a fresh interpreter, `python -m pod.main`."""
    assert "numpy" in sys.modules and not forked_pod.can_fork("cpu", "pod.main")
    pods = spawn_local_pods(["cpu"], [tmp_path], local_pods.new_token())
    try:
        # Popen returns once the exec is past its point of no return (the close-on-exec pipe shut),
        # which is before the kernel has set the new program's arguments: /proc shows an empty
        # command line for that moment (seen once in a clean-clone run). Wait for them to appear.
        cmdline = Path(f"/proc/{pods.pods[0].process.pid}/cmdline")
        deadline = time.monotonic() + 30
        while not cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.001)
        argv = cmdline.read_bytes().split(b"\0")
        assert b"pod.main" in argv
    finally:
        pods.stop_now()


def test_a_forked_pod_holds_no_descriptor_the_command_inherited(tmp_path):
    """A descriptor the command got from whoever started it (here an inheritable pipe's write
    end, as a harness's or a lock file's would be) is closed in a forked pod, as Popen's
    close_fds closes it in a fresh one: the pod never keeps a pipe open (its reader waiting for
    an end) or a lock held after the command. The command's own descriptors (close-on-exec) are
    not the child's to close. The pod's entry point is replaced by a probe saying what is open."""
    probe = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "import pod.cli\n"
        "inherited = int(sys.argv[1])\n"
        "own = os.open(os.devnull, os.O_RDONLY)\n"
        "def seen():\n"
        "    def is_open(fd):\n"
        "        try:\n"
        "            os.fstat(fd)\n"
        "            return True\n"
        "        except OSError:\n"
        "            return False\n"
        "    print('pod', is_open(inherited), is_open(own), file=sys.stderr, flush=True)\n"
        "    os._exit(0)\n"
        "pod.cli.entry = seen\n"
        "from scheduler.pods.local_pods import spawn_local_pods\n"
        f"pods = spawn_local_pods(['cpu'], [Path({str(tmp_path)!r})], 'tok' * 10)\n"
        "print('exit', pods.pods[0].process.popen.wait(60), flush=True)\n"
    )
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        done = subprocess.run([sys.executable, "-c", probe, str(write_end)], cwd=REPO, capture_output=True,
                              text=True, timeout=60, pass_fds=(write_end,))
    finally:
        os.close(write_end)
    os.set_blocking(read_end, False)
    try:
        assert os.read(read_end, 1) == b""  # every write end gone: the command's and the pod's
    finally:
        os.close(read_end)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("pod ")]
    assert said == ["pod False True"], done.stderr
    assert done.stdout.split() == ["exit", "0"]


def test_a_command_started_with_sigchld_ignored_runs_its_job_and_stops_its_pods(tmp_path):
    """A process started with SIGCHLD ignored (a disposition exec keeps: some supervisors leave
    it so) has its children reaped by the kernel, and waitpid finds none: the command's forked
    pod is waited for as Popen waits for a fresh one, its exit code then unknown, not a crash."""
    import signal

    write_inputs(tmp_path, {"a": np.ones(1024, np.float32), "b": np.ones(1024, np.float32)})
    job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    done = subprocess.run([sys.executable, "-m", "scheduler.main", str(job), "--local-pods", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN))
    assert done.returncode == 0, done.stderr
    assert _pods_serving(tmp_path) == []
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.full(1024, 2, np.float32))


def test_a_second_forked_pod_holds_no_end_of_the_first_ones_pipe(tmp_path):
    """Two CPU pods forked one after the other (the command's default without GPUs): the second
    gets a copy of the command's read end of the first's stdout, which it must not keep open;
    each pod holds only its own stdout's write end among the pipes."""
    probe = (
        "import os, stat, sys\n"
        "from pathlib import Path\n"
        "import pod.cli\n"
        "def seen():\n"
        "    fds = [int(fd) for fd in os.listdir('/proc/self/fd')]\n"
        "    pipes = []\n"
        "    for fd in fds:\n"
        "        try:\n"
        "            if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
        "                pipes.append(fd)\n"
        "        except OSError:\n"
        "            pass\n"
        # one write per line: the two pods say it at about the same time, and print's pieces
        # (separate writes under PYTHONUNBUFFERED) would interleave
        "    os.write(2, f'pod {pipes}\\n'.encode())\n"
        "    os._exit(0)\n"
        "pod.cli.entry = seen\n"
        "from scheduler.pods.local_pods import spawn_local_pods\n"
        f"pods = spawn_local_pods(['cpu', 'cpu'], [Path({str(tmp_path)!r})], 'tok' * 10)\n"
        "print('exit', [pod.process.popen.wait(60) for pod in pods.pods], flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("pod ")]
    assert said == ["pod [1, 2]", "pod [1, 2]"], done.stderr  # its stdout, and the command's stderr
    assert done.stdout.split() == ["exit", "[0,", "0]"]


def test_a_process_holding_many_descriptors_stops_its_pods(tmp_path):
    """The pods' pidfds then lie past 1023, where select refuses them: `stop_now` waits on them
    with poll (a Python program calling phobos may hold that many sockets or files)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if min(hard, 4096) < 1200:
        pytest.skip(f"at most {hard} descriptors here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    held = []
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        held = [null] + [os.dup(null) for _ in range(1100)]
        pods = spawn_local_pods(["cpu"], [tmp_path], local_pods.new_token())
        pods.stop_now()
        assert pods.pods[0].process.returncode is not None
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_command_started_with_stdout_closed_runs_its_job(tmp_path):
    """`phobos-sched JOB >&-`: the forked pod still says it listens (on a stdout of its own, the
    command's being None), and the command ends without a traceback, having printed nothing."""
    write_inputs(tmp_path, {"a": np.ones(1024, np.float32), "b": np.ones(1024, np.float32)})
    job = make_job(tmp_path, "add", {"N": 1024}, {"a": "a", "b": "b", "c": "c"})
    command = f"{sys.executable} -m scheduler.main {job} --local-pods 1 >&-"
    done = subprocess.run(["bash", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), np.full(1024, 2, np.float32))
    assert _pods_serving(tmp_path) == []


def test_the_ready_line_reader_closes_the_pods_pipe_at_its_end():
    """A pod's stdout is read to its end and closed there, not left open until the garbage
    collector finds it (a ResourceWarning in whatever code happened to run then)."""
    import threading
    from types import SimpleNamespace

    said = f"print('noise'); print('{local_pods.READY_LINE}127.0.0.1:5'); print('later')"
    popen = subprocess.Popen([sys.executable, "-c", said], stdout=subprocess.PIPE)
    child = SimpleNamespace(popen=popen, address=None, said=threading.Event())
    local_pods.read_ready_line(child)
    popen.wait()
    assert child.address == "127.0.0.1:5" and child.said.is_set()
    assert popen.stdout.closed
