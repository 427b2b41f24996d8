"""The //scheduler program. A placeholder that only knows its common flags; its commands come later."""

from __future__ import annotations

import argparse

from common import log
from common.cli import run_main


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="scheduler",
        description="Plan a phobos job and run it on a cluster of pods.",
    )
    log.add_arguments(parser)
    args = parser.parse_args(argv)
    log.configure_from_args(args)
    log.get_logger(program="scheduler").debug("started", argv=argv)
    parser.print_usage()
    return 0


if __name__ == "__main__":
    run_main(main)
