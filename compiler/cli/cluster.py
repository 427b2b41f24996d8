"""`//compiler -- cluster FILE --dim ... [--tile NAME=V] [--cluster NAME=V] [--split N [--tree T]
[--hosts A,B,..]] [--verify] [--cuda]`: print the cluster program of an @cluster kernel: its
super-tile grid, each unit's regions and its leaves (with `--split`, the cluster loop split over N
shares merged by a tree; with `--verify`, the sequential reference run against the plain kernel on
random inputs; with `--cuda`, each leaf's generated CUDA C++ as well)."""

from __future__ import annotations

import argparse
import sys

from common.cli import user_path
from compiler.cli.args import (
    add_kernel_flag,
    add_split_flags,
    add_value_flags,
    parse_assignments,
    parse_scalars,
    split_from_args,
)
from compiler.cluster.build import compile_cluster, values_outside_space
from compiler.cluster.text import format_program
from compiler.frontend.load import load_file, select_kernel


def register(subparsers) -> None:
    parser = subparsers.add_parser("cluster", help="print the cluster program of an @cluster kernel")
    parser.add_argument("file", help="the kernel source (.phk)")
    add_kernel_flag(parser)
    parser.add_argument("--dim", action="append", metavar="NAME=N", help="a dimension's value (repeat)")
    add_value_flags(parser, tile_help="a leaf @autotune value (repeat; default: each name's first value)")
    parser.add_argument(
        "--units", type=int, default=16, metavar="N", help="units to list in full (default 16)"
    )
    add_split_flags(parser)
    parser.add_argument("--verify", action="store_true",
                        help="run the program's sequential reference and the plain kernel on random inputs "
                             "and print how far apart they are")
    parser.add_argument("--scalar", action="append", metavar="NAME=V", help="a scalar, for --verify (repeat)")
    parser.add_argument("--cuda", action="store_true", help="also print each leaf's CUDA C++ source")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    module = load_file(user_path(args.file), display_name=args.file)
    kernel = select_kernel(module, args.kernel)
    cluster_values = parse_assignments(args.cluster, "--cluster")
    for line in values_outside_space(kernel, cluster_values):
        print(line, file=sys.stderr)
    dims, tiles = parse_assignments(args.dim, "--dim"), parse_assignments(args.tile, "--tile")
    program = compile_cluster(kernel, dims, cluster_values=cluster_values, tile_values=tiles,
                              split=split_from_args(args))
    print(format_program(program, units_shown=max(0, args.units)))
    if args.verify:
        from compiler.cli.cluster_verify import verify

        print(verify(kernel, program, dims, tiles, parse_scalars(args.scalar)))
    if args.cuda:
        print(leaf_cuda_sources(program))
    return 0


def leaf_cuda_sources(program) -> str:
    """Each leaf's CUDA C++ source, as the CUDA code generator writes it."""
    from compiler.cluster.leaves import load_leaf
    from compiler.cuda.compiled import compile_kernel

    out = []
    for leaf in program.leaves:
        kernel, binding = load_leaf(leaf)
        out.append(f"\n// ---- leaf {leaf.name} ----\n{compile_kernel(kernel, binding).cuda_source}")
    return "\n".join(out)
