"""The `//scheduler` command line (phobos-sched).

    phobos-sched new-job K.phk [--kernel NAME] [--dim N=...] --scalar a=... --tensor T=URI
                 [--tile NAME=V] [--cluster NAME=V] [--split N [--tree T]] -o job.capnp
    phobos-sched show-job job.capnp
    phobos-sched job.capnp [--pods host:port,...] [--local-pods N] [--expect T=FILE.npy] [--trace FILE]
                 [--report FILE.html] [--chrome-trace FILE.json] ...
    phobos-sched recover job.capnp [--storage-root DIR]   finish or roll back a killed commit
    phobos-sched report TRACE.json -o FILE.html          the HTML report of a saved trace
    phobos-sched chrome-trace TRACE.json -o FILE.json    a saved trace in Chrome trace-event format
    srun -n N phobos-sched slurm JOB [run flags]         one pod per Slurm task, the scheduler in task 0

The first word picks the command; anything else is a job file to run.
"""

from __future__ import annotations

import argparse
import sys

from common import blas, dataclass_code_cache
from common.cli import collect_again, pause_collection_for_imports, run_main_and_leave, user_path
from common.errors import UserError
from compiler.cli.args import (
    FIRST_VALUE,
    add_kernel_flag,
    add_split_flags,
    add_value_flags,
    parse_assignments,
    parse_scalars,
    split_from_args,
)

COMMANDS = ("new-job", "show-job", "recover", "report", "chrome-trace", "slurm")


def new_job_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phobos-sched new-job",
        description="Write a job file: a kernel, its dimensions, scalars and one storage URI per tensor. "
                    "Every check that needs no pod runs here: a job that can never run is refused.",
        epilog="URIs: file:///abs/path.npy, or file:rel/path.npy, which is resolved against the folder "
               "holding the job file when the job runs. A --dim may be left out when an existing "
               "tensor file's shape gives it.",
    )
    p.add_argument("file", nargs="?", help="the kernel source (.phk)")
    add_kernel_flag(p)
    p.add_argument("--dim", action="append", metavar="NAME=N", help="a dimension value (repeat)")
    p.add_argument("--scalar", action="append", metavar="NAME=X", help="a scalar parameter (repeat)")
    p.add_argument("--tensor", action="append", metavar="NAME=URI", help="a tensor's storage URI (repeat)")
    add_value_flags(p, tile_help=f"pin a leaf @autotune value {FIRST_VALUE}",
                    cluster_help=f"pin an @cluster value {FIRST_VALUE}")
    add_split_flags(p, "pin a split of the cluster loop")
    p.add_argument("-o", "--output", required=True, help="the job file to write")
    return p


def show_job_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="phobos-sched show-job", description="Print a job file as text.")
    p.add_argument("job", help="the job file")
    return p


def recover_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phobos-sched recover",
        description="Finish or roll back a commit that a killed scheduler left beside the job's tensors, "
                    "and remove staging copies left by killed jobs. Running the job again does the same "
                    "first. Nothing is done to files a live job holds.")
    p.add_argument("job", help="the job file")
    p.add_argument("--storage-root", action="append", metavar="DIR",
                   help="directory every storage URI must lie in (as for running the job)")
    return p


def recover(argv: list[str]) -> int:
    from scheduler.jobs.job_storage import JobStorage
    from scheduler.jobs.jobfile import read_job
    from scheduler.jobs.prepare import prepare
    from scheduler.run_cli import storage_roots

    args = recover_parser().parse_args(argv)
    job_path = user_path(args.job)
    job = read_job(job_path)
    prepared = prepare(job, job_path, storage_roots(args.storage_root, job_path))
    said: list[str] = []

    def say(text: str) -> None:
        said.append(text)
        print(text)

    JobStorage.open(prepared, say=say).abandon()
    if not said:
        print("nothing to recover: no interrupted commit and no stale staging copy beside the job's tensors")
    return 0


def new_job(argv: list[str]) -> int:
    from scheduler.jobs.jobfile import checked_job, write_job
    from scheduler.jobs.prepare import check_new_job

    args = new_job_parser().parse_args(argv)
    if args.file is None:
        if args.kernel and args.kernel.endswith(".phk"):
            raise UserError(f"new-job takes the kernel file first: `new-job {args.kernel} "
                            "[--kernel NAME] ...`; --kernel now picks a kernel of the file by name")
        raise UserError("new-job needs the kernel file: `new-job FILE.phk --tensor NAME=URI ... -o JOB`")
    out = user_path(args.output)
    job, kernel = checked_job(
        user_path(args.file),
        args.kernel,
        dims=parse_assignments(args.dim, "--dim", int),
        scalars=parse_scalars(args.scalar),
        tensors=parse_assignments(args.tensor, "--tensor", None),
        cluster_values=parse_assignments(args.cluster, "--cluster", int),
        tile_values=parse_assignments(args.tile, "--tile", int),
        job_dir=out.resolve().parent,
        split=split_from_args(args),
    )
    for line in check_new_job(job, out, kernel):
        print(line, file=sys.stderr)
    write_job(job, out)
    print(f"wrote {out}")
    return 0


def show_job(argv: list[str]) -> int:
    from scheduler.jobs.jobfile import read_job, render_job

    args = show_job_parser().parse_args(argv)
    path = user_path(args.job)
    print(render_job(read_job(path), path))
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        collect_again()  # not timed: collected as usual (a job run turns it on before its run)
    if argv and argv[0] == "new-job":
        return new_job(argv[1:])
    if argv and argv[0] == "show-job":
        return show_job(argv[1:])
    if argv and argv[0] == "recover":
        return recover(argv[1:])
    if argv and argv[0] == "slurm":
        from scheduler.pods import slurm_cli

        return slurm_cli.main(argv[1:], run_job=main)
    if argv and argv[0] == "report":
        from scheduler.report import page as report

        return report.main(argv[1:])
    if argv and argv[0] == "chrome-trace":
        from scheduler.report import chrome_trace

        return chrome_trace.main(argv[1:])
    from scheduler.run_cli import run_command

    return run_command(argv)


def entry() -> None:
    dataclass_code_cache.install()  # before the first dataclass is made: common/dataclass_code_cache.py
    pause_collection_for_imports()
    blas.one_thread_here()  # before numpy loads (common/blas.py: the command multiplies no matrices)
    run_main_and_leave(main)


if __name__ == "__main__":
    entry()
