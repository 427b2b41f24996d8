"""The `//compiler` command line: one subcommand per module, each module owning its own flags.

Each command module exposes `register(subparsers)`, which adds its parser(s) and sets
`func=handler` where `handler(args) -> int`. Keeping one module per command keeps this file a
table of contents and lets the commands grow independently.
"""

from __future__ import annotations

import argparse
import importlib

from common import log
from common.cli import run_main

# (module, what it provides); order is the order of `--help`.
COMMAND_MODULES = (
    "compiler.cli.check",  # check
    "compiler.cli.run",  # run (reference interpreter, or --device gpu)
    "compiler.cli.cuda",  # cuda, ptx
    "compiler.cli.cluster",  # cluster
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="phobos-compiler",
        description="Check, run and compile phobos tile kernels (.phk files).",
    )
    log.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    log.configure_from_args(args)
    log.get_logger(program="compiler").debug("started", argv=argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return args.func(args) or 0


def entry() -> None:
    run_main(main)
