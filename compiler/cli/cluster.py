"""`//compiler -- cluster FILE --dim ... [--set ...] [--cluster-set NAME=V] [--cuda]`: print the
cluster program of an @cluster kernel: its super-tile grid, each unit's regions and its leaves
(with `--cuda`, each leaf's generated CUDA C++ as well)."""

from __future__ import annotations

import argparse

from common.cli import user_path
from common.errors import UserError
from compiler.cli.args import parse_assignments
from compiler.cluster.build import compile_cluster
from compiler.cluster.text import format_program
from compiler.frontend.load import load_file


def register(subparsers) -> None:
    parser = subparsers.add_parser("cluster", help="print the cluster program of an @cluster kernel")
    parser.add_argument("file", help="the kernel source (.phk)")
    parser.add_argument("--kernel", help="the kernel to use when the file holds several")
    parser.add_argument("--dim", action="append", metavar="NAME=N", help="a dimension's value (repeat)")
    parser.add_argument("--set", action="append", metavar="NAME=V", help="a leaf @autotune value (repeat)")
    parser.add_argument(
        "--cluster-set",
        action="append",
        metavar="NAME=V",
        help="an @cluster value (repeat; default: each name's first value)",
    )
    parser.add_argument(
        "--units", type=int, default=16, metavar="N", help="units to list in full (default 16)"
    )
    parser.add_argument("--cuda", action="store_true", help="also print each leaf's CUDA C++ source")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    module = load_file(user_path(args.file), display_name=args.file)
    try:
        kernel = module.kernel(args.kernel)
    except KeyError:
        names = ", ".join(k.name for k in module.kernels)
        raise UserError(
            f"{args.file}: choose a kernel with --kernel (it has: {names})"
            if args.kernel is None
            else f"{args.file} has no kernel {args.kernel} (it has: {names})"
        ) from None
    program = compile_cluster(
        kernel,
        parse_assignments(args.dim, "--dim"),
        cluster_values=parse_assignments(args.cluster_set, "--cluster-set"),
        tile_values=parse_assignments(args.set, "--set"),
    )
    print(format_program(program, units_shown=max(0, args.units)))
    if args.cuda:
        print(leaf_cuda_sources(program))
    return 0


def leaf_cuda_sources(program) -> str:
    """Each leaf's CUDA C++ source, as the CUDA code generator writes it."""
    from compiler.cluster.leaves import load_leaf
    from compiler.cuda import compile_kernel

    out = []
    for leaf in program.leaves:
        kernel, binding = load_leaf(leaf)
        out.append(f"\n// ---- leaf {leaf.name} ----\n{compile_kernel(kernel, binding).cuda_source}")
    return "\n".join(out)
