"""scheduler/tracing/phases.py: the breakdown of a command's time that --trace and the report carry."""

from __future__ import annotations

import os
import time

from scheduler.tracing.phases import job_phases, phases_text, pod_phases, process_start_time


def _event(kind, start, end, copy_s=0.0):
    return {"kind": kind, "start": start, "end": end, **({"copy_s": copy_s} if copy_s else {})}


def test_pod_phases_split_loads_and_stores_into_storage_and_copy():
    events = [_event("load", 0.0, 1.0, copy_s=0.25), _event("load", 0.5, 1.0),
              _event("compute", 1.0, 3.0), _event("store", 3.0, 4.0, copy_s=0.5),
              _event("fetch", 0.0, 0.5), _event("allocate", 0.0, 9.0), _event("serve", 0.0, 9.0)]
    sums = pod_phases(events)
    assert sums == {"read": 1.25, "h2d": 0.25, "compute": 2.0, "d2h": 0.5, "write": 0.5, "fetch": 0.5}


def test_job_phases_follow_the_marks():
    process = {"started": 100.0, "imports_done": 100.5, "prepare_start": 100.625, "prepare_end": 100.75,
               "pods_start": 100.75, "pods_ready": 101.0}
    # the staging thread runs from the locks (101) beside the compile, the plan and the submission
    job = {"staging_start": 101.0, "compile_start": 101.0, "compile_end": 101.25, "plan_start": 101.25,
           "plan_end": 101.5, "submit_start": 101.5, "staging_end": 102.5, "run_end": 103.0,
           "commit_start": 103.0, "commit_end": 103.5}
    events = [_event("serve", 0.5, 0.5), _event("load", 1.125, 1.25), _event("compute", 1.25, 1.5),
              _event("store", 1.25, 1.75), _event("store", 1.5, 1.625)]
    phases = job_phases(process, job, events, t0=101.0)
    assert phases["imports"] == 0.5 and phases["cli"] == 0.125 and phases["compile"] == 0.375
    assert phases["pods"] == 0.25 and phases["plan"] == 0.25 and phases["staging"] == 1.5
    assert phases["submit"] == 0.625  # submitted at 101.5, the first instruction (not the serve) at 102.125
    assert phases["staging_wait"] == 0.25  # the first store asked at 102.25, the copies were there at 102.5
    assert phases["run"] == 1.5 and phases["commit"] == 0.5 and phases["compute"] == 0.25
    assert phases["first_compute"] == 2.25  # 101 + 1.25 - 100
    assert phases["to_commit"] == 3.5
    text = phases_text(phases)
    assert text.startswith("phases (s): imports 0.500, cli 0.125, compile 0.375, pods 0.250, plan 0.250, "
                           "staging 1.500, staging_wait 0.250, submit 0.625")
    assert text.endswith("command to first compute 2.250")


def test_staging_that_ends_before_the_first_store_costs_the_job_nothing():
    job = {"staging_start": 101.0, "staging_end": 101.25, "submit_start": 101.125, "run_end": 103.0}
    assert job_phases({}, job, [_event("store", 0.5, 0.75)], t0=101.0)["staging_wait"] == 0.0
    # a job that stores nothing waits for the copies only if it ends before they are there
    assert job_phases({}, {**job, "staging_end": 103.25}, [], t0=101.0)["staging_wait"] == 0.25
    assert job_phases({}, job, [], t0=101.0)["staging_wait"] == 0.0


def test_the_commit_is_split_by_its_marks_when_it_has_them():
    job = {"commit_start": 103.0, "commit_synced": 103.25, "commit_recorded": 103.375,
           "commit_renamed": 103.4375, "commit_end": 103.5}
    phases = job_phases({}, job, [], t0=101.0)
    assert phases["commit"] == 0.5
    assert (phases["commit_fsync"], phases["commit_record"], phases["commit_rename"]) == (0.25, 0.125, 0.0625)
    without = job_phases({}, {"commit_start": 103.0, "commit_end": 103.5}, [], t0=101.0)
    assert without["commit"] == 0.5 and "commit_fsync" not in without  # a trace without them


def test_process_start_time_is_in_the_past():
    started = process_start_time()
    assert started <= time.time() and time.time() - started < 24 * 3600


def test_imports_are_counted_from_the_end_of_tools_bazels_set_up_in_an_execd_program():
    """`bazel run` execs the program in the process tools/bazel started: a set-up before the exec
    (the Python environment's first build, 0.5 s of stand-in work here) is not the imports."""
    import subprocess
    import sys
    from pathlib import Path

    probe = ("from scheduler.tracing.phases import _proc_start_time, process_start_time; "
             "print(_proc_start_time(), process_start_time())")
    script = f'sleep 0.5; export PHOBOS_SETUP_DONE=$(date +%s.%N); exec "{sys.executable}" -c "{probe}"'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2], env={**os.environ, "PYTHONPATH": "."})
    forked, counted = map(float, done.stdout.split())
    assert counted - forked >= 0.5 - 0.02  # the set-up is left out (/proc counts in 10 ms ticks)


def test_a_setup_mark_before_the_process_or_malformed_is_ignored(monkeypatch):
    from scheduler.tracing import phases

    # (two readings of /proc differ by the clock's reading in between: microseconds)
    monkeypatch.setenv(phases.SETUP_ENV, "12.5")
    assert abs(process_start_time() - phases._proc_start_time()) < 0.01
    monkeypatch.setenv(phases.SETUP_ENV, "soon")
    assert abs(process_start_time() - phases._proc_start_time()) < 0.01
