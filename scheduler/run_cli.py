"""`phobos-sched JOB [flags]`: run a job file on pods and report.

Exit codes: 0 the job succeeded (and every --expect matched); 1 the job failed while running
(a node error, no node left) or an output differs from its --expect file; 2 a user error found
before anything ran (bad flags, job, kernel, storage, token, memory).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from common.cli import collect_again, user_path
from common.cluster_token import TOKEN_ENV, read_token
from common.errors import UserError
from compiler.cli.args import add_split_flags, add_value_flags, parse_assignments, split_from_args

if TYPE_CHECKING:  # numpy is imported where it is used: the pods start before it loads
    import numpy as np


def build_parser() -> argparse.ArgumentParser:
    from common import log

    p = argparse.ArgumentParser(
        prog="phobos-sched",
        description="Run a phobos job (a file written by `phobos-sched new-job`) over a cluster of pods. "
                    "Other commands: `phobos-sched new-job --help`, `phobos-sched show-job JOB`, "
                    "`phobos-sched recover JOB` (after a killed commit).",
        epilog="Without --pods, local pods are started: one per visible GPU, else two CPU pods, "
               "with a random token given to them through the environment; they stop when the job ends. "
               "See docs/runtime.md for running pods on several hosts.",
    )
    p.add_argument("job", help="the job file")
    p.add_argument("--pods", action="append", metavar="HOST:PORT,...",
                   help="addresses of running pods (comma-separated or repeated); node numbers follow "
                        "this order")
    p.add_argument("--local-pods", type=int, metavar="N",
                   help="start N local pods instead of the default count")
    p.add_argument("--token-file", metavar="PATH",
                   help=f"file holding the cluster's token, for --pods (default: ${TOKEN_ENV})")
    p.add_argument("--storage-root", action="append", metavar="DIR",
                   help="directory every storage URI must lie in (repeatable; default: the working "
                        "directory and the job file's directory); local pods get the same roots")
    p.add_argument("--heartbeat-interval", type=float, default=0.5, metavar="S",
                   help="seconds between a local pod's heartbeats (default 0.5)")
    p.add_argument("--heartbeat-timeout", type=float, default=5.0, metavar="S",
                   help="a pod silent this long is declared dead and its work re-planned (default 5); "
                        "local pods also exit when the scheduler is silent this long")
    add_value_flags(p, tile_help="a leaf @autotune value (repeat; overrides the job's)",
                    cluster_help="an @cluster value (repeat; overrides the job's)")
    add_split_flags(p, "split the cluster loop (overrides the job's; pinned under --autotune)")
    p.add_argument("--expect", action="append", metavar="NAME=FILE.npy",
                   help="after success, compare output NAME with FILE.npy (tolerance: see docs/runtime.md); "
                        "exit 1 when it differs")
    p.add_argument("--trace", metavar="FILE", help="write every instruction's start and end per node as JSON")
    p.add_argument("--report", metavar="FILE.html",
                   help="write the run's self-contained HTML report (code, super-tiles, timeline, bytes)")
    p.add_argument("--chrome-trace", metavar="FILE.json",
                   help="write the run in Chrome trace-event format (Perfetto, chrome://tracing)")
    p.add_argument("--pod-log-level", default="warning", help="log level of local pods (default warning)")
    log.add_arguments(p)
    from scheduler.tuning import tuner_cli  # the cluster tuner's flags (--autotune, ...), its own module

    tuner_cli.add_arguments(p)
    return p


def storage_roots(items: list[str] | None, job_path: Path) -> list[Path]:
    """The --storage-root folders, by default the working directory and the job file's folder."""
    roots = [user_path(r) for r in items or []] or [user_path("."), job_path.resolve().parent]
    for root in roots:
        if not root.is_dir():
            raise UserError(f"--storage-root {root}: not a directory")
    return roots


def _positive(flag: str, value: float) -> float:
    if not value > 0:
        raise UserError(f"{flag} must be positive, got {value}")
    return value


def parse_pods(items: list[str] | None) -> tuple[str, ...]:
    out = []
    for item in items or []:
        for address in item.split(","):
            address = address.strip()
            if not address:
                continue
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise UserError(f"--pods {address!r}: expected HOST:PORT")
            out.append(address)
    return tuple(out)


def load_expected(items: list[str] | None) -> dict[str, np.ndarray]:
    from common.storage import read_npy

    expected = {}
    for name, file in parse_assignments(items, "--expect", None).items():
        path = user_path(file)
        try:
            expected[name] = read_npy(path)
        except UserError as err:
            raise UserError(f"--expect {name}={file}: {err}") from None
    return expected


def compare(name: str, actual: np.ndarray, expected: np.ndarray) -> str | None:
    """None when equal within tolerance, else one line saying where and by how much.

    Tolerance: |a - e| <= 1e-4 * max(1, max|e|) + 1e-4 * |e|. The cluster path sums in a different
    order than numpy (per super-tile chunk, per CTA tile), and an f32 sum of n terms differs by
    about n * 2^-24 of its largest magnitude; 1e-4 of the output's scale covers sums of thousands
    of terms while still catching any misplaced or missing tile (an error of order 1)."""
    import numpy as np

    if actual.shape != expected.shape:
        return f"{name}: shape {list(actual.shape)} but expected {list(expected.shape)}"
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0)))
    with np.errstate(invalid="ignore"):  # inf - inf: such elements are judged by equality
        err = np.abs(a - e)
        tol = 1e-4 * scale + 1e-4 * np.abs(e)
        bad = ~((err <= tol) | (a == e) | (np.isnan(a) & np.isnan(e)))
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    worst = float(np.max(np.where(np.isfinite(err), err, 0.0)))
    return (f"{name}: {int(bad.sum())} of {a.size} elements differ; first at {list(index)}: "
            f"{float(a[index])!r} vs expected {float(e[index])!r} (largest finite error {worst:.3g}, "
            f"tolerance {1e-4 * scale:.3g} + 1e-4 relative)")


def run_command(argv: list[str]) -> int:
    # First thing: a SIGTERM before the job's orderly stop begins, or after it ends, stops the
    # pods started so far and exits 143 at once (_stop_at_once), whatever the command is doing.
    try:
        previous = signal.signal(signal.SIGTERM, _stop_at_once)
    except ValueError:  # not the main thread (an in-process caller): signals are the caller's
        return _command(argv)
    try:
        return _command(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)  # for callers in-process (tests); the CLI exits


def _command(argv: list[str]) -> int:
    from scheduler.tracing.phases import PROCESS, process_start_time

    PROCESS.mark("started", process_start_time())
    PROCESS.mark("imports_done")
    from common import log
    from scheduler.tuning import tuner_cli

    args = build_parser().parse_args(argv)
    job_path = user_path(args.job)
    roots = storage_roots(args.storage_root, job_path)
    pods = parse_pods(args.pods)
    if args.local_pods is not None and pods:
        raise UserError("--local-pods and --pods exclude each other")
    tune = tuner_cli.options_from_args(args)
    heartbeat = (_positive("--heartbeat-interval", args.heartbeat_interval),
                 _positive("--heartbeat-timeout", args.heartbeat_timeout))
    if pods or tune.active:  # the tuner starts the pods it needs itself
        log.configure_from_args(args)
        return _run(args, job_path, roots, pods, tune, heartbeat, None)
    from scheduler.pods.local_pods import spawn_for

    # First thing: the pods' start-up (imports, CUDA context) overlaps the command's own.
    started = None
    try:
        started = spawn_for(args.local_pods, roots, *heartbeat, args.pod_log_level)
        log.configure_from_args(args)  # after the spawn: it loads the standard library's logging
        return _run(args, job_path, roots, pods, tune, heartbeat, started)
    finally:
        if started is not None:  # the job sent them SIGTERM at its end: they are exiting by now
            started.stop_now()


def _stop_at_once(signum: int, _frame) -> None:
    """SIGTERM while no job runs (the job's own handler stops it in order: running/interrupt.py).
    No exception is raised into whatever the command is doing then: an import inside a broad
    `except` (the optional cupy ones) would swallow it and the job would run anyway, and one
    between a `try` and its `finally` would end in a traceback, exit 1. Instead the pods this
    process started are stopped and it exits 128 + the signal's number. Nothing the job writes has
    begun, or it is over; the command's own files (caches, dataclass code) are written atomically,
    as a kill -9 at any moment needs anyway."""
    from scheduler.pods.local_pods import stop_all_started

    stop_all_started()
    name = signal.Signals(signum).name
    os.write(2, f"error: interrupted by {name} while no job was running: the command's pods are "
                "stopped; outputs keep the contents the last finished job gave them\n".encode())
    os._exit(128 + signum)


def _run(args, job_path: Path, roots: list[Path], pods: tuple[str, ...], tune, heartbeat: tuple[float, float],
         started) -> int:
    from compiler.cluster.build import values_outside_space
    from scheduler import (
        api,  # the Python API's job path (phobos.run): one path, not two
    )
    from scheduler.running.interrupt import Interrupted
    from scheduler.running.run import JobFailed, RunOptions
    from scheduler.tracing.phases import PROCESS
    from scheduler.tuning import tuner_cli

    cluster_job = api.ClusterJob.load(job_path)
    token = read_token(args.token_file) if pods else None
    if pods and not token:
        raise UserError(f"--pods needs the cluster's token: --token-file PATH or set {TOKEN_ENV}")
    from common.atomic import refuse_read_only

    expected = load_expected(args.expect)
    asked = (("--trace", args.trace), ("--report", args.report), ("--chrome-trace", args.chrome_trace))
    outputs_of_run = {flag: user_path(value) for flag, value in asked if value}
    for flag, path in outputs_of_run.items():
        if not path.parent.is_dir():  # refuse before the job runs, not after
            raise UserError(f"{flag} {path}: folder {path.parent} does not exist")
        refuse_read_only(path, flag)
    cluster_values = parse_assignments(args.cluster, "--cluster", int)
    tile_values = parse_assignments(args.tile, "--tile", int)
    split = split_from_args(args)

    PROCESS.mark("prepare_start")
    prepared = api.prepare(cluster_job, roots, cluster_values, tile_values=tile_values,
                           any_values=tune.autotune, split=split)
    PROCESS.mark("prepare_end")
    collect_again()  # the command's imports are done (scheduler/cli.entry paused it for them)
    _save_dataclass_code()
    for line in values_outside_space(prepared.kernel, prepared.pinned_cluster):
        print(line, file=sys.stderr)
    for name in expected:
        if name not in prepared.tensors or prepared.tensors[name].role == "input":
            outputs = ", ".join(t.name for t in prepared.outputs)
            raise UserError(f"--expect {name}: not an output of kernel {cluster_job.kernel_name} "
                            f"(outputs: {outputs})")
    options = RunOptions(
        pods=pods, local_pods=args.local_pods, token=token, storage_roots=tuple(roots),
        heartbeat_interval=heartbeat[0], heartbeat_timeout=heartbeat[1],
        cluster_values=cluster_values, pod_log_level=args.pod_log_level, started_pods=started)
    try:
        if tune.active:
            tuned = tuner_cli.run_autotuned(prepared, options, tune)
            if tuned.result is None:  # --tune-only: the table is the answer
                return 0
            prepared, result = tuned.prepared, tuned.result
        else:
            result = api.run_prepared(prepared, options)
    except JobFailed as err:
        print(f"error: job failed: {err}", file=sys.stderr)
        return 1
    except Interrupted as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    return _report(result, prepared, expected, outputs_of_run)


def _save_dataclass_code() -> None:
    """The command's dataclasses are made by now: the code of those that were not in the cache
    written in a thread, beside the job (common/dataclass_code_cache.py)."""
    from common import dataclass_code_cache, log

    log.get_logger().debug("dataclass code cache", program="phobos-sched", **dataclass_code_cache.stats())
    dataclass_code_cache.save_in_background()


def _report(result, prepared, expected: dict[str, np.ndarray], outputs_of_run: dict[str, Path]) -> int:
    """The run's files, its summary and the --expect comparisons: the command's exit code."""
    from common.storage import read_npy
    from scheduler.tracing.tracefile import summary_text

    write_run_files(result.trace, outputs_of_run)
    print(summary_text(result.trace, result.ok, result.reason))
    if not result.ok:
        print(f"error: job failed: {result.reason}", file=sys.stderr)
        return 1
    for place in prepared.outputs:
        print(f"wrote {place.path}")
    failures = []
    for name, want in expected.items():
        problem = compare(name, read_npy(prepared.tensors[name].path), want)
        if problem:
            failures.append(problem)
        else:
            print(f"{name} matches the expected values")
    for problem in failures:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if failures else 0


def write_run_files(trace: dict, paths: dict) -> None:
    """The trace, the HTML report and the Chrome trace, each where its flag asked; each path is
    printed, so the user knows where to look."""
    from scheduler.tracing.tracefile import write_trace

    if "--trace" in paths:
        write_trace(trace, paths["--trace"])
    if "--report" in paths:
        from scheduler.report.page import write_report

        write_report(trace, paths["--report"])
    if "--chrome-trace" in paths:
        from scheduler.report.chrome_trace import write_chrome_trace

        write_chrome_trace(trace, paths["--chrome-trace"])
    for flag, path in paths.items():
        print(f"wrote {path} ({_RUN_FILES[flag]})")


_RUN_FILES = {"--trace": "trace", "--report": "HTML report", "--chrome-trace": "Chrome trace"}
