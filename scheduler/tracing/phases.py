"""Where a job's time goes: the phases of one `phobos-sched JOB` command, for the trace and report.

Scheduler-side phases are stamped as they happen (Unix seconds, `PROCESS` for the command's own
ones, `JobRun` for the job's); pod-side ones are added up from the instruction events, whose
`copy_s` says how much of a load or store was spent waiting for host<->device copies (on a GPU
pod the copies of one piece run while the next piece is read or written, so only the part that
storage did not hide counts):

    start-up   imports (process start -> the command's own code), cli (the command's modules,
               its arguments, the job file), pods (start or reach them, login, hello: a local
               pod's imports and CUDA context fall here)
    compile    the job's kernel parsed, checked, the cluster program compiled, PTX for GPU pods
    plan
    staging    the outputs' staging copies created, in a thread of their own that starts once
               the job's files are locked: beside the PTX, the plan, the submission and the
               pods' first reads (so it is not on the job's path unless it outlasts them)
    staging_wait  what the job waited for it: from the first store that asked to write (or the
               job's end, when it stores nothing) to the copies being there; 0 when they were
    submit     the plans submitted -> the first instruction starts on any node: the plans'
               submission and the pods' set-up of the job (leaves compiled or their PTX loaded)
    read       loads, less their host-to-device copies          (summed over every node)
    h2d        host-to-device copies of loads (not hidden behind reading)
    compute    leaf launches
    d2h        device-to-host copies of stores (not hidden behind writing)
    write      stores, less their device-to-host copies
    fetch      tiles fetched from peers
    commit     fsync + rename of every output: `commit_fsync` the staging copies' fsync (the
               end of the outputs' write-back), `commit_record` the records, `commit_rename`
               the renames and their folders' fsync; the records' removal is the rest

Pod-side sums over several nodes and overlapping instructions can exceed the job's wall time; the
scheduler-side phases follow one another, but for `staging`, which runs beside the compile, the
plan, the submission and the run. `first_compute` is the command's start to the first
leaf launch on any node, `to_commit` the command's start to the end of the commit (what follows
is the pods' stop, for local pods, and the process's exit).
"""

from __future__ import annotations

import os
import time

from common import options

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SCHEDULER_PHASES = ("imports", "cli", "compile", "pods", "plan", "staging", "staging_wait", "submit", "run",
                    "commit")
POD_PHASES = ("read", "h2d", "compute", "d2h", "write", "fetch")


SETUP_ENV = options.SETUP_DONE


def process_start_time() -> float:
    """Unix time at which this process started (Linux: /proc; elsewhere: the first call), or at
    which tools/bazel finished its set-up (SETUP_ENV) when that is later: `bazel run` execs the
    program in the process tools/bazel started, whose first run builds the Python environment,
    which is not the program's imports."""
    return max(_proc_start_time(), options.current().setup_done)


def _proc_start_time() -> float:
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        started_ticks = int(fields[19])  # field 22 of stat, counted after the command name
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + started_ticks / _TICKS
    except (OSError, ValueError, IndexError):
        return _FIRST_CALL


_FIRST_CALL = time.time()


class ProcessMarks:
    """The command's own moments: started, imports done, job compiled, pods ready."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def mark(self, name: str, at: float | None = None) -> None:
        self.marks.setdefault(name, time.time() if at is None else at)

    def take(self) -> dict[str, float]:
        """The marks so far, forgotten here (a second job of the same process starts afresh)."""
        marks, self.marks = self.marks, {}
        return marks


PROCESS = ProcessMarks()


def job_phases(process: dict[str, float], job: dict[str, float], events: list[dict], t0: float) -> dict:
    """Seconds per phase. `process` and `job` hold Unix-time marks; `events` are trace events
    (times relative to `t0`, the job's start)."""
    phases: dict[str, float] = {}
    started = process.get("started")
    if started is not None and "imports_done" in process:
        phases["imports"] = process["imports_done"] - started
    phases["cli"] = _span(process, "imports_done", "prepare_start")
    compile_s = _span(process, "prepare_start", "prepare_end") + _span(job, "compile_start", "compile_end")
    phases["compile"] = compile_s
    phases["pods"] = _span(process, "pods_start", "pods_ready")
    phases["plan"] = _span(job, "plan_start", "plan_end")
    phases["staging"] = _span(job, "staging_start", "staging_end")
    phases["staging_wait"] = _staging_wait(job, events, t0)
    phases["run"] = _span(job, "submit_start", "run_end")
    phases["commit"] = _span(job, "commit_start", "commit_end")
    if "commit_synced" in job:
        phases["commit_fsync"] = _span(job, "commit_start", "commit_synced")
        phases["commit_record"] = _span(job, "commit_synced", "commit_recorded")
        phases["commit_rename"] = _span(job, "commit_recorded", "commit_renamed")
    # Looked up here, not at the top: the command marks its start with this module before it
    # starts its pods, which the instruction schema's dataclasses would delay.
    from schemas.instructions import KIND_NAMES  # a pod's "serve" events are not instructions

    instructions = [e["start"] for e in events if e["kind"] in KIND_NAMES]
    if instructions and "submit_start" in job:
        phases["submit"] = max(0.0, t0 + min(instructions) - job["submit_start"])
    phases.update(pod_phases(events))
    computes = [e["start"] for e in events if e["kind"] == "compute"]
    if computes and started is not None:
        phases["first_compute"] = t0 + min(computes) - started
    if started is not None and "commit_end" in job:
        phases["to_commit"] = job["commit_end"] - started
    return {name: round(value, 6) for name, value in phases.items()}


def _staging_wait(job: dict[str, float], events: list[dict], t0: float) -> float:
    """How long the job waited for its staging copies: a store's event starts when it asks to
    write, and pods hold it until the copies exist (pod/statemachine/machine.py)."""
    stores = [t0 + e["start"] for e in events if e["kind"] == "store"]
    needed = min(stores, default=job.get("run_end"))
    if needed is None or "staging_end" not in job:
        return 0.0
    return max(0.0, job["staging_end"] - needed)


def pod_phases(events: list[dict]) -> dict[str, float]:
    sums = dict.fromkeys(POD_PHASES, 0.0)
    for e in events:
        span = max(0.0, e["end"] - e["start"])
        copy = min(span, e.get("copy_s", 0.0))
        if e["kind"] == "load":
            sums["read"] += span - copy
            sums["h2d"] += copy
        elif e["kind"] == "store":
            sums["write"] += span - copy
            sums["d2h"] += copy
        elif e["kind"] in ("compute", "fetch"):
            sums[e["kind"]] += span
    return sums


def _span(marks: dict[str, float], start: str, end: str) -> float:
    if start in marks and end in marks:
        return max(0.0, marks[end] - marks[start])
    return 0.0


def phases_text(phases: dict) -> str:
    """One line for the summary: the phases in order, in seconds."""
    order = [*SCHEDULER_PHASES[:-1], *POD_PHASES, "commit"]
    parts = [f"{name} {phases[name]:.3f}" for name in order if name in phases]
    line = "phases (s): " + ", ".join(parts)
    if "first_compute" in phases:
        line += f"; command to first compute {phases['first_compute']:.3f}"
    return line
