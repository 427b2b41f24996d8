"""`//compiler -- cuda FILE ...` prints the generated CUDA C++; `... ptx FILE ... -o out.ptx`
writes the PTX. Tile values: --tile, else (with --autotune) the fastest point measured on this
machine's GPU, else the autotune cache's winner for these dims on this GPU (when there is one),
else each @autotune name's first value. A tuned or cached winner brings its code-generator
schedule (compiler/cuda/schedule.py) along. The code is for this machine's GPU, or for `--arch`
(a compute capability: 8.0, 86, sm_90), or without either for the H200 (compiler/cuda/target.py)."""

from __future__ import annotations

import argparse
import sys

from common.atomic import write_atomically
from common.cli import user_path
from common.errors import UserError
from compiler.cli.args import add_kernel_flag, add_value_flags, parse_assignments
from compiler.frontend.binding import bind


def register(subparsers) -> None:
    for name, help_text in (
        ("cuda", "print the CUDA C++ generated for one point of a kernel"),
        ("ptx", "compile a kernel to PTX with NVRTC and write it"),
    ):
        p = subparsers.add_parser(name, help=help_text)
        p.add_argument("file", help="kernel source (.phk)")
        add_kernel_flag(p)
        p.add_argument("--dim", action="append", metavar="NAME=N", help="a dimension value")
        add_value_flags(p, cluster=False)
        p.add_argument(
            "--tf32", action="store_true", help="f32 dots on TF32 tensor cores (operands rounded to TF32)"
        )
        p.add_argument(
            "--arch",
            metavar="CC",
            help="the GPU's compute capability (8.0, 8.6, sm_90, ...); default: this machine's GPU, else 9.0",
        )
        p.add_argument(
            "--autotune",
            action="store_true",
            help="time the @autotune search space on this machine's GPU first (cached)",
        )
        if name == "ptx":
            p.add_argument("-o", "--output", required=True, help="where to write the PTX")
        p.set_defaults(func=handle_cuda if name == "cuda" else handle_ptx)


def _capability(args: argparse.Namespace) -> int:
    """--arch, else this machine's GPU, else the H200 (compiler/cuda/target.py)."""
    from compiler.cuda import target

    if args.arch is None:
        return target.local_capability() or target.DEFAULT_CC
    cc = target.parse_cc(args.arch)
    if cc is None:
        raise UserError(f"--arch {args.arch}: expected a compute capability such as 8.0, 86 or sm_90")
    if cc < target.OLDEST_CC:
        raise UserError(f"--arch {args.arch}: phobos generates code for compute capability "
                        f"{target.cc_text(target.OLDEST_CC)} and later")
    here = target.local_capability() if args.autotune else None  # the GPU is asked only to time
    if here is not None and cc != here:
        raise UserError(f"--arch {args.arch} with --autotune: the tuner times this machine's GPU, "
                        f"of compute capability {target.cc_text(here)}")
    return cc


def _bound(args: argparse.Namespace):
    """(kernel, binding, schedule, cc): tile values and, when tuned, the code generator's
    schedule, for a GPU of compute capability cc."""
    from compiler.cuda.schedule import DEFAULT
    from compiler.frontend.load import load_file, select_kernel

    cc = _capability(args)
    dims = parse_assignments(args.dim, "--dim", int)
    tiles = parse_assignments(args.tile, "--tile", int)
    kernel = select_kernel(load_file(user_path(args.file)), args.kernel)
    schedule = DEFAULT
    if not tiles:
        from compiler.cuda.tuning import autotune

        if getattr(args, "autotune", False):
            if autotune.gpu_name() is None:
                raise UserError("--autotune needs a GPU (cupy sees none here); use --tile instead")
            result = autotune.tune(kernel, dims, tf32=args.tf32, cc=cc)
            print(
                f"// autotuned: {result.best} {result.schedule.key()} "
                f"({result.best_ms:.4f} ms{', cached' if result.cached else ''})",
                file=sys.stderr,
            )
        else:
            result = autotune.cached_result(kernel, bind(kernel, dims).dims, args.tf32, cc)
        if result is not None:
            tiles, schedule = result.best, result.schedule
    return kernel, bind(kernel, dims, None, tiles), schedule, cc


def handle_cuda(args: argparse.Namespace) -> int:
    from compiler.cuda.compiled import generate_source

    kernel, binding, schedule, cc = _bound(args)
    print(generate_source(kernel, binding, tf32=args.tf32, schedule=schedule, cc=cc).source, end="")
    return 0


def handle_ptx(args: argparse.Namespace) -> int:
    from compiler.cuda.compiled import compile_kernel
    from compiler.cuda.target import ptx_target

    kernel, binding, schedule, cc = _bound(args)
    compiled = compile_kernel(kernel, binding, tf32=args.tf32, schedule=schedule, cc=cc)
    target = user_path(args.output)
    write_atomically(target, compiled.ptx, label=f"-o {args.output}")
    print(
        f"wrote {compiled.entry} to {target} for {ptx_target(compiled.ptx)} (grid {compiled.grid}, "
        f"block {compiled.block}, {compiled.shared_bytes} bytes of shared memory)"
    )
    return 0
