"""Parsing of the `NAME=VALUE` flags shared by the compiler's and the scheduler's commands."""

from __future__ import annotations

import argparse
import re

from common.errors import UserError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_assignments(items: list[str] | None, flag: str, kind: type | None = int) -> dict:
    """Turn `["N=1024", "M=8"]` into `{"N": 1024, "M": 8}`.

    `kind` converts the value (int, float, or None to keep the string). A malformed item, a bad
    value or a name given twice is a user error naming the flag and the item.
    """
    out: dict = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name) or not value.strip():
            raise UserError(f"{flag} {item!r}: expected NAME=VALUE")
        if name in out:
            raise UserError(f"{flag} {name} given twice")
        if kind is None:
            out[name] = value.strip()
            continue
        try:
            out[name] = kind(value.strip())
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise UserError(f"{flag} {name}={value}: value must be {what}") from None
    return out


def parse_scalars(items: list[str] | None) -> dict[str, float]:
    """Scalars are kept as floats here and converted to each parameter's declared type later."""
    return parse_assignments(items, "--scalar", float)


# ---- the flags every program spells the same way ----------------------------------------------
#
#   --kernel NAME      which kernel of a file holding several
#   --tile NAME=V      an @autotune value (the leaf's tile on the cluster path)
#   --cluster NAME=V   an @cluster value (the super-tile)
#
# Spellings of earlier versions fail with a message naming the new ones, not with argparse's
# "unrecognized arguments".

RETIRED_FLAGS = {
    "--set": "--set is gone: use --tile NAME=V for an @autotune value, "
             "--cluster NAME=V for an @cluster value",
    "--cluster-set": "--cluster-set is now --cluster NAME=V",
    "--name": "--name is now --kernel NAME (the kernel to use when the file holds several)",
}


class _Retired(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        raise UserError(RETIRED_FLAGS[self.option_strings[0]])


def add_split_flags(parser: argparse.ArgumentParser, what: str = "split the cluster loop") -> None:
    """--split N [--tree flat|binary|hosts] [--hosts A,B,..]: a cluster loop's chunks cut into N
    shares, one per node, merged by a reduction tree (docs/cluster.md, "Splitting a reduction")."""
    from compiler.cluster.tree_shapes import SHAPES

    parser.add_argument("--split", type=int, metavar="N", help=f"{what} over N shares, one per node")
    parser.add_argument("--tree", choices=SHAPES, help="the split's reduction tree (default flat)")
    parser.add_argument("--hosts", metavar="A,B,..", help="shares per host, for --tree hosts")


def add_cta_split_flag(parser: argparse.ArgumentParser) -> None:
    """--split N on a leaf's commands (run, check): the kernel's loop cut over N CTAs (the
    split-loop, docs/performance.md); 1 never splits; left out, the cost model decides."""
    parser.add_argument("--split", type=int, metavar="N",
                        help="cut the kernel's loop over N CTAs (1: never; default: the cost model's choice)")


def cta_split(args: argparse.Namespace) -> int | None:
    if args.split is not None and args.split < 1:
        raise UserError(f"--split {args.split}: the number of CTAs must be 1 or more")
    return args.split


def split_from_args(args: argparse.Namespace):
    """The SplitRequest the flags ask for, or None without --split."""
    from compiler.cluster.tree import SplitRequest

    if args.split is None:
        if args.hosts or args.tree:
            raise UserError("--tree and --hosts go with --split N")
        return None
    hosts: tuple[int, ...] = ()
    if args.hosts:
        try:
            hosts = tuple(int(h) for h in args.hosts.split(","))
        except ValueError:
            raise UserError(f"--hosts {args.hosts}: expected share counts such as 2,2") from None
    return SplitRequest(args.split, args.tree or "flat", hosts)


def add_kernel_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel", metavar="NAME", help="the kernel to use when the file holds several")


FIRST_VALUE = "(repeat; default: each name's first value)"


def add_value_flags(parser: argparse.ArgumentParser, *, cluster: bool = True,
                    tile_help: str = f"an @autotune value {FIRST_VALUE}",
                    cluster_help: str = f"an @cluster value {FIRST_VALUE}") -> None:
    """--tile, and --cluster where the command has a cluster level; the retired spellings fail
    naming these."""
    parser.add_argument("--tile", action="append", metavar="NAME=V", help=tile_help)
    if cluster:
        parser.add_argument("--cluster", action="append", metavar="NAME=V", help=cluster_help)
    for flag in RETIRED_FLAGS:
        parser.add_argument(flag, action=_Retired, nargs="?", help=argparse.SUPPRESS)
