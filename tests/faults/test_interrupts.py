"""Ctrl-C and SIGTERM stop a job (issue 16, point 8): the scheduler tells its pods to drop the job,
removes its staging files, leaves the outputs as they were and exits 130 (SIGINT) or 143
(SIGTERM); a second Ctrl-C exits at once; a Ctrl-C typed at a terminal (SIGINT to the whole
process group) is the same Ctrl-C, not "no node left".

The scheduler is a real process with its own local pods, on a job held running by a fault point
(`slow-at=compute:1:600`: the first compute of each pod waits ten minutes while the pod stays
responsive). Signals are sent once the job is seen running (its staging file exists); every wait
is for an event (a file, an exit), bounded by a generous timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.faults.harness import REPO, child_pids, process_alive, staging_files, wait_until
from tests.job_files import make_job

N = 4096
OLD = np.full(N, 7.0, np.float32)


def _start(folder, *extra: str) -> subprocess.Popen:
    np.save(folder / "a.npy", np.arange(N, dtype=np.float32))
    np.save(folder / "b.npy", np.ones(N, np.float32))
    np.save(folder / "c.npy", OLD)
    job = make_job(folder, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    env = dict(os.environ, PHOBOS_FAULT="slow-at=compute:1:600")  # reaches the local pods
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # a session of its own, as a shell gives a foreground job: the group is the scheduler's
    with open(folder / "scheduler.err", "w") as err:
        argv = [sys.executable, "-m", "scheduler.main", str(job), "--storage-root", str(folder),
                "--local-pods", "2", "--cluster", "BLOCK=1024", *extra]
        return subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)


def _running(folder, scheduler: subprocess.Popen) -> list[int]:
    """Wait until the job runs (its staging file exists, its two pods started); their pids."""
    wait_until(lambda: staging_files(folder) or scheduler.poll() is not None, 120, "the job to start")
    assert scheduler.poll() is None, _stderr(folder)
    pods = child_pids(scheduler.pid)
    assert len(pods) == 2, pods
    return pods


def _stderr(folder) -> str:
    return (folder / "scheduler.err").read_text()


def _finish(folder, scheduler: subprocess.Popen) -> tuple[int, str]:
    scheduler.wait(timeout=120)
    return scheduler.returncode, _stderr(folder)


@pytest.mark.parametrize("sig, code, to_group", [
    (signal.SIGINT, 130, False),
    (signal.SIGTERM, 143, False),
    (signal.SIGINT, 130, True),   # Ctrl-C at a terminal: the whole foreground process group
])
def test_a_signal_stops_the_job_removes_staging_and_keeps_the_output(tmp_path, sig, code, to_group):
    scheduler = _start(tmp_path)
    try:
        pods = _running(tmp_path, scheduler)
        if to_group:
            os.killpg(scheduler.pid, sig)
        else:
            scheduler.send_signal(sig)
        returncode, err = _finish(tmp_path, scheduler)
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
    assert returncode == code, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines and "interrupted" in lines[-1] and "Traceback" not in err, err[-3000:]
    assert "no node left" not in err
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), OLD)
    assert staging_files(tmp_path) == []
    wait_until(lambda: all(not process_alive(p) for p in pods), 30, "the local pods to exit")


def test_a_second_ctrl_c_exits_at_once(tmp_path):
    """With both pods frozen, a first Ctrl-C's orderly stop must wait for them (cancel calls time
    out, a stopped pod is killed only after a grace); a second Ctrl-C does not wait: the
    scheduler is gone while the frozen pods are still there to be killed."""
    scheduler = _start(tmp_path)
    pods = []
    try:
        pods = _running(tmp_path, scheduler)
        for pod in pods:
            os.kill(pod, signal.SIGSTOP)
        scheduler.send_signal(signal.SIGINT)
        wait_until(lambda: "interrupted" in _stderr(tmp_path), 60, "the first Ctrl-C to be taken")
        scheduler.send_signal(signal.SIGINT)
        returncode, _ = _finish(tmp_path, scheduler)
        assert returncode == 130
        assert all(process_alive(p) for p in pods), "the scheduler waited for its frozen pods"
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
        for pod in pods:
            if process_alive(pod):
                os.kill(pod, signal.SIGKILL)



def test_a_stopped_job_tells_the_commands_own_pods_to_drop_it_first(tmp_path):
    """An interrupted job is stopped in order on every pod, its own too: each is told to drop
    the job (its log says so) before it gets SIGTERM; only a job that came to its end spares
    its own pods that round trip (tests/scheduler/test_local_pods_start.py)."""
    scheduler = _start(tmp_path, "--pod-log-level", "info")
    try:
        _running(tmp_path, scheduler)
        scheduler.send_signal(signal.SIGINT)
        returncode, err = _finish(tmp_path, scheduler)
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
    assert returncode == 130, err[-3000:]
    assert err.count("job cancelled by the scheduler") == 2, err[-3000:]


def test_a_job_gives_the_signal_handlers_before_it_back_when_it_ends():
    """interruptible (the job's orderly stop) takes SIGINT and SIGTERM for the job's time only:
    after it the handlers from before are back, not asyncio's default action (a SIGTERM would kill
    the command while it writes its report, exit -15) nor KeyboardInterrupt."""
    import asyncio

    from scheduler.running.interrupt import interruptible

    def mine(signum, frame):
        raise AssertionError("not called")

    async def job():
        assert signal.getsignal(signal.SIGTERM) is not mine  # the job's own while it runs
        return "done"

    before = {s: signal.signal(s, mine) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert asyncio.run(interruptible(job())) == "done"
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
