"""Pods started once serve job after job (`phobos-pod --keep-serving`, docs/runtime.md).

Three `phobos-sched JOB --pods ...` commands, each its own scheduler process, run against the same
two pod processes: every job is right, the pods are the same processes throughout (their pids do
not change), and a job that fails on a user error in between leaves them serving. Without
--keep-serving a pod exits when its scheduler leaves (the old behaviour, kept as the default).
"""

from __future__ import annotations

import json

import numpy as np

from tests.job_files import make_job, write_inputs
from tests.runtime.cluster import run_scheduler, start_pod

N = 4096


def test_three_jobs_against_the_same_pods(tmp_path):
    token = "keep-serving-test-0123456789"
    pods = [start_pod(tmp_path, token, "--keep-serving") for _ in range(2)]
    try:
        addresses = ",".join(address for _, address in pods)
        for round_ in range(3):
            a = np.arange(N, dtype=np.float32) * (round_ + 1)
            b = np.full(N, 0.5 * round_, dtype=np.float32)
            write_inputs(tmp_path, {"a": a, "b": b})
            job = make_job(tmp_path, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
            trace = tmp_path / "trace.json"
            done = run_scheduler(tmp_path, token, str(job), "--pods", addresses, "--cluster", "BLOCK=256",
                          "--trace", str(trace))
            assert done.returncode == 0, done.stdout + done.stderr
            np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), a + b)
            phases = json.loads(trace.read_text())["phases"]  # where the command's time went
            for name in ("imports", "compile", "pods", "plan", "staging", "run", "commit", "read", "h2d",
                         "compute", "d2h", "write", "first_compute"):
                assert phases[name] >= 0, name
            assert 0 < phases["first_compute"] and phases["compute"] > 0 and phases["read"] > 0
            assert "command to first compute" in done.stdout
            for pod, _ in pods:
                assert pod.poll() is None, "a --keep-serving pod exited after its scheduler left"
            if round_ == 1:  # a job refused before it runs leaves the pods serving too
                bad = run_scheduler(tmp_path, token, str(job), "--pods", addresses, "--cluster", "BLOCK=3")
                assert bad.returncode == 2, bad.stdout + bad.stderr
    finally:
        for pod, _ in pods:
            pod.kill()
            pod.wait()


def test_without_keep_serving_a_pod_exits_with_its_scheduler(tmp_path):
    token = "one-job-test-0123456789"
    write_inputs(tmp_path, {"a": np.ones(N, np.float32), "b": np.ones(N, np.float32)})
    job = make_job(tmp_path, "add", {"N": N}, {"a": "a", "b": "b", "c": "c"})
    pod, address = start_pod(tmp_path, token)
    try:
        done = run_scheduler(tmp_path, token, str(job), "--pods", address, "--cluster", "BLOCK=256")
        assert done.returncode == 0, done.stdout + done.stderr
        assert pod.wait(timeout=60) == 0
    finally:
        pod.kill()
        pod.wait()
